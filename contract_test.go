package lease_test

import (
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/leasetest"
)

// TestContract runs the exported conformance suite (package leasetest: the
// rules, the race, the model and the linearizability check) against the
// stores this package defines: the memory driver and the local store. The
// cases live only there; each driver package runs them on its own driver.
func TestContract(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		leasetest.TestDriver(t, func(*testing.T) lease.Driver { return lease.NewMemoryDriver() })
	})
	t.Run("local", func(t *testing.T) { leasetest.TestStore(t, openLocal) })
}

// openLocal opens a LocalStore on the test's root: every store of one test
// is a separate instance on one directory, contending as processes do.
func openLocal(t *testing.T, clock func() time.Time, owner string) lease.Store {
	t.Helper()
	root := leasetest.Shared(t, func() string { return t.TempDir() })
	s, err := lease.NewLocalStore(root, lease.WithOwner(owner), lease.WithClock(clock))
	if err != nil {
		t.Fatalf("NewLocalStore(%q) = %v", root, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
