package lease_test

import (
	"testing"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
	"github.com/leasekit/lease/leasetest"
)

// TestHeldModel runs leasetest's model of the Held layer (Hold, Release,
// Confirm, ReleaseAll, Close, waiters, storage faults) over the memory
// driver, whose stores keep their Helds through sessions (R18–R23), and
// the local store (package sqlite runs it over SQLite). `make
// model` runs it with 1000 checks; a plain `go test` with fewer for the
// slower store.
func TestHeldModel(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		leasetest.TestHeldModel(t, func(string) (lease.Driver, error) { return lease.NewMemoryDriver(), nil }, testkit.Checks(100))
	})
	t.Run("file", func(t *testing.T) { leasetest.TestHeldModelStores(t, openUnwatchedLocal, testkit.Checks(50)) })
}

// openUnwatchedLocal opens a local store on dir whose waiters poll, as a
// synctest bubble needs (see lease.UnwatchedLocal).
func openUnwatchedLocal(dir, owner string) (lease.Store, error) {
	s, err := lease.NewLocalStore(dir, lease.WithOwner(owner))
	if err != nil {
		return nil, err
	}
	return lease.UnwatchedLocal(s), nil
}
