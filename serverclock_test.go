package lease_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/hostclock"
	"github.com/leasekit/lease/internal/testclock"
)

// TestServerClockJudgesByServer_R8: over a driver that states
// ServerClock, stores whose hosts' clocks are days off the server's
// (testclock.Start; the hosts read time.Now, shifted a year either way)
// stamp, take, renew and list by the server's clock alone; a store given
// WithClock judges by that clock instead.
func TestServerClockJudgesByServer_R8(t *testing.T) {
	ctx := context.Background()
	server := testclock.New()
	d := lease.NewServerClockMemoryDriver(server.Now)
	const ttl = 10 * time.Second
	store := func(owner string, offset time.Duration) *lease.DocumentStore {
		s, err := lease.NewDocumentStore(d, lease.WithOwner(owner), lease.WithTTL(ttl),
			hostclock.Option(hostclock.Skewed(offset)).(lease.Option))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	behind, ahead := store("behind", -365*24*time.Hour), store("ahead", 365*24*time.Hour)

	g, err := behind.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// The store's estimate adds the real time since the server's reading:
	// microseconds here, well under a second.
	if want := testclock.Start.Add(ttl); g.ExpiresAt.Before(want) || g.ExpiresAt.After(want.Add(time.Second)) {
		t.Fatalf("R8: grant expires at %v; want the server's clock plus the TTL, %v", g.ExpiresAt, want)
	}
	if _, err := ahead.Acquire(ctx, "k"); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("R8: a store whose host's clock is past the expiry acquired a key the server's clock says is held: %v", err)
	}
	if rec, err := ahead.Holder(ctx, "k"); err != nil || rec.Owner != "behind" {
		t.Fatalf("R8, R14: Holder by a store ahead = %+v, %v; want the live holder", rec, err)
	}

	server.Advance(ttl + time.Second) // past the microseconds the estimate added
	// The fake server's clock jumped, as no real one does against the
	// host's monotonic clock: a read gives the store its new reading.
	if _, err := behind.Holder(ctx, "k"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("R8, R14: Holder by a store behind, after the server's expiry: %v; want ErrNotFound", err)
	}
	if _, err := behind.Renew(ctx, g); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("R6, R8: renewal after the server's clock passed the expiry: %v; want ErrLost", err)
	}
	taken, err := ahead.Acquire(ctx, "k")
	if err != nil || taken.Epoch != 2 || !taken.PreviousUnclean {
		t.Fatalf("R4f, R8: another store, after the server's expiry: %+v, %v; want epoch 2, PreviousUnclean", taken, err)
	}

	// WithClock opts out: the store judges by the clock it was given.
	own := testclock.New()
	own.Advance(time.Hour)
	withClock, err := lease.NewDocumentStore(d, lease.WithOwner("own-clock"), lease.WithTTL(ttl), lease.WithClock(own.Now))
	if err != nil {
		t.Fatal(err)
	}
	defer withClock.Close()
	g, err = withClock.Acquire(ctx, "k")
	if err != nil || !g.ExpiresAt.Equal(own.Now().Add(ttl)) {
		t.Fatalf("R8: a store given WithClock took %+v, %v; want the key, expiring by its own clock at %v", g, err, own.Now().Add(ttl))
	}
}

// TestServerClockHoldTakesUpShortGrant_R8: a Hold that takes up a grant
// its store already holds from a bare Acquire (R4c) measures the time
// left on it by the server's clock, not by its host's: on a host ten
// minutes behind the server, the Held's deadline still comes before the
// server's expiry minus the margin.
func TestServerClockHoldTakesUpShortGrant_R8(t *testing.T) {
	var mu sync.Mutex
	ahead := 10 * time.Minute
	server := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return time.Now().Add(ahead)
	}
	const ttl, margin = 30 * time.Second, 5 * time.Second
	s, err := lease.NewDocumentStore(lease.NewServerClockMemoryDriver(server), lease.WithOwner("behind"), lease.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Acquire(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	ahead += 20 * time.Second // the server's clock, 20 s on: 10 s are left on the grant
	mu.Unlock()
	// The fake server's clock jumped, as no real one does against the
	// host's monotonic clock: a read gives the store its new reading.
	if _, err := s.Holder(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	h, err := lease.Hold(t.Context(), s, "k", lease.SafetyMargin(margin))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	const slack = 50 * time.Millisecond // the server clock's estimate is conservative by a call's time
	if left, most := time.Until(h.Deadline()), h.Grant().ExpiresAt.Sub(server())-margin; left > most+slack {
		t.Errorf("the Held's deadline is %v away; want at most %v, the server's expiry minus the margin", left, most)
	}
}
