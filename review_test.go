package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// hookDriver runs beforePut once, just before the next Put reaches the
// driver, so a test can make another store win the race in between.
type hookDriver struct {
	Driver
	mu        sync.Mutex
	beforePut func()
}

func (h *hookDriver) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	h.mu.Lock()
	fn := h.beforePut
	h.beforePut = nil
	h.mu.Unlock()
	if fn != nil {
		fn()
	}
	return h.Driver.Put(ctx, rec, pre)
}

// TestReviewR5LoserNamesWinnerThatReleased: alice reads the key free, bob
// acquires and releases before alice's compare-and-swap, which fails. Alice
// lost the race: she gets ErrHeld naming bob's grant, not a second win (R5).
func TestReviewR5LoserNamesWinnerThatReleased(t *testing.T) {
	clock := newFakeClock()
	h := &hookDriver{Driver: NewMemoryDriver()}
	a := newDocStore(t, h, clock, "alice")
	b := newDocStore(t, h.Driver, clock, "bob") // same records, no hook
	var won Grant
	h.beforePut = func() {
		won = mustAcquire(t, b, "k")
		wantErr(t, "bob's Release", b.Release(ctxBG, won), nil)
	}
	g, err := a.Acquire(ctxBG, "k")
	var held *HeldError
	if !errors.As(err, &held) || !errors.Is(err, ErrHeld) {
		t.Fatalf("alice's Acquire = %+v, %v; want ErrHeld naming bob", g, err)
	}
	if held.Owner != "bob" || held.Epoch != won.Epoch {
		t.Fatalf("HeldError names %q epoch %d; want bob epoch %d", held.Owner, held.Epoch, won.Epoch)
	}
}

// TestReviewR7RetriedReleaseAfterUnsettledWrite: a release whose write
// landed but whose reply and re-read were lost is retried; the retry finds
// its own write and succeeds instead of reporting ErrLost (R7, R9).
func TestReviewR7RetriedReleaseAfterUnsettledWrite(t *testing.T) {
	f := &faultDriver{Driver: NewMemoryDriver()}
	a := newDocStore(t, f, newFakeClock(), "alice")
	g := mustAcquire(t, a, "k")
	f.set(func(f *faultDriver) { f.failPutAfter, f.failGets = true, 1 })
	wantStorageErr(t, "Release", a.Release(ctxBG, g))
	if err := a.Release(ctxBG, g); err != nil {
		t.Fatalf("retried Release = %v; want nil: the first write landed", err)
	}
}

// TestReviewR7ReleaseAfterSameOwnerRenew: two instances of one owner; the
// second renews the first's grant, so the first's table has a stale
// version. The record still names the grant, unreleased: Release succeeds
// (R7), and so does Renew (R6).
func TestReviewR7ReleaseAfterSameOwnerRenew(t *testing.T) {
	clock := newFakeClock()
	d := NewMemoryDriver()
	a1 := newDocStore(t, d, clock, "alice")
	a2 := newDocStore(t, d, clock, "alice")
	g := mustAcquire(t, a1, "k")
	clock.Advance(testTTL / 2)
	if _, err := a2.Renew(ctxBG, g); err != nil {
		t.Fatalf("Renew through the second instance = %v", err)
	}
	clock.Advance(testTTL / 4)
	if _, err := a1.Renew(ctxBG, g); err != nil {
		t.Fatalf("Renew through the first instance = %v; want success (R6)", err)
	}
	if _, err := a2.Renew(ctxBG, g); err != nil {
		t.Fatalf("Renew through the second instance again = %v; want success (R6)", err)
	}
	if err := a1.Release(ctxBG, g); err != nil {
		t.Fatalf("Release through the first instance = %v; want nil (R7)", err)
	}
	rec, _, err := d.Get(ctxBG, "k")
	if err != nil || !rec.Released || rec.Epoch != g.Epoch {
		t.Fatalf("record = %+v, %v; want released epoch %d", rec, err, g.Epoch)
	}
}

// TestReviewR4ForeignGrantNotMine: alice's store renews bob's grant (the
// record names it, so R6 allows it), but the grant is bob's: alice's
// Acquire is R4e, ErrHeld naming bob, never bob's grant handed to alice.
func TestReviewR4ForeignGrantNotMine(t *testing.T) {
	clock := newFakeClock()
	d := NewMemoryDriver()
	a := newDocStore(t, d, clock, "alice")
	b := newDocStore(t, d, clock, "bob")
	g := mustAcquire(t, b, "k")
	_, _ = a.Renew(ctxBG, g)
	got, err := a.Acquire(ctxBG, "k")
	var held *HeldError
	if !errors.As(err, &held) || held.Owner != "bob" {
		t.Fatalf("alice's Acquire = %+v, %v; want ErrHeld naming bob (R4e)", got, err)
	}
}
