package lease_test

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/leasetest"
	"github.com/leasekit/lease/sqlite"
)

// TestHeldModel runs leasetest's model of the Held layer (Hold, Release,
// Confirm, ReleaseAll, Close, waiters, storage faults) over the memory
// driver, SQLite and the local store. `make model` runs it with 1000
// checks; a plain `go test` with fewer for the slower backends.
func TestHeldModel(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		leasetest.TestHeldModel(t, func(string) (lease.Driver, error) { return lease.NewMemoryDriver(), nil }, heldChecks(100))
	})
	t.Run("sqlite", func(t *testing.T) { leasetest.TestHeldModel(t, openSQLiteIn, heldChecks(50)) })
	t.Run("file", func(t *testing.T) { leasetest.TestHeldModelStores(t, openUnwatchedLocal, heldChecks(50)) })
}

// heldChecks is n, or 0 (rapid's -rapid.checks) when that flag was given.
func heldChecks(n int) int {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "rapid.checks" })
	if given {
		return 0
	}
	return n
}

// openSQLiteIn opens a SQLite driver on a new file in dir: the one place
// that names the SQLite driver's package.
func openSQLiteIn(dir string) (lease.Driver, error) {
	return sqlite.Open(filepath.Join(dir, "leases.db"))
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
