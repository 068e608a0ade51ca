package lease_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/leasetest"
)

// TestModel runs leasetest's model over SQLite stores that each open their
// own handle on one file, as separate processes do; a crash closes the
// handle. (TestContract runs the model over one shared driver of every
// kind, and over the local store.)
func TestModel(t *testing.T) {
	leasetest.TestModel(t, func(t *testing.T, clock func() time.Time, owner string) lease.Store {
		path := leasetest.Shared(t, func() string { return filepath.Join(t.TempDir(), "leases.db") })
		s, err := lease.Open(t.Context(), "sqlite:"+path, lease.WithOwner(owner), lease.WithClock(clock), lease.WithTTL(leasetest.TTL))
		if err != nil {
			t.Fatalf("Open(sqlite:%s) = %v", path, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}, 0)
}
