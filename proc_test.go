//go:build unix

package lease

import (
	"testing"

	"github.com/leasekit/lease/internal/childproc"
)

// Cross-process tests run real OS processes: the test binary runs itself
// again as a store child (package childproc has the protocol; the child's
// entry, TestStoreChild, is in storechild_test.go, in the external test
// package, since the child's side imports lease).

// procKey is the key the store children lease.
const procKey = childproc.StoreKey

// child is a running child process as its parent test sees it.
type child = childproc.Child

// startChild runs the test binary as a child on the store at url, and
// waits until it has opened the store.
func startChild(t *testing.T, url, owner string) *child {
	t.Helper()
	return childproc.StartStore(t, url, owner)
}

// TestProcessRace: 8 processes, each with its own local store on one
// directory, race for one key over 6 rounds (childproc.StoreRace: R2, R4,
// R5). The local store has no expiry: every round ends in a release. The
// document drivers run the same race in their own packages.
func TestProcessRace(t *testing.T) {
	childproc.StoreRace(t, "file:"+t.TempDir(), false)
}
