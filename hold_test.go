package lease

import (
	"context"
	"errors"
	"iter"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The Hold tests run in synctest bubbles: time.Now and timers are virtual,
// so hours of renewals take no real time, and a bubble whose goroutines
// are still blocked when the test function returns fails the test, which
// is the leak check for Hold's renewal goroutine and timers.

// holdTTL is the TTL of the Hold tests' stores: renewals every 2s, a
// safety margin of 1s, by default.
const holdTTL = 6 * time.Second

// outageDriver wraps a driver and, when switched on, makes every call fail
// at once (outageFail) or hang until its context ends (outageHang).
type outageDriver struct {
	Driver
	mu         sync.Mutex // guards the fields below
	mode       outageMode
	gets, puts int
}

type outageMode int

const (
	outageNone outageMode = iota
	outageFail
	outageHang
)

var errOutage = errors.New("injected outage")

func (d *outageDriver) fault(ctx context.Context, put bool) error {
	d.mu.Lock()
	if put {
		d.puts++
	} else {
		d.gets++
	}
	mode := d.mode
	d.mu.Unlock()
	switch mode {
	case outageFail:
		return errOutage
	case outageHang:
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (d *outageDriver) Get(ctx context.Context, key string) (Record, uint64, error) {
	if err := d.fault(ctx, false); err != nil {
		return Record{}, 0, err
	}
	return d.Driver.Get(ctx, key)
}

func (d *outageDriver) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	if err := d.fault(ctx, true); err != nil {
		return 0, err
	}
	return d.Driver.Put(ctx, rec, pre)
}

func (d *outageDriver) set(m outageMode) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mode = m
}

func (d *outageDriver) calls() (gets, puts int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gets, d.puts
}

// holdEnv is one bubble's driver and a store factory over it.
type holdEnv struct {
	t *testing.T
	d *outageDriver
}

func newHoldEnv(t *testing.T) holdEnv {
	return holdEnv{t: t, d: &outageDriver{Driver: NewMemoryDriver()}}
}

// store returns a store for owner over the shared driver, on the bubble's
// virtual clock.
func (e holdEnv) store(owner string, ttl time.Duration) *DocumentStore {
	e.t.Helper()
	s, err := NewDocumentStore(e.d, WithOwner(owner), WithTTL(ttl), WithClock(time.Now))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustHold(t *testing.T, s Store, key string, opts ...HoldOption) *Held {
	t.Helper()
	h, err := Hold(t.Context(), s, key, opts...)
	if err != nil {
		t.Fatalf("Hold(%q) = %v", key, err)
	}
	return h
}

// wantStopped checks that h's context ended with a cause matching ErrLost
// and that its store's loop no longer keeps it.
func wantStopped(t *testing.T, h *Held) {
	t.Helper()
	synctest.Wait()
	if cause := context.Cause(h.Context()); !errors.Is(cause, ErrLost) {
		t.Errorf("context cause = %v; want ErrLost", cause)
	}
	if kept(h) {
		t.Error("the store's loop still keeps the Held")
	}
}

// kept reports whether h's store loop still renews h.
func kept(h *Held) bool {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	return h.k.helds[h.key] == h
}

// stopTime records when ctx ends, on the virtual clock. Its result fails
// the test if ctx has not ended within a virtual day.
func stopTime(t *testing.T, ctx context.Context) func() time.Time {
	var at time.Time
	done := make(chan struct{})
	go func() {
		<-ctx.Done()
		at = time.Now()
		close(done)
	}()
	return func() time.Time {
		t.Helper()
		select {
		case <-done:
			return at
		case <-time.After(10 * holdTTL): // short, so that a deadline never enforced fails fast
			t.Fatal("context still not ended ten TTLs later")
			return time.Time{}
		}
	}
}

// TestHoldRenewalKeepsLease: R6, R8. Renewals keep the lease far past its
// TTL with the same epoch and holder; nobody else can take it meanwhile.
func TestHoldRenewalKeepsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		a, b := e.store("alice", holdTTL), e.store("bob", holdTTL)
		h := mustHold(t, a, "job")
		first := h.Grant()

		time.Sleep(10 * holdTTL)
		synctest.Wait()
		if err := h.Context().Err(); err != nil {
			t.Fatalf("context ended after renewals: %v", context.Cause(h.Context()))
		}
		g := h.Grant()
		if g.Epoch != first.Epoch || g.Owner != "alice" || !g.ExpiresAt.After(time.Now()) {
			t.Errorf("grant after 10 TTLs = %+v; want alice's epoch %d, expiring after now %v", g, first.Epoch, time.Now())
		}
		rec, err := b.Holder(t.Context(), "job")
		if err != nil || rec.Owner != "alice" || rec.Epoch != first.Epoch {
			t.Errorf("Holder = %+v, %v; want alice epoch %d", rec, err, first.Epoch)
		}
		if _, err := b.Acquire(t.Context(), "job"); !errors.Is(err, ErrHeld) {
			t.Errorf("bob's Acquire = %v; want ErrHeld", err)
		}
		if _, puts := e.d.calls(); puts < 30 || puts > 31 {
			t.Errorf("%d writes in 60s; want the acquire and a renewal every 2s (31)", puts)
		}
		if err := h.Release(t.Context()); err != nil {
			t.Fatalf("Release = %v", err)
		}
		if kept(h) {
			t.Error("the store's loop still keeps the Held after Release")
		}
		wantStopped(t, h)
		if _, err := b.Holder(t.Context(), "job"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Holder after Release = %v; want ErrNotFound", err)
		}
	})
}

