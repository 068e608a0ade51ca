package lease

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// These tests check the per-store loop behind Hold (R12, R13, R15): many
// Helds of one store cost a few storage round trips per renewal period and
// no goroutine each, while every key keeps its own answer.

// countingDriver counts the round trips a store makes through a batching
// driver, and can fail every call (down).
type countingDriver struct {
	inner *memoryDriver

	mu                 sync.Mutex // guards the fields below
	gets, puts         int        // one-key round trips
	getMany, putMany   int        // batched round trips
	largestPutMany     int
	down               bool
	failAfterApplying  bool // PutMany applies, then reports an unknown outcome
	failBeforeApplying bool // PutMany reports an unknown outcome, applying nothing
}

var (
	_ BatchDriver = (*countingDriver)(nil)
	_ BatchReader = (*countingDriver)(nil)
)

func newCountingDriver() *countingDriver {
	return &countingDriver{inner: NewMemoryDriver().(*memoryDriver)}
}

var errDown = errors.New("injected: storage down")

func (d *countingDriver) Name() string { return "memory" }
func (d *countingDriver) Close() error { return nil }

func (d *countingDriver) count(n *int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	*n++
	if d.down {
		return errDown
	}
	return nil
}

func (d *countingDriver) Get(ctx context.Context, key string) (Record, uint64, error) {
	if err := d.count(&d.gets); err != nil {
		return Record{}, 0, err
	}
	return d.inner.Get(ctx, key)
}

func (d *countingDriver) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	if err := d.count(&d.puts); err != nil {
		return 0, err
	}
	return d.inner.Put(ctx, rec, pre)
}

func (d *countingDriver) GetMany(ctx context.Context, keys []string) ([]GetResult, error) {
	if err := d.count(&d.getMany); err != nil {
		return nil, err
	}
	return d.inner.GetMany(ctx, keys)
}

func (d *countingDriver) PutMany(ctx context.Context, ws []Write) ([]PutResult, error) {
	if err := d.count(&d.putMany); err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.largestPutMany = max(d.largestPutMany, len(ws))
	before, after := d.failBeforeApplying, d.failAfterApplying
	d.mu.Unlock()
	if before {
		return nil, errDown
	}
	results, err := d.inner.PutMany(ctx, ws)
	if after {
		return nil, errDown
	}
	return results, err
}

func (d *countingDriver) set(f func(d *countingDriver)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(d)
}

// trips returns the round trips so far and resets the counts.
func (d *countingDriver) trips() (single, batched int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	single, batched = d.gets+d.puts, d.getMany+d.putMany
	d.gets, d.puts, d.getMany, d.putMany = 0, 0, 0, 0
	return single, batched
}

