package postgres

import (
	"os"
	"testing"

	"github.com/leasekit/lease/internal/pgserver"
)

// TestMain stops every PostgreSQL server the tests started, whatever the
// result.
func TestMain(m *testing.M) {
	code := m.Run()
	pgserver.Cleanup()
	os.Exit(code)
}
