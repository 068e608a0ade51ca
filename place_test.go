package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// placeOfKey reads key's place record from d; the zero place if none.
func placeOfKey(t *testing.T, d Driver, key string) place {
	t.Helper()
	rec, version, err := d.Get(t.Context(), placeKey(key))
	if errors.Is(err, ErrNotFound) {
		return place{}
	}
	if err != nil {
		t.Fatalf("reading the place of %q: %v", key, err)
	}
	return placeOf(&rec, version)
}

// holdInBackground starts Hold(key) on s and returns the channel its
// Held (or error) comes on.
func holdInBackground(ctx context.Context, s Store, key string) <-chan HoldResult {
	ch := make(chan HoldResult, 1)
	go func() {
		h, err := Hold(ctx, s, key)
		ch <- HoldResult{Key: key, Held: h, Err: err}
	}()
	return ch
}

// wantHeldBy checks that err is a *HeldError naming owner.
func wantHeldBy(t *testing.T, op string, err error, owner string) {
	t.Helper()
	var he *HeldError
	if !errors.As(err, &he) || he.Owner != owner {
		t.Fatalf("%s = %v; want a *HeldError naming %q", op, err, owner)
	}
}

// TestR25FreeKeyGoesToTheLongestWaiter: once a store's Hold found a key
// held, the key goes to it when freed, not to another store that asks
// first, whether that one waits too or only calls Acquire; and of two
// waiters the first to wait is first served.
func TestR25FreeKeyGoesToTheLongestWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := NewMemoryDriver()
		alice, bob, carol, dave := loopStore(t, d, "alice"), loopStore(t, d, "bob"), loopStore(t, d, "carol"), loopStore(t, d, "dave")
		g := mustAcquire(t, alice, "k")

		bobs := holdInBackground(t.Context(), bob, "k")
		synctest.Wait() // bob looked, found k held and took its place
		if p := placeOfKey(t, d, "k"); p.owner != "bob" || p.epoch != g.Epoch {
			t.Fatalf("after bob's look the place is %+v; want bob's at epoch %d", p, g.Epoch)
		}
		time.Sleep(time.Second)
		carols := holdInBackground(t.Context(), carol, "k")
		synctest.Wait()
		if p := placeOfKey(t, d, "k"); p.owner != "bob" {
			t.Fatalf("carol, who came later, took the place from bob: %+v", p)
		}

		if err := alice.Release(t.Context(), g); err != nil {
			t.Fatal(err)
		}
		_, err := dave.Acquire(t.Context(), "k")
		wantHeldBy(t, "dave's Acquire of a key bob waits for", err, "bob")

		r := <-bobs
		if r.Err != nil || r.Held.Grant().Epoch != g.Epoch+1 || r.Held.Grant().PreviousUnclean {
			t.Fatalf("bob's Hold = %+v, %v; want epoch %d, clean", r.Held, r.Err, g.Epoch+1)
		}
		time.Sleep(holdMaxBackoff) // carol looks again: the place is hers now
		synctest.Wait()
		if p := placeOfKey(t, d, "k"); p.owner != "carol" {
			t.Fatalf("with bob holding k, the place is %+v; want carol's", p)
		}
		_ = r.Held.Release(t.Context())
		_, err = alice.Acquire(t.Context(), "k")
		wantHeldBy(t, "alice's Acquire of a key carol waits for", err, "carol")
		r = <-carols
		if r.Err != nil || r.Held.Grant().Epoch != g.Epoch+2 {
			t.Fatalf("carol's Hold = %+v, %v; want epoch %d", r.Held, r.Err, g.Epoch+2)
		}
		_ = r.Held.Release(t.Context())
	})
}