func loopStore(t *testing.T, d Driver, owner string) *DocumentStore {
	t.Helper()
	s, err := NewDocumentStore(d, WithOwner(owner), WithTTL(holdTTL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func holdKeys(t *testing.T, s Store, n int) []*Held {
	t.Helper()
	hs := make([]*Held, n)
	for i := range hs {
		hs[i] = mustHold(t, s, fmt.Sprintf("profile:%04d", i))
	}
	return hs
}

// TestHoldRenewalsAreBatched: R12. A thousand Helds of one store are
// renewed by one loop in a few batched writes per renewal period, with no
// goroutine per Held, and never late: none is lost. Helds renewed by one
// call share one entry of the loop's schedules (a round), so that the
// Helds of a thousand Hold calls, once in step, cost it a few entries.
func TestHoldRenewalsAreBatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newCountingDriver()
		s := loopStore(t, d, "alice")
		goroutinesBefore := runtime.NumGoroutine()
		const n = 1000
		hs := make([]*Held, n)
		for i := range hs {
			hs[i] = mustHold(t, s, fmt.Sprintf("profile:%04d", i))
			if i%100 == 0 {
				time.Sleep(100 * time.Millisecond) // Holds arrive over a second, not at one instant
			}
		}
		if extra := runtime.NumGoroutine() - goroutinesBefore; extra > 2 {
			t.Errorf("%d goroutines for %d Helds; want at most 2 (the store's loop and its storage call)", extra, n)
		}
		d.trips()
		const periods = 5
		time.Sleep(periods * holdTTL / 3)
		single, batched := d.trips()
		if perPeriod := (single + batched) / periods; perPeriod > 3 || single > 0 {
			t.Errorf("%d one-key and %d batched round trips in %d renewal periods for %d Helds; want at most 3 batched per period",
				single, batched, periods, n)
		}
		k := keeperFor(s)
		k.mu.Lock()
		dues, deadlines := k.dues.Len(), k.deadlines.Len()
		k.mu.Unlock()
		k.unuse()
		if dues > 3 || deadlines > 3 {
			t.Errorf("the loop schedules %d renewals and %d deadlines for %d Helds in step; want at most 3 each", dues, deadlines, n)
		}
		for _, h := range hs {
			if err := h.Context().Err(); err != nil {
				t.Fatalf("%s lost: %v", h.Grant().Key, context.Cause(h.Context()))
			}
		}
		if err := s.ReleaseAll(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestHoldWaitsAreBatched: R12. A thousand Holds waiting for keys that
// another store holds cost a few batched reads per second between them,
// and take every key in a few batched writes once its holder dies.
func TestHoldWaitsAreBatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newCountingDriver()
		a, b := loopStore(t, d, "alice"), loopStore(t, d, "bob")
		const n = 1000
		for i := range n {
			if _, err := a.Acquire(t.Context(), fmt.Sprintf("profile:%04d", i)); err != nil {
				t.Fatal(err)
			}
		}
		goroutinesBefore := runtime.NumGoroutine()
		got := make(chan *Held, n)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				h, err := Hold(ctx, b, fmt.Sprintf("profile:%04d", i))
				if err != nil {
					t.Errorf("Hold: %v", err)
					return
				}
				got <- h
			})
		}
		time.Sleep(time.Second) // every Hold has tried once and is waiting
		waiting := runtime.NumGoroutine() - goroutinesBefore - n
		d.trips()
		time.Sleep(3 * time.Second) // alice is alive (not expired): bob keeps looking
		single, batched := d.trips()
		if single > 0 || batched > 3*3 {
			t.Errorf("%d one-key and %d batched round trips in 3s for %d waiting Holds; want at most 3 batched a second",
				single, batched, n)
		}
		if waiting > 2 {
			t.Errorf("%d goroutines besides the callers for %d waiting Holds; want at most 2", waiting, n)
		}
		// alice dies without releasing: bob takes every key after expiry.
		time.Sleep(holdTTL)
		wg.Wait()
		single, batched = d.trips()
		if single > 0 || batched > 10 {
			t.Errorf("taking over %d keys cost %d one-key and %d batched round trips; want a few batched", n, single, batched)
		}
		close(got)
		for h := range got {
			if g := h.Grant(); g.Epoch != 2 || !g.PreviousUnclean || g.Owner != "bob" {
				t.Errorf("took over %+v; want bob, epoch 2, PreviousUnclean", g)
			}
		}
		if err := b.ReleaseAll(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestHoldBatchKeepsEachKeyApart: R12. In one renewal batch, keys stolen
// by another owner and keys whose record expired end their Held with
// ErrLost; the others are renewed and disturbed by nothing.
func TestHoldBatchKeepsEachKeyApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newCountingDriver()
		s := loopStore(t, d, "alice")
		hs := holdKeys(t, s, 30)
		for i, h := range hs[:20] {
			g := h.Grant()
			rec, version, err := d.inner.Get(t.Context(), g.Key)
			if err != nil {
				t.Fatal(err)
			}
			if i < 10 { // stolen
				rec.Owner, rec.Epoch = "mallory", rec.Epoch+1
			} else { // expired in storage
				rec.ExpiresAt = time.Now().Add(-time.Second)
			}
			if _, err := d.inner.Put(t.Context(), rec, Precondition{Version: version}); err != nil {
				t.Fatal(err)
			}
		}
		before := hs[29].Grant()
		time.Sleep(holdTTL/3 + time.Millisecond)
		synctest.Wait()
		for i, h := range hs {
			cause := context.Cause(h.Context())
			switch {
			case i < 20 && !errors.Is(cause, ErrLost):
				t.Errorf("%s: cause %v; want ErrLost", h.Grant().Key, cause)
			case i >= 20 && cause != nil:
				t.Errorf("%s: ended with %v; want it renewed", h.Grant().Key, cause)
			}
		}
		if after := hs[29].Grant(); !after.ExpiresAt.After(before.ExpiresAt) || after.Epoch != before.Epoch {
			t.Errorf("renewed grant %+v; want the same epoch as %+v and a later expiry", after, before)
		}
		_ = s.ReleaseAll(t.Context())
	})
}

