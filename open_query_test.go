package lease_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasekit/lease"
)

// TestOpenFileURLRefusesQuery (issue 26, section 3): a file: URL with a
// query is refused before any directory is made, and the error shows
// none of it; the root would hold the query, and the errors that show
// the root would show the secret meant as a parameter.
func TestOpenFileURLRefusesQuery(t *testing.T) {
	dir := t.TempDir()
	s, err := lease.Open(context.Background(), "file:"+filepath.Join(dir, "leases")+"?password=Zx9Qw7Pe5")
	if err == nil {
		s.Close()
		t.Fatal("Open of a file: URL with a query succeeded")
	}
	if want := `lease: file: the URL has a query ("?")`; !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "Zx9") {
		t.Errorf("Open = %v; want an error starting %s that shows no secret", err, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("Open made %s", entries[0].Name())
	}
}