// TestR25PlaceDiesWithItsWaiter: a waiter that crashed while it had the
// place stalls the key only until its session expires; the next waiter
// then gets the key, not never.
func TestR25PlaceDiesWithItsWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := NewMemoryDriver()
		alice, carol := loopStore(t, d, "alice"), loopStore(t, d, "carol")
		bob, err := NewDocumentStore(d, WithOwner("bob"), WithTTL(holdTTL))
		if err != nil {
			t.Fatal(err)
		}
		g := mustAcquire(t, alice, "k")
		bobs := holdInBackground(t.Context(), bob, "k")
		synctest.Wait()
		time.Sleep(time.Second)
		carols := holdInBackground(t.Context(), carol, "k")
		synctest.Wait()
		if p := placeOfKey(t, d, "k"); p.owner != "bob" {
			t.Fatalf("the place is %+v; want bob's", p)
		}
		crashed := time.Now()
		bob.Close() // a crash: its session is left to expire, and its place with it
		if r := <-bobs; !errors.Is(r.Err, ErrClosed) {
			t.Fatalf("bob's Hold after Close = %v; want ErrClosed", r.Err)
		}
		if err := alice.Release(t.Context(), g); err != nil {
			t.Fatal(err)
		}
		r := <-carols
		if r.Err != nil {
			t.Fatalf("carol's Hold = %v", r.Err)
		}
		if waited := time.Since(crashed); waited > holdTTL+2*time.Second {
			t.Errorf("carol got k %v after bob crashed; want within the TTL %v and a look", waited, holdTTL)
		}
		if gr := r.Held.Grant(); gr.Epoch != g.Epoch+1 || gr.PreviousUnclean {
			t.Errorf("carol's grant %+v; want epoch %d, clean", gr, g.Epoch+1)
		}
		_ = r.Held.Release(t.Context())
	})
}

// TestR25WaiterThatGivesUpClearsItsPlace: a Hold that stops waiting
// clears its place, so that the key is anybody's once freed.
func TestR25WaiterThatGivesUpClearsItsPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := NewMemoryDriver()
		alice, bob, carol := loopStore(t, d, "alice"), loopStore(t, d, "bob"), loopStore(t, d, "carol")
		g := mustAcquire(t, alice, "k")
		ctx, cancel := context.WithCancel(t.Context())
		bobs := holdInBackground(ctx, bob, "k")
		synctest.Wait()
		if p := placeOfKey(t, d, "k"); p.owner != "bob" || p.cleared {
			t.Fatalf("the place is %+v; want bob's", p)
		}
		cancel()
		if r := <-bobs; !errors.Is(r.Err, context.Canceled) {
			t.Fatalf("bob's Hold = %v; want context.Canceled", r.Err)
		}
		synctest.Wait()
		if p := placeOfKey(t, d, "k"); !p.cleared {
			t.Fatalf("after bob gave up the place is %+v; want it cleared", p)
		}
		if err := alice.Release(t.Context(), g); err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, carol, "k")
	})
}

// TestR25Handoff: Handoff ends the Held first, and the key then goes to
// the owner it names, with epoch + 1 and PreviousUnclean false; another
// store never gets it while the place stands, though it is free.
func TestR25Handoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := NewMemoryDriver()
		alice, bob, carol := loopStore(t, d, "alice"), loopStore(t, d, "bob"), loopStore(t, d, "carol")
		h := mustHold(t, alice, "k")
		g := h.Grant()
		if err := h.Handoff(t.Context(), "carol"); err != nil {
			t.Fatalf("Handoff = %v", err)
		}
		if !errors.Is(context.Cause(h.Context()), ErrLost) {
			t.Errorf("after Handoff the Held's context cause = %v; want ErrLost", context.Cause(h.Context()))
		}
		for range 3 {
			_, err := bob.Acquire(t.Context(), "k")
			wantHeldBy(t, "bob's Acquire of a key handed to carol", err, "carol")
			_, err = Hold(t.Context(), bob, "k", FailIfHeld())
			wantHeldBy(t, "bob's Hold(FailIfHeld) of a key handed to carol", err, "carol")
			time.Sleep(holdTTL / 4)
		}
		got := mustHold(t, carol, "k")
		if gr := got.Grant(); gr.Owner != "carol" || gr.Epoch != g.Epoch+1 || gr.PreviousUnclean {
			t.Fatalf("carol's grant %+v; want epoch %d, PreviousUnclean false", gr, g.Epoch+1)
		}
		if err := h.Release(t.Context()); err != nil {
			t.Errorf("Release after Handoff = %v; want nil (nothing left to do)", err)
		}
		_ = got.Release(t.Context())
	})
}