// TestHoldStealCancelsContext: R6. When the record passes to another
// owner, the next renewal returns ErrLost and the context ends at once;
// the renewal goroutine returns without waiting for Release.
func TestHoldStealCancelsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		h := mustHold(t, e.store("alice", holdTTL), "job")
		stopped := stopTime(t, h.Context())

		time.Sleep(3 * time.Second) // one renewal done; the next is at 4s
		rec, version, err := e.d.Get(t.Context(), "job")
		if err != nil {
			t.Fatal(err)
		}
		stolenAt := time.Now()
		rec.Owner, rec.Epoch, rec.ExpiresAt = "mallory", rec.Epoch+1, time.Now().Add(time.Hour)
		if _, err := e.d.Put(t.Context(), rec, Precondition{Version: version}); err != nil {
			t.Fatal(err)
		}

		at := stopped()
		if got, want := at.Sub(stolenAt), time.Second; got != want {
			t.Errorf("context ended %v after the steal; want %v (the next renewal)", got, want)
		}
		wantStopped(t, h)
		if g := h.Grant(); g.Epoch != 1 || g.Owner != "alice" {
			t.Errorf("Grant() = %+v; want alice's epoch 1", g)
		}
		for i := range 2 { // a second Release is harmless
			if err := h.Release(t.Context()); !errors.Is(err, ErrLost) {
				t.Errorf("Release #%d = %v; want ErrLost (mallory holds the key)", i+1, err)
			}
		}
		if got, _, _ := e.d.Get(t.Context(), "job"); got.Owner != "mallory" || got.Released {
			t.Errorf("record after alice's Release = %+v; want mallory's, unreleased", got)
		}
	})
}

// TestHoldOutageStopsBeforeExpiry: R8. While storage is down, Hold keeps
// retrying, and ends the context exactly at the last grant's expiry minus
// the safety margin: never after, and not at the first failure.
func TestHoldOutageStopsBeforeExpiry(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode outageMode
	}{
		{"failing", outageFail},
		{"hanging", outageHang},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newHoldEnv(t)
				h := mustHold(t, e.store("alice", holdTTL), "job")
				stopped := stopTime(t, h.Context())

				time.Sleep(5 * time.Second) // renewals at 2s and 4s succeed
				last := h.Grant()
				getsBefore, putsBefore := e.d.calls()
				e.d.set(tc.mode)

				at := stopped()
				deadline := last.ExpiresAt.Add(-holdTTL / 6)
				if at.After(deadline) {
					t.Errorf("context ended at %v, after expiry %v minus margin", at, last.ExpiresAt)
				}
				if firstFailure := last.ExpiresAt.Add(-holdTTL + 2*time.Second); !at.After(firstFailure) {
					t.Errorf("context ended at %v, at the first failed renewal (%v); want retries until %v", at, firstFailure, deadline)
				}
				cause := context.Cause(h.Context())
				if !errors.Is(cause, ErrLost) {
					t.Errorf("cause = %v; want ErrLost", cause)
				}
				if gets, puts := e.d.calls(); tc.mode == outageFail && gets+puts-getsBefore-putsBefore < 6 {
					t.Errorf("%d storage calls during the outage; want renewals retried sooner than every 2s",
						gets+puts-getsBefore-putsBefore)
				}
				if tc.mode == outageFail && !errors.Is(cause, errOutage) {
					t.Errorf("cause = %v; want it to name the last renewal's error", cause)
				}
				wantStopped(t, h)

				e.d.set(outageNone) // storage back: the release still lands
				if err := h.Release(t.Context()); err != nil {
					t.Errorf("Release after the outage = %v; want nil (nobody took the key)", err)
				}
			})
		})
	}
}

