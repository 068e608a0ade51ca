package sqlite

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasekit/lease"
)

// TestOpenSQLiteURLRefusesQuery (issue 26, section 3): an sqlite: URL
// with a query is refused before anything is created, and the error shows
// none of it; the path would hold the query, and the errors that show the
// path would show the secret meant as a parameter.
func TestOpenSQLiteURLRefusesQuery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	s, err := lease.Open(ctxBG, "sqlite:"+path+"?_auth_pass=Zx9Qw7Pe5")
	if err == nil {
		s.Close()
		t.Fatal("Open of an sqlite: URL with a query succeeded")
	}
	if want := `lease: sqlite: the URL has a query ("?")`; !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "Zx9") {
		t.Errorf("Open = %v; want an error starting %s that shows no secret", err, want)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 0 {
		t.Errorf("Open created %s", entries[0].Name())
	}
}