// TestR25HandoffFallsFree: a key handed to an owner that never comes is
// free after the bound, the store's TTL, as after a Release.
func TestR25HandoffFallsFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := NewMemoryDriver()
		alice, bob := loopStore(t, d, "alice"), loopStore(t, d, "bob")
		h := mustHold(t, alice, "k")
		if err := h.Handoff(t.Context(), "nobody"); err != nil {
			t.Fatal(err)
		}
		handed := time.Now()
		got := mustHold(t, bob, "k") // waits out the place
		if waited := time.Since(handed); waited < holdTTL {
			t.Fatalf("bob got a key handed to another %v after the Handoff; want no sooner than the TTL %v", waited, holdTTL)
		}
		if gr := got.Grant(); gr.Epoch != h.Grant().Epoch+1 || gr.PreviousUnclean {
			t.Fatalf("bob's grant %+v; want epoch + 1, PreviousUnclean false", gr)
		}
	})
}

// TestR25HandoffUnsupported: a store that keeps no places says so and
// gives nothing up.
func TestR25HandoffUnsupported(t *testing.T) {
	s, err := NewDocumentStore(newPerKeyDriver(), WithOwner("alice"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := mustHold(t, s, "k")
	if err := h.Handoff(t.Context(), "bob"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Handoff on a per-key driver = %v; want errors.ErrUnsupported", err)
	}
	if h.Context().Err() != nil {
		t.Fatal("an unsupported Handoff ended the Held")
	}
	if err := h.Handoff(t.Context(), "not an owner"); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("Handoff to an invalid owner = %v; want ErrInvalidKey", err)
	}
	_ = h.Release(t.Context())
}

// TestR25PlacesAreNoKeys: Holders lists no place record.
func TestR25PlacesAreNoKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := NewMemoryDriver()
		alice, bob := loopStore(t, d, "alice"), loopStore(t, d, "bob")
		mustAcquire(t, alice, "k")
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		holdInBackground(ctx, bob, "k")
		synctest.Wait()
		if p := placeOfKey(t, d, "k"); p.owner != "bob" {
			t.Fatalf("no place for bob: %+v", p)
		}
		var keys []string
		for rec, err := range alice.Holders(t.Context(), "") {
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, rec.Key)
		}
		if len(keys) != 1 || keys[0] != "k" {
			t.Fatalf("Holders = %q; want [k]", keys)
		}
	})
}

// TestR25Outranks: the rule of who takes a place, and when a place
// counts, case by case.
func TestR25Outranks(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	waiterAt := func(at time.Time) place {
		return place{owner: "bob", session: "0123456789abcdef0123456789abcdef", epoch: 3, at: at, version: 1}
	}
	handoff := place{owner: "carol", epoch: 3, at: t0.Add(time.Minute), version: 1}
	for _, c := range []struct {
		name  string
		p     place
		epoch uint64
		live  bool
		now   time.Time
		want  placeVerdict
	}{
		{"none", place{}, 3, false, t0, placeVerdict{}},
		{"waiter's, live", waiterAt(t0), 3, true, t0, placeVerdict{Other: true, Owner: "bob"}},
		{"waiter's, session dead", waiterAt(t0), 3, false, t0, placeVerdict{}},
		{"waiter's, another epoch", waiterAt(t0), 4, true, t0, placeVerdict{}},
		{"cleared", place{owner: "bob", session: "x", epoch: 3, cleared: true, version: 2}, 3, true, t0, placeVerdict{}},
		{"hand-off, before its bound", handoff, 3, false, t0, placeVerdict{Other: true, Owner: "carol", Until: handoff.at}},
		{"hand-off, at its bound", handoff, 3, false, handoff.at, placeVerdict{}},
	} {
		if got := judgePlace(c.p, c.epoch, "dave", "", c.live, c.now); got != c.want {
			t.Errorf("%s: judgePlace = %+v; want %+v", c.name, got, c.want)
		}
	}
	if v := judgePlace(handoff, 3, "carol", "", false, t0); !v.Mine {
		t.Errorf("a hand-off to carol is not carol's: %+v", v)
	}
	live := placeVerdict{Other: true, Owner: "bob"}
	if !outranks(waiterAt(t0), live, t0.Add(-time.Second)) {
		t.Error("a waiter that began earlier does not take the place")
	}
	if outranks(waiterAt(t0), live, t0.Add(time.Second)) {
		t.Error("a waiter that began later takes the place")
	}
	if outranks(handoff, placeVerdict{Other: true, Owner: "carol"}, t0.Add(-time.Hour)) {
		t.Error("a waiter takes a hand-off's place")
	}
	if !outranks(waiterAt(t0), placeVerdict{}, t0.Add(time.Hour)) {
		t.Error("a waiter does not take a dead place")
	}
}

