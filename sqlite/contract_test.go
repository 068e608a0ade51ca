package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
	"github.com/leasekit/lease/leasetest"
)

// TestContract runs the conformance suite (package leasetest) on this
// driver: TestDriver over one driver that several stores share, and
// TestStore over stores that each open their own handle on one file, as
// separate processes do (a crash in the model closes the handle).
func TestContract(t *testing.T) {
	t.Run("driver", func(t *testing.T) { leasetest.TestDriver(t, openTestSQLite) })
	t.Run("handles", func(t *testing.T) { leasetest.TestStore(t, openSQLiteStore) })
	t.Run("R11 capabilities", func(t *testing.T) { testkit.WantCapabilities(t, openTestSQLite(t)) })
}

// openSQLiteStore opens a store on its own handle on the test's one file.
func openSQLiteStore(t *testing.T, clock func() time.Time, owner string) lease.Store {
	t.Helper()
	path := leasetest.Shared(t, func() string { return filepath.Join(t.TempDir(), "leases.db") })
	s, err := lease.Open(t.Context(), "sqlite:"+path, lease.WithOwner(owner), lease.WithClock(clock), lease.WithTTL(leasetest.TTL))
	if err != nil {
		t.Fatalf("Open(sqlite:%s) = %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestHeldModel runs leasetest's model of the Held layer (Hold, Release,
// Confirm, ReleaseAll, Close, waiters, storage faults) over this driver,
// whose stores keep their Helds through sessions (R18–R23); `make model`
// runs it with 1000 checks.
func TestHeldModel(t *testing.T) {
	leasetest.TestHeldModel(t, func(dir string) (lease.Driver, error) {
		return Open(filepath.Join(dir, "leases.db"))
	}, testkit.Checks(50))
}
