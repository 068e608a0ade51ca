package lease

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestR8ForeignStoreClockStep: R8. A Store of a type this package does
// not ship states no TTL, so the keeper measures it from the grants it
// gets. A step of the wall clock inside the first acquire, which the
// keeper's readings see too, is not learnt as part of the TTL. Forward
// (less than the TTL, so that the grant does not look short), the Held's
// deadline stays the TTL minus the margin after the acquire was sent, and
// with storage out of reach it ends before another store takes the key at
// the grant's stamped expiry. Backward, the TTL is not learnt short (nor
// negative, which no plan fits): the Held keeps the store's TTL and stays
// live while its renewals succeed.
func TestR8ForeignStoreClockStep(t *testing.T) {
	for _, tc := range []struct {
		name string
		step time.Duration
	}{
		{"forward", holdTTL / 2},
		{"backward", -holdTTL * 11 / 12},
		{"backward an hour", -time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newClockStepEnv(t)
				alice := plainStore{e.alice} // hides the TTL alice's store states
				bob := e.storeOn(e.d.Driver, "bob")
				e.clock.stepInNextCall(tc.step)
				start := time.Now()
				h := mustHold(t, alice, "job")
				t.Cleanup(func() { _ = h.Release(context.Background()) }) // its keeper is not alice's: end it before the bubble does
				deadline := start.Add(holdTTL - stepMargin)
				if got := h.Deadline(); !got.Equal(deadline) {
					t.Errorf("Deadline() = %v after the Hold; want %v (send time + TTL - margin)",
						got.Sub(start), deadline.Sub(start))
				}
				if tc.step < 0 {
					time.Sleep(5 * holdTTL)
					if err := h.Context().Err(); err != nil {
						t.Fatalf("Held ended: %v", context.Cause(h.Context()))
					}
					if err := h.Release(t.Context()); err != nil {
						t.Error(err)
					}
					return
				}
				stopped := stopTime(t, h.Context())
				e.d.set(outageFail)
				time.Sleep(holdTTL) // the last grant's expiry by its stamp
				g, err := bob.Acquire(t.Context(), "job")
				if err != nil {
					t.Fatalf("bob's Acquire at the grant's expiry = %v", err)
				}
				if h.Context().Err() == nil {
					t.Fatalf("alice's Held still live while bob holds epoch %d", g.Epoch)
				}
				if at := stopped(); at.After(deadline) {
					t.Errorf("alice's Held ended %v after the Hold; want by %v", at.Sub(start), deadline.Sub(start))
				}
				wantStopped(t, h)
			})
		})
	}
}

// renewFails is a caller's Store whose next failures renewals fail.
type renewFails struct {
	plainStore
	failures *atomic.Int32
}

func (s renewFails) Renew(ctx context.Context, g Grant) (Grant, error) {
	if s.failures.Add(-1) >= 0 {
		return Grant{}, &StorageError{Op: "renew", Key: g.Key, Err: errOutage}
	}
	return s.plainStore.Renew(ctx, g)
}

// TestR17UnmeasuredGrantGivenBack: R8, R17. A foreign store's first grant
// comes across a step of the clock, so it measures nothing, and its
// renewal at once fails: the grant goes back at once rather than stay held
// by nobody until it expires, and the Hold gets the next epoch, clean,
// without waiting for the expiry.
func TestR17UnmeasuredGrantGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newClockStepEnv(t)
		failures := new(atomic.Int32)
		failures.Store(1)
		alice := renewFails{plainStore{e.alice}, failures}
		e.clock.stepInNextCall(-time.Hour)
		start := time.Now()
		h := mustHold(t, alice, "job")
		t.Cleanup(func() { _ = h.Release(context.Background()) })
		if took := time.Since(start); took >= holdTTL/2 {
			t.Errorf("Hold took %v of virtual time; want it well within the first grant's TTL", took)
		}
		if g := h.Grant(); g.Epoch != 2 || g.PreviousUnclean {
			t.Errorf("Hold got epoch %d (PreviousUnclean %v); want epoch 2, clean: the first grant given back", g.Epoch, g.PreviousUnclean)
		}
	})
}

// steppingAcquires is a caller's Store whose every Acquire comes across a
// step of the clock (alternately back and forward an hour), so that no
// grant of it can be measured, and whose renewals always fail.
type steppingAcquires struct {
	renewFails
	clock    *steppedClock
	acquires *atomic.Int32
}

func (s steppingAcquires) Acquire(ctx context.Context, key string) (Grant, error) {
	n := s.acquires.Add(1)
	if n > 100 { // a loop without backoff: fail its calls, so that the test ends
		return Grant{}, &StorageError{Op: "acquire", Key: key, Err: errOutage}
	}
	step := time.Hour
	if n%2 == 1 {
		step = -time.Hour
	}
	s.clock.stepInNextCall(step)
	return s.renewFails.Acquire(ctx, key)
}

// TestR17UnusableGrantsBackOff: R17. A store whose grants can never be
// kept (none can be measured, and every renewal fails) has each grant
// given back, and the waiting Hold looks again after a growing backoff,
// as after any failed look: it is not asked again at the speed of its
// calls.
func TestR17UnusableGrantsBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newClockStepEnv(t)
		failures := new(atomic.Int32)
		failures.Store(1 << 30)
		acquires := new(atomic.Int32)
		alice := steppingAcquires{renewFails{plainStore{e.alice}, failures}, e.clock, acquires}
		const patience = 3 * time.Second
		ctx, cancel := context.WithTimeout(t.Context(), patience)
		defer cancel()
		if h, err := Hold(ctx, alice, "job"); err == nil {
			_ = h.Release(context.Background())
			t.Fatalf("Hold of a store whose renewals all fail = a Held of epoch %d; want an error", h.Grant().Epoch)
		}
		// Backoffs from holdMinBackoff doubling to holdMaxBackoff: a few
		// looks in the patience, where no backoff would make thousands.
		if n := acquires.Load(); n > 12 {
			t.Errorf("%d acquires in %v; want a growing backoff between them (at most 12)", n, patience)
		}
	})
}
