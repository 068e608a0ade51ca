package leasetest_test

import (
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/leasetest"
)

// TestStoreOnOneBackend: the simplest opener, one backend for the whole
// suite with the store's default TTL, works as well as one backend per
// test: every case keeps to keys of its own, and the TTL is measured.
func TestStoreOnOneBackend(t *testing.T) {
	d := lease.NewMemoryDriver()
	leasetest.TestStore(t, func(t *testing.T, clock func() time.Time, owner string) lease.Store {
		s, err := lease.NewDocumentStore(d, lease.WithOwner(owner), lease.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
