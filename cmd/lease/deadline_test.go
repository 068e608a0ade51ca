package main

import (
	"testing"
	"time"

	"github.com/leasekit/lease"
)

// TestGuardDeadlineIsTheHelds: R8. The deadline lease run gives its guard
// is the Held's own, on the monotonic clock: a step of the store's wall
// clock (here an hour forward, before the grant is stamped) does not move
// it past the time the acquire was sent plus the TTL minus the margin.
func TestGuardDeadlineIsTheHelds(t *testing.T) {
	if !hasMonoClock {
		t.Skip("no monotonic clock shared between processes on this system")
	}
	const ttl, margin = time.Minute, 10 * time.Second
	stepped := func() time.Time { return time.Now().Add(time.Hour).Round(0) }
	s, err := lease.NewDocumentStore(lease.NewMemoryDriver(), lease.WithTTL(ttl), lease.WithClock(stepped))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sent := monoNow()
	h, err := lease.Hold(t.Context(), s, "k", lease.SafetyMargin(margin))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(t.Context())
	held := monoNow() // the acquire was sent between sent and held
	var sv supervisor
	if got, most := sv.deadline(h), held+int64(ttl-margin); got > most || got <= sent {
		t.Errorf("the guard's deadline is %v after Hold returned; want at most %v (TTL - margin)",
			time.Duration(got-held), ttl-margin)
	}
}
