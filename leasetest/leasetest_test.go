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

// TestWrappersStateNoSessions: the fault wrappers do not forward the
// session methods, so they state no Sessions, whatever the driver they
// wrap states (R24), and a store over them keeps every key per key.
func TestWrappersStateNoSessions(t *testing.T) {
	d := lease.NewMemoryDriver()
	if !lease.DriverCapabilities(d).Sessions {
		t.Fatal("the memory driver states no Sessions: nothing to hide")
	}
	for name, w := range map[string]lease.Driver{
		"FaultDriver": leasetest.NewFaultDriver(d),
		"Slow":        leasetest.Slow(d, time.Millisecond),
		"GarbageGets": leasetest.GarbageGets(d, nil),
	} {
		_, isSD := w.(lease.SessionDriver)
		if caps := lease.DriverCapabilities(w); caps.Sessions && !isSD {
			t.Errorf("%s states Sessions without the session methods (R24)", name)
		}
	}
}