// placeWatcher is a memory driver that calls onRelease before it writes
// a release of a key.
type placeWatcher struct {
	*memoryDriver
	onRelease func(rec Record)
}

func (d placeWatcher) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	if rec.Released && !isPlaceKey(rec.Key) {
		d.onRelease(rec)
	}
	return d.memoryDriver.Put(ctx, rec, pre)
}

// TestR25HandoffPlaceBeforeRelease: the place is durable before the write
// that frees the key, so that no store can take the key in between.
func TestR25HandoffPlaceBeforeRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := NewMemoryDriver().(*memoryDriver)
		var atRelease place
		d := placeWatcher{memoryDriver: mem}
		d.onRelease = func(rec Record) { atRelease = placeOfKey(t, mem, rec.Key) }
		alice := loopStore(t, d, "alice")
		h := mustHold(t, alice, "k")
		if err := h.Handoff(t.Context(), "carol"); err != nil {
			t.Fatal(err)
		}
		if atRelease.owner != "carol" || atRelease.epoch != h.Grant().Epoch {
			t.Fatalf("when the release was written the place was %+v; want carol's at epoch %d", atRelease, h.Grant().Epoch)
		}
	})
}

// TestR25HandoffLocal: the local store hands a key off in the record its
// release writes: another store waits out the bound, the named owner
// takes the key at once with epoch + 1 and PreviousUnclean false.
func TestR25HandoffLocal(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	open := func(owner string) *LocalStore {
		s, err := NewLocalStore(dir, WithOwner(owner), WithClock(clock), WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	alice, bob, carol := open("alice"), open("bob"), open("carol")
	h := mustHold(t, alice, "k")
	if err := h.Handoff(t.Context(), "carol"); err != nil {
		t.Fatalf("Handoff = %v", err)
	}
	if h.Context().Err() == nil {
		t.Fatal("Handoff left the Held live")
	}
	_, err := bob.Acquire(t.Context(), "k")
	wantHeldBy(t, "bob's Acquire of a key handed to carol", err, "carol")
	g := mustAcquire(t, carol, "k")
	if g.Epoch != h.Grant().Epoch+1 || g.PreviousUnclean {
		t.Fatalf("carol's grant %+v; want epoch %d, PreviousUnclean false", g, h.Grant().Epoch+1)
	}
	h2 := mustHold(t, alice, "j")
	if err := h2.Handoff(t.Context(), "nobody"); err != nil {
		t.Fatal(err)
	}
	_, err = bob.Acquire(t.Context(), "j")
	wantHeldBy(t, "bob's Acquire before the bound", err, "nobody")
	now = now.Add(time.Minute)
	if g := mustAcquire(t, bob, "j"); g.Epoch != h2.Grant().Epoch+1 || g.PreviousUnclean {
		t.Fatalf("bob's grant after the bound %+v; want epoch + 1, PreviousUnclean false", g)
	}
}

// TestR25HandoffAfterRelease: a Held given up already reserves nothing.
func TestR25HandoffAfterRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := NewMemoryDriver()
		alice, bob := loopStore(t, d, "alice"), loopStore(t, d, "bob")
		h := mustHold(t, alice, "k")
		if err := h.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := h.Handoff(t.Context(), "carol"); !errors.Is(err, ErrLost) {
			t.Fatalf("Handoff after Release = %v; want ErrLost", err)
		}
		mustAcquire(t, bob, "k")
	})
}