// TestHoldBatchUnknownOutcome: R9, R12. A batch whose reply is lost after
// it was applied settles per key by one re-read: every Held stays, with
// the renewed expiry.
func TestHoldBatchUnknownOutcome(t *testing.T) {
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%v", applied), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newCountingDriver()
				s := loopStore(t, d, "alice")
				hs := holdKeys(t, s, 20)
				d.set(func(d *countingDriver) { d.failAfterApplying, d.failBeforeApplying = applied, !applied })
				time.Sleep(holdTTL/3 + time.Millisecond)
				synctest.Wait()
				d.set(func(d *countingDriver) { d.failAfterApplying, d.failBeforeApplying = false, false })
				for _, h := range hs {
					g := h.Grant()
					rec, _, err := d.inner.Get(t.Context(), g.Key)
					if err != nil {
						t.Fatal(err)
					}
					if h.Context().Err() != nil {
						t.Fatalf("%s lost: %v", g.Key, context.Cause(h.Context()))
					}
					if applied && !rec.ExpiresAt.Equal(g.ExpiresAt) {
						t.Errorf("%s: Held says it expires at %v, storage at %v", g.Key, g.ExpiresAt, rec.ExpiresAt)
					}
				}
				time.Sleep(holdTTL) // the failed renewals are retried and the leases kept
				for _, h := range hs {
					if h.Context().Err() != nil {
						t.Fatalf("%s lost: %v", h.Grant().Key, context.Cause(h.Context()))
					}
				}
				if err := s.ReleaseAll(t.Context()); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestReleaseAllBatched: R13. ReleaseAll releases every grant in one
// batched write, ends every Held, reports a key lost to another owner as
// ErrLost without stopping the others, and leaves each key free for a
// clean takeover.
func TestReleaseAllBatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newCountingDriver()
		a, b := loopStore(t, d, "alice"), loopStore(t, d, "bob")
		hs := holdKeys(t, a, 50)
		stolen := hs[7].Grant()
		rec, version, _ := d.inner.Get(t.Context(), stolen.Key)
		rec.Owner, rec.Epoch = "mallory", rec.Epoch+1
		if _, err := d.inner.Put(t.Context(), rec, Precondition{Version: version}); err != nil {
			t.Fatal(err)
		}
		d.trips()
		err := a.ReleaseAll(t.Context())
		if !errors.Is(err, ErrLost) {
			t.Errorf("ReleaseAll = %v; want an error matching ErrLost for %s", err, stolen.Key)
		}
		if single, batched := d.trips(); batched != 1 || single > 2 {
			t.Errorf("ReleaseAll of 50 keys: %d batched and %d one-key round trips; want 1 batched (and a re-read of the stolen key)", batched, single)
		}
		synctest.Wait()
		for i, h := range hs {
			if cause := context.Cause(h.Context()); !errors.Is(cause, ErrLost) {
				t.Errorf("Held %d: cause %v; want ErrLost", i, cause)
			}
			if i == 7 {
				continue
			}
			g, err := b.Acquire(t.Context(), h.Grant().Key)
			if err != nil || g.PreviousUnclean || g.Epoch != 2 {
				t.Errorf("bob's acquire after ReleaseAll = %+v, %v; want epoch 2, clean", g, err)
			}
		}
	})
}

// TestReleaseAllKeepsWhatFailed: R13. A ReleaseAll whose write fails keeps
// every grant, so that a second call finishes the job.
func TestReleaseAllKeepsWhatFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newCountingDriver()
		a, b := loopStore(t, d, "alice"), loopStore(t, d, "bob")
		holdKeys(t, a, 5)
		d.set(func(d *countingDriver) { d.failBeforeApplying = true; d.down = true })
		if err := a.ReleaseAll(t.Context()); !errors.Is(err, ErrStorage) {
			t.Fatalf("ReleaseAll while storage is down = %v; want ErrStorage", err)
		}
		d.set(func(d *countingDriver) { d.failBeforeApplying = false; d.down = false })
		if err := a.ReleaseAll(t.Context()); err != nil {
			t.Fatalf("ReleaseAll retried = %v", err)
		}
		for i := range 5 {
			if g, err := b.Acquire(t.Context(), fmt.Sprintf("profile:%04d", i)); err != nil || g.PreviousUnclean {
				t.Errorf("acquire after ReleaseAll = %+v, %v; want a clean grant", g, err)
			}
		}
	})
}

