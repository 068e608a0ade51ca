package lease

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// steppedClock is a host's wall clock that a test can step, forwards or
// backwards, as NTP's first step at boot or a resumed VM does, while the
// monotonic clock runs on. Its readings carry no monotonic reading, as a
// persisted ExpiresAt has none. Stores read it through storeNow; the
// keeper, once useWallClock, through Now.
type steppedClock struct {
	mu    sync.Mutex
	by    time.Duration
	armed time.Duration // a step to make at the store's next reading
}

func (c *steppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.by).Round(0)
}

// storeNow is a store's reading: it makes the armed step first, so that
// the step falls inside a storage call, after the keeper read the clock
// to send it and before the store stamps the grant.
func (c *steppedClock) storeNow() time.Time {
	c.mu.Lock()
	c.by, c.armed = c.by+c.armed, 0
	c.mu.Unlock()
	return c.Now()
}

func (c *steppedClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.by += d
}

// stepInNextCall steps the clock by d inside the next storage call.
func (c *steppedClock) stepInNextCall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = d
}

// useWallClock makes the keeper read the wall clock through c, as it
// reads the host's, until the test ends. Call it before making stores:
// cleanups run last first, so it is undone after they closed.
func useWallClock(t *testing.T, c *steppedClock) {
	now := c.Now
	testWallClock.Store(&now)
	t.Cleanup(func() { testWallClock.Store(nil) })
}

// clockStepEnv is a bubble's driver, failing on demand, a stepped clock,
// which the keeper reads too, and alice's store through both; the TTL is
// holdTTL, the margin a sixth.
type clockStepEnv struct {
	holdEnv
	clock *steppedClock
	alice *DocumentStore
}

func newClockStepEnv(t *testing.T) clockStepEnv {
	e := clockStepEnv{holdEnv: newHoldEnv(t), clock: &steppedClock{}}
	useWallClock(t, e.clock)
	e.alice = e.storeOn(e.d, "alice")
	return e
}

// storeOn returns owner's store over d, on the stepped clock.
func (e clockStepEnv) storeOn(d Driver, owner string) *DocumentStore {
	e.t.Helper()
	s, err := NewDocumentStore(d, WithOwner(owner), WithTTL(holdTTL), WithClock(e.clock.storeNow))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = s.Close() })
	return s
}

const stepMargin = holdTTL / 6 // the default safety margin of holdTTL

// TestR8ClockStepForward: R8, R17. A forward step of the store's clock
// between the time a call is sent and the stamp it puts on the grant does
// not count into the grant's time to live: the Held's deadline is the
// call's send time plus the TTL minus the margin, so with storage out of
// reach the Held ends before the grant expires by the stamp, when another
// store, judging by the same clock, takes the key.
func TestR8ClockStepForward(t *testing.T) {
	for _, tc := range []struct {
		name       string
		step       time.Duration
		sentAt     time.Duration // when the call the step falls in is sent, from the Hold
		stepBefore bool          // the step comes inside the Hold's acquire; else before its first renewal
	}{
		{"during the acquire", time.Hour, 0, true},
		// Less than the 4s the grant has left at its renewal, or the
		// renewal finds it expired by the stepped clock.
		{"during a renewal", holdTTL / 2, holdTTL / 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newClockStepEnv(t)
				bob := e.storeOn(e.d.Driver, "bob") // storage stays in bob's reach
				if tc.stepBefore {
					e.clock.stepInNextCall(tc.step)
				}
				start := time.Now()
				h := mustHold(t, e.alice, "job")
				stopped := stopTime(t, h.Context())
				if !tc.stepBefore {
					time.Sleep(time.Second)
					e.clock.step(tc.step)
					time.Sleep(tc.sentAt) // the renewal, stamped ahead, has succeeded
				}
				if g := h.Grant(); g.ExpiresAt.Before(start.Add(tc.sentAt + holdTTL + tc.step)) {
					t.Fatalf("grant expires at %v; want it stamped after the step", g.ExpiresAt)
				}
				deadline := start.Add(tc.sentAt + holdTTL - stepMargin)
				if got := h.Deadline(); got.After(deadline) {
					t.Errorf("Deadline() = %v after the Hold; want at most %v (send time + TTL - margin)",
						got.Sub(start), deadline.Sub(start))
				}
				e.d.set(outageFail)

				time.Sleep(time.Until(start.Add(tc.sentAt + holdTTL))) // the grant's expiry by its stamp
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

// TestR8ClockStepBackward: R8, R17. A backward step of the clock, of more
// than the TTL, never turns a renewal or an acquire that succeeded into a
// loss: the Held stays live while its renewals succeed, and is released
// cleanly. A step inside the acquire, which the keeper's own later
// readings see too (as on a real host), leaves the grant short by the
// keeper's measure: it is renewed at once, and the Hold returns at once
// with the epoch it acquired, not one TTL later with the next epoch.
func TestR8ClockStepBackward(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stepBefore bool // the step comes inside the Hold's acquire; else before its first renewal
	}{
		{"during the acquire", true},
		{"during a renewal", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newClockStepEnv(t)
				if tc.stepBefore {
					e.clock.stepInNextCall(-time.Hour)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 10*holdTTL)
				defer cancel()
				start := time.Now()
				h, err := Hold(ctx, e.alice, "job")
				if err != nil {
					t.Fatalf("Hold = %v", err)
				}
				if took := time.Since(start); took != 0 {
					t.Errorf("Hold returned after %v of virtual time; want at once", took)
				}
				if g := h.Grant(); g.Epoch != 1 || g.PreviousUnclean {
					t.Errorf("Hold got epoch %d (PreviousUnclean %v); want epoch 1, clean: no epoch burnt", g.Epoch, g.PreviousUnclean)
				}
				if !tc.stepBefore {
					time.Sleep(time.Second)
					e.clock.step(-time.Hour)
				}
				time.Sleep(5 * holdTTL) // renewals, every one stamped an hour behind, succeed
				if err := h.Context().Err(); err != nil {
					t.Fatalf("Held ended after the step: %v", context.Cause(h.Context()))
				}
				if left := time.Until(h.Deadline()); left <= 0 || left > holdTTL-stepMargin {
					t.Errorf("Deadline() %v away; want within the TTL minus the margin", left)
				}
				if err := h.Release(t.Context()); err != nil {
					t.Errorf("Release = %v", err)
				}
			})
		})
	}
}

// TestR8DeadlineWithinRoundedExpiry: R8. A store whose driver keeps
// expiries to a coarse resolution rounds each grant's expiry down, so a
// renewal may grant less than the TTL: the Held's deadline stays the
// safety margin before the expiry its store stamped, renewal after
// renewal.
func TestR8DeadlineWithinRoundedExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := statingDriver{NewMemoryDriver(), Capabilities{ExpiryResolution: time.Second}}
		s, err := NewDocumentStore(d, WithOwner("alice"), WithTTL(holdTTL), WithClock(time.Now))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		time.Sleep(holdTTL / 12) // off the whole second: every expiry is rounded down
		h := mustHold(t, s, "job")
		for i := range 6 {
			if g, deadline := h.Grant(), h.Deadline(); deadline.After(g.ExpiresAt.Add(-h.margin)) {
				t.Errorf("grant %d: deadline %v after its expiry %v minus the margin %v",
					i, deadline.Round(0), g.ExpiresAt, h.margin)
			}
			time.Sleep(h.renew)
		}
		if err := h.Release(t.Context()); err != nil {
			t.Error(err)
		}
	})
}
