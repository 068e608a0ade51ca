package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/pgserver"
	"github.com/leasekit/lease/internal/storechild"
)

var ctxBG = context.Background()

// TestStoreChild is the store child's entry point (package childproc);
// run directly it does nothing.
func TestStoreChild(t *testing.T) { storechild.Serve(t) }

// newTestPostgresDriver makes a driver on a fresh table of the shared
// pool; it closes when the test ends.
func newTestPostgresDriver(t testing.TB) *postgresDriver {
	t.Helper()
	d, err := NewDriver(ctxBG, pgserver.SharedDB(t), Table(pgserver.FreshTable(t)))
	if err != nil {
		t.Fatalf("NewDriver: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d.(*postgresDriver)
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// pgQuote quotes s as an SQL string literal.
func pgQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