// TestCloseEndsHelds: R15. Closing a store ends every Held made through it
// at once, with a cause matching ErrLost and ErrClosed, and a Hold waiting
// on it gives up with ErrClosed.
func TestCloseEndsHelds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newCountingDriver()
		a, b := loopStore(t, d, "alice"), loopStore(t, d, "bob")
		hs := holdKeys(t, a, 3)
		if _, err := b.Acquire(t.Context(), "busy"); err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() {
			_, err := Hold(t.Context(), a, "busy")
			waited <- err
		}()
		synctest.Wait()
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for _, h := range hs {
			cause := context.Cause(h.Context())
			if !errors.Is(cause, ErrLost) || !errors.Is(cause, ErrClosed) {
				t.Errorf("cause after Close = %v; want ErrLost and ErrClosed", cause)
			}
		}
		select {
		case err := <-waited:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("waiting Hold after Close = %v; want ErrClosed", err)
			}
		default:
			t.Error("a Hold waiting on a closed store is still waiting")
		}
		if _, err := Hold(t.Context(), a, "later"); !errors.Is(err, ErrClosed) {
			t.Errorf("Hold on a closed store = %v; want ErrClosed", err)
		}
	})
}

// TestHoldReentrantShortGrant: R4c. A Hold that gets back, by R4c, a grant
// with less time left than its plan needs renews it at once and keeps it;
// a Hold whose plan cannot fit gives back only a grant it took itself.
func TestHoldReentrantShortGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newCountingDriver()
		a, b := loopStore(t, d, "alice"), loopStore(t, d, "bob")
		for i, s := range []Store{a, plainStore{a}} {
			key := fmt.Sprintf("job-%d", i)
			g, err := a.Acquire(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(holdTTL - time.Second) // one second left
			h, err := Hold(t.Context(), s, key, RenewEvery(3*time.Second))
			if err != nil {
				t.Fatalf("%T: re-entrant Hold = %v", s, err)
			}
			if hg := h.Grant(); hg.Epoch != g.Epoch || !hg.ExpiresAt.Equal(time.Now().Add(holdTTL)) {
				t.Errorf("%T: Held grant %+v; want epoch %d renewed to a full TTL", s, hg, g.Epoch)
			}
			if _, err := b.Acquire(t.Context(), key); !errors.Is(err, ErrHeld) {
				t.Errorf("%T: bob's acquire = %v; want ErrHeld", s, err)
			}
			// A plan that cannot fit the TTL fails, and must not give back
			// the grant that h holds.
			if _, err := Hold(t.Context(), s, key, RenewEvery(holdTTL), FailIfHeld()); err == nil {
				t.Fatalf("%T: Hold with RenewEvery(TTL) succeeded", s)
			}
			if _, err := b.Acquire(t.Context(), key); !errors.Is(err, ErrHeld) {
				t.Errorf("%T: after a refused re-entrant Hold, bob's acquire = %v; want ErrHeld", s, err)
			}
			if err := h.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// plainStore hides a store's type, as a caller's own Store would: Hold
// then knows nothing of it but the Store interface.
type plainStore struct{ s Store }

func (p plainStore) Acquire(ctx context.Context, key string) (Grant, error) {
	return p.s.Acquire(ctx, key)
}
func (p plainStore) Renew(ctx context.Context, g Grant) (Grant, error) { return p.s.Renew(ctx, g) }
func (p plainStore) Release(ctx context.Context, g Grant) error        { return p.s.Release(ctx, g) }
func (p plainStore) Holder(ctx context.Context, key string) (Record, error) {
	return p.s.Holder(ctx, key)
}
func (p plainStore) Holders(ctx context.Context, prefix string) iter.Seq2[Record, error] {
	return p.s.Holders(ctx, prefix)
}
func (p plainStore) ReleaseAll(ctx context.Context) error { return p.s.ReleaseAll(ctx) }
func (p plainStore) Close() error                         { return p.s.Close() }

// TestHoldPlainStoreRenewedWithoutGoroutines: R12. A Store that cannot
// batch is renewed one grant at a time by its one loop, still without a
// goroutine per Held.
func TestHoldPlainStoreRenewedWithoutGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newCountingDriver()
		s := plainStore{loopStore(t, d, "alice")}
		before := runtime.NumGoroutine()
		hs := holdKeys(t, s, 100)
		if extra := runtime.NumGoroutine() - before; extra > 2 {
			t.Errorf("%d goroutines for 100 Helds of a plain store; want at most 2", extra)
		}
		time.Sleep(3 * holdTTL)
		for _, h := range hs {
			if h.Context().Err() != nil {
				t.Fatalf("%s lost: %v", h.Grant().Key, context.Cause(h.Context()))
			}
			if err := h.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestConfirm: Confirm renews now, with a full TTL ahead; once the key is
// taken it returns ErrLost and ends the Held's context.
func TestConfirm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newCountingDriver()
		s := loopStore(t, d, "alice")
		h := mustHold(t, s, "profile:1")
		time.Sleep(time.Second)
		g, err := h.Confirm(t.Context())
		if err != nil || !g.ExpiresAt.Equal(time.Now().Add(holdTTL)) || g != h.Grant() {
			t.Fatalf("Confirm = %+v, %v; want the grant renewed to now + TTL", g, err)
		}
		rec, version, _ := d.inner.Get(t.Context(), "profile:1")
		rec.Owner, rec.Epoch = "mallory", rec.Epoch+1
		if _, err := d.inner.Put(t.Context(), rec, Precondition{Version: version}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Confirm(t.Context()); !errors.Is(err, ErrLost) {
			t.Errorf("Confirm after the key was taken = %v; want ErrLost", err)
		}
		if cause := context.Cause(h.Context()); !errors.Is(cause, ErrLost) {
			t.Errorf("context cause after a failed Confirm = %v; want ErrLost", cause)
		}
		if _, err := h.Confirm(t.Context()); !errors.Is(err, ErrLost) {
			t.Errorf("Confirm again = %v; want ErrLost", err)
		}
	})
}

// TestHoldGaveUpNamesHolder: when a wait ends because its context ended
// while a look was in flight, the error still matches ErrHeld (the last
// completed look) and the context's error, on one line.
func TestHoldGaveUpNamesHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		a, b := e.store("alice", holdTTL), e.store("bob", holdTTL)
		mustHold(t, a, "job")
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		go func() {
			time.Sleep(200 * time.Millisecond)
			e.d.set(outageHang) // every later look hangs until the wait gives up
		}()
		_, err := Hold(ctx, b, "job")
		if !errors.Is(err, ErrHeld) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Hold = %v; want ErrHeld and DeadlineExceeded", err)
		}
		if he := (*HeldError)(nil); !errors.As(err, &he) || he.Owner != "alice" {
			t.Errorf("Hold = %v; want a *HeldError naming alice", err)
		}
		e.d.set(outageNone)
		_ = a.ReleaseAll(t.Context())
	})
}