// TestHoldWaitsForRelease: R5, R7. A waiter gets the key promptly once its
// holder releases it, with the next epoch and a clean start.
func TestHoldWaitsForRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		bob := e.store("bob", time.Hour)
		bg := mustAcquire(t, bob, "job")

		type result struct {
			h   *Held
			err error
			at  time.Time
		}
		got := make(chan result, 1)
		go func() {
			h, err := Hold(t.Context(), e.store("alice", holdTTL), "job")
			got <- result{h, err, time.Now()}
		}()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		select {
		case r := <-got:
			t.Fatalf("Hold returned while bob held the key: %v", r.err)
		default:
		}
		if gets, _ := e.d.calls(); gets > 60 {
			t.Errorf("%d reads in 30s of waiting; want retries at least %v apart once backed off", gets, holdMaxBackoff/2)
		}
		releasedAt := time.Now()
		if err := bob.Release(t.Context(), bg); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			t.Fatalf("Hold after release = %v", r.err)
		}
		if wait := r.at.Sub(releasedAt); wait > holdMaxBackoff {
			t.Errorf("picked up %v after the release; want within %v", wait, holdMaxBackoff)
		}
		if g := r.h.Grant(); g.Epoch != bg.Epoch+1 || g.PreviousUnclean {
			t.Errorf("grant = %+v; want epoch %d, clean", g, bg.Epoch+1)
		}
		time.Sleep(10 * holdTTL) // the wait must not stretch the renewal interval
		if err := r.h.Context().Err(); err != nil {
			t.Errorf("lease lost after a long wait for it: %v", context.Cause(r.h.Context()))
		}
		if err := r.h.Release(t.Context()); err != nil {
			t.Error(err)
		}
	})
}

// TestHoldTakesOverExpiredKey: R4f. A waiter wakes when a dead holder's
// grant runs out, not a backoff later, and learns that it was unclean.
func TestHoldTakesOverExpiredKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		dead := mustAcquire(t, e.store("bob", 90*time.Second), "job") // never renewed
		h := mustHold(t, e.store("alice", holdTTL), "job")
		if late := time.Since(dead.ExpiresAt); late < 0 || late >= holdMinBackoff {
			t.Errorf("took over %v after bob's expiry; want within %v", late, holdMinBackoff)
		}
		if g := h.Grant(); g.Epoch != dead.Epoch+1 || !g.PreviousUnclean {
			t.Errorf("grant = %+v; want epoch %d with PreviousUnclean", g, dead.Epoch+1)
		}
		if err := h.Release(t.Context()); err != nil {
			t.Error(err)
		}
	})
}

// TestHoldGivesUpWhenContextEnds: a waiter stops when its context ends;
// the error matches both the context's error and ErrHeld.
func TestHoldGivesUpWhenContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		mustAcquire(t, e.store("bob", time.Hour), "job")
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		start := time.Now()
		_, err := Hold(ctx, e.store("alice", holdTTL), "job")
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrHeld) {
			t.Errorf("Hold = %v; want DeadlineExceeded and ErrHeld", err)
		}
		if waited := time.Since(start); waited != 5*time.Second {
			t.Errorf("gave up after %v; want 5s", waited)
		}
	})
}

// TestHoldFailIfHeld: R4e. FailIfHeld returns the holder at once.
func TestHoldFailIfHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		mustAcquire(t, e.store("bob", time.Hour), "job")
		start := time.Now()
		_, err := Hold(t.Context(), e.store("alice", holdTTL), "job", FailIfHeld())
		var he *HeldError
		if !errors.As(err, &he) || he.Owner != "bob" {
			t.Fatalf("Hold = %v; want a *HeldError naming bob", err)
		}
		if time.Since(start) != 0 {
			t.Errorf("FailIfHeld waited %v", time.Since(start))
		}
	})
}

