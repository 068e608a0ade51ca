package lease_test

import (
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/leasetest"
)

// TestContract runs the exported conformance suite (package leasetest: the
// rules, the race, the model and the linearizability check) against every
// driver of the one table (drivers_test.go) and the local store. The cases
// live only there.
func TestContract(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.Name, func(t *testing.T) { leasetest.TestDriver(t, d.Open) })
	}
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