// TestHoldClockStepPastExpiry: R6, R12. When the store's clock steps past
// the grants' expiry (a wall clock set forward), the batched renewal
// refuses them, their Helds end with ErrLost, and the keys stay usable:
// the store acquires each again at once, with the next epoch. (The
// batched renewal once kept such a key locked, and the loop hung on it.)
func TestHoldClockStepPastExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var step atomic.Int64
		clock := func() time.Time { return time.Now().Add(time.Duration(step.Load())) }
		s, err := NewDocumentStore(newCountingDriver(), WithOwner("alice"), WithTTL(holdTTL), WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		hs := holdKeys(t, s, 3)
		step.Store(int64(2 * holdTTL))
		time.Sleep(holdTTL/3 + time.Millisecond)
		synctest.Wait()
		for _, h := range hs {
			if cause := context.Cause(h.Context()); !errors.Is(cause, ErrLost) {
				t.Errorf("%s: cause %v; want ErrLost", h.Grant().Key, cause)
			}
			g, err := s.Acquire(t.Context(), h.Grant().Key)
			if err != nil || g.Epoch != h.Grant().Epoch+1 {
				t.Errorf("Acquire(%s) after the step = %+v, %v; want epoch %d", h.Grant().Key, g, err, h.Grant().Epoch+1)
			}
		}
	})
}