// TestHoldRetriesStorageErrors: R9. A waiter rides out a storage outage;
// a corrupt record (R10) fails at once.
func TestHoldRetriesStorageErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		e.d.set(outageFail)
		got := make(chan error, 1)
		go func() {
			h, err := Hold(t.Context(), e.store("alice", holdTTL), "job")
			if err == nil {
				err = h.Release(t.Context())
			}
			got <- err
		}()
		time.Sleep(10 * time.Second)
		e.d.set(outageNone)
		if err := <-got; err != nil {
			t.Errorf("Hold across an outage = %v", err)
		}

		c, err := NewDocumentStore(corruptDriver{rec: &Record{Key: "job", Owner: "x"}}, WithClock(time.Now))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Hold(t.Context(), c, "job"); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Hold on a corrupt record = %v; want ErrCorrupt", err)
		}
	})
}

// TestHoldReleaseTwice: R7. A second Release is harmless, and the
// context's cause says the lease is no longer held.
func TestHoldReleaseTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		h := mustHold(t, e.store("alice", holdTTL), "job")
		for i := range 2 {
			if err := h.Release(t.Context()); err != nil {
				t.Errorf("Release #%d = %v", i+1, err)
			}
		}
		wantStopped(t, h)
		if _, puts := e.d.calls(); puts != 2 {
			t.Errorf("%d writes; want acquire and one release", puts)
		}
	})
}

// TestHoldReleaseRetriesFailedWrite: R7. A release that failed can be
// retried through the same Held.
func TestHoldReleaseRetriesFailedWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		s := e.store("alice", holdTTL)
		h := mustHold(t, s, "job")
		e.d.set(outageFail)
		if err := h.Release(t.Context()); !errors.Is(err, ErrStorage) {
			t.Fatalf("Release during outage = %v; want ErrStorage", err)
		}
		e.d.set(outageNone)
		if err := h.Release(t.Context()); err != nil {
			t.Fatalf("retried Release = %v", err)
		}
		if _, err := s.Holder(t.Context(), "job"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Holder after retried Release = %v; want ErrNotFound", err)
		}
	})
}

// TestHoldOptionsValidated: options that cannot keep a lease fail, and a
// grant already taken is given back.
func TestHoldOptionsValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  HoldOption
	}{
		{"zero renew", RenewEvery(0)},
		{"negative margin", SafetyMargin(-time.Second)},
		{"margin over TTL", SafetyMargin(holdTTL)},
		{"renew after margin", RenewEvery(holdTTL - time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newHoldEnv(t)
				s := e.store("alice", holdTTL)
				if h, err := Hold(t.Context(), s, "job", tc.opt); err == nil {
					_ = h.Release(t.Context())
					t.Fatal("Hold succeeded")
				}
				if _, err := s.Holder(t.Context(), "job"); !errors.Is(err, ErrNotFound) {
					t.Errorf("Holder after refused Hold = %v; want ErrNotFound", err)
				}
			})
		})
	}
}

// TestHoldRenewEvery: RenewEvery and SafetyMargin replace the defaults.
func TestHoldRenewEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		h := mustHold(t, e.store("alice", holdTTL), "job", RenewEvery(500*time.Millisecond), SafetyMargin(3*time.Second))
		time.Sleep(5*time.Second + time.Millisecond)
		if _, puts := e.d.calls(); puts != 11 {
			t.Errorf("%d writes in 5s; want acquire and 10 renewals", puts)
		}
		stopped := stopTime(t, h.Context())
		last := h.Grant()
		e.d.set(outageFail)
		if at, want := stopped(), last.ExpiresAt.Add(-3*time.Second); !at.Equal(want) {
			t.Errorf("context ended at %v; want expiry minus 3s margin = %v", at, want)
		}
		e.d.set(outageNone)
		_ = h.Release(t.Context())
	})
}

// foreverStore hands out grants that never expire, as the local store does.
type foreverStore struct {
	mu             sync.Mutex
	renews         int
	held, released bool
}

func (f *foreverStore) Acquire(_ context.Context, key string) (Grant, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = true
	return Grant{Key: key, Owner: "local", Epoch: 1}, nil
}

func (f *foreverStore) Renew(_ context.Context, g Grant) (Grant, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renews++
	return g, nil
}

func (f *foreverStore) Release(context.Context, Grant) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = true
	return nil
}

func (f *foreverStore) Holder(context.Context, string) (Record, error) { return Record{}, ErrNotFound }
func (f *foreverStore) Close() error                                   { return nil }
func (f *foreverStore) ReleaseAll(context.Context) error               { return nil }
func (f *foreverStore) Holders(context.Context, string) iter.Seq2[Record, error] {
	return func(func(Record, error) bool) {}
}

// TestHoldNeverExpiringGrant: R4 (local store). A grant with no expiry is
// never renewed and never lost; only Release ends the context.
func TestHoldNeverExpiringGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &foreverStore{}
		h := mustHold(t, s, "job")
		time.Sleep(24 * time.Hour)
		synctest.Wait()
		if err := h.Context().Err(); err != nil {
			t.Fatalf("context ended: %v", context.Cause(h.Context()))
		}
		if err := h.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		wantStopped(t, h)
		if s.renews != 0 || !s.released {
			t.Errorf("renews = %d, released = %v; want 0, true", s.renews, s.released)
		}
	})
}

// TestRunReturnsFnError: Run passes fn the grant, returns fn's error, and
// releases the key (R7).
func TestRunReturnsFnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		s := e.store("alice", holdTTL)
		errFn := errors.New("fn failed")
		var seen Grant
		err := Run(t.Context(), s, "job", func(ctx context.Context, g Grant) error {
			seen = g
			time.Sleep(time.Minute) // renewals keep it
			return errors.Join(ctx.Err(), errFn)
		})
		if !errors.Is(err, errFn) || errors.Is(err, ErrLost) {
			t.Errorf("Run = %v; want fn's error only", err)
		}
		if seen.Epoch != 1 || seen.Owner != "alice" {
			t.Errorf("fn got %+v; want alice's epoch 1", seen)
		}
		if _, err := s.Holder(t.Context(), "job"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Holder after Run = %v; want ErrNotFound", err)
		}
		if err := Run(t.Context(), s, "job", func(context.Context, Grant) error { return nil }); err != nil {
			t.Errorf("Run with a nil fn error = %v", err)
		}
	})
}

// TestRunReportsLoss: R6, R8. When the lease is lost while fn runs, fn's
// context ends with an ErrLost cause and Run's error matches ErrLost.
func TestRunReportsLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		var cause error
		err := Run(t.Context(), e.store("alice", holdTTL), "job", func(ctx context.Context, g Grant) error {
			e.d.set(outageFail)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return ctx.Err()
		})
		if !errors.Is(err, ErrLost) || !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v; want ErrLost joined with fn's context.Canceled", err)
		}
		if !errors.Is(cause, ErrLost) {
			t.Errorf("fn's context cause = %v; want ErrLost", cause)
		}
	})
}

// TestRunStopsWhenCallerCancels: cancelling Run's context ends fn's
// context; that is not a loss, and the key is released.
func TestRunStopsWhenCallerCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		s := e.store("alice", holdTTL)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		err := Run(ctx, s, "job", func(ctx context.Context, g Grant) error {
			<-ctx.Done()
			return ctx.Err()
		})
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrLost) {
			t.Errorf("Run = %v; want DeadlineExceeded and no loss", err)
		}
		if _, err := s.Holder(t.Context(), "job"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Holder after Run = %v; want ErrNotFound", err)
		}
	})
}

// TestHoldGivesUpHeldWhenStoreIsSlow: R4e. A waiter whose context ends
// while a store call is in flight (the call hangs until then) or after
// calls began failing still reports the key as held, since an earlier
// attempt found it held: the error matches ErrHeld, names the holder, and
// matches the context's error.
func TestHoldGivesUpHeldWhenStoreIsSlow(t *testing.T) {
	for _, mode := range []outageMode{outageHang, outageFail} {
		t.Run(map[outageMode]string{outageHang: "hang", outageFail: "fail"}[mode], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newHoldEnv(t)
				mustAcquire(t, e.store("bob", time.Hour), "job")
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				alice := e.store("alice", holdTTL)
				errc := make(chan error, 1)
				go func() {
					_, err := Hold(ctx, alice, "job")
					errc <- err
				}()
				time.Sleep(gatherWindow)
				synctest.Wait() // the first attempt found bob; alice backs off
				gets, _ := e.d.calls()
				e.d.set(mode)
				err := <-errc
				if later, _ := e.d.calls(); later == gets {
					t.Fatal("no attempt after the store slowed: the test checks nothing")
				}
				var he *HeldError
				if !errors.As(err, &he) || he.Owner != "bob" || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Hold = %v; want ErrHeld naming bob and DeadlineExceeded", err)
				}
			})
		})
	}
}
