package lease

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestEdgeR7RetriedReleaseAfterUnsettledWrite: a release whose write
// landed but whose reply and re-read were lost is retried; the retry finds
// its own write and succeeds instead of reporting ErrLost (R7, R9).
func TestEdgeR7RetriedReleaseAfterUnsettledWrite(t *testing.T) {
	f := &faultDriver{Driver: NewMemoryDriver()}
	a := newDocStore(t, f, newFakeClock(), "alice")
	g := mustAcquire(t, a, "k")
	f.set(func(f *faultDriver) { f.failPutAfter, f.failGets = true, 1 })
	wantStorageErr(t, "Release", a.Release(ctxBG, g))
	if err := a.Release(ctxBG, g); err != nil {
		t.Fatalf("retried Release = %v; want nil: the first write landed", err)
	}
}

// TestEdgeR7ReleaseAfterSameOwnerRenew: two instances of one owner; the
// second renews the first's grant, so the first's table has a stale
// version. The record still names the grant, unreleased: Release succeeds
// (R7), and so does Renew (R6).
func TestEdgeR7ReleaseAfterSameOwnerRenew(t *testing.T) {
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

// TestEdgeR4ForeignGrantNotMine: alice's store renews bob's grant (the
// record names it, so R6 allows it), but the grant is bob's: alice's
// Acquire is R4e, ErrHeld naming bob, never bob's grant handed to alice.
func TestEdgeR4ForeignGrantNotMine(t *testing.T) {
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

// TestEdgeR9PendingAcquireSupersededAndTwoKeys: an acquire whose write and
// re-read failed is superseded by another store: the retry names it (R9,
// R4e); an unsettled write on one key does not disturb another key.
func TestEdgeR9PendingAcquireSupersededAndTwoKeys(t *testing.T) {
	clock := newFakeClock()
	f := &lossyDriver{Driver: NewMemoryDriver()}
	a := newDocStore(t, f, clock, "alice")
	b := newDocStore(t, f.Driver, clock, "bob")
	f.arm(false, 1)
	_, err := a.Acquire(ctxBG, "k")
	wantStorageErr(t, "Acquire", err)
	gb := mustAcquire(t, b, "k")
	_, err = a.Acquire(ctxBG, "k")
	var he *HeldError
	if !errors.As(err, &he) || he.Owner != "bob" || he.Epoch != gb.Epoch {
		t.Fatalf("alice retry = %v", err)
	}
	// two keys
	f.arm(true, 1)
	_, err = a.Acquire(ctxBG, "k1")
	wantStorageErr(t, "Acquire k1", err)
	g2 := mustAcquire(t, a, "k2")
	g1 := mustAcquire(t, a, "k1")
	if g1.Epoch != 1 || g2.Epoch != 1 {
		t.Fatal(g1, g2)
	}
	_, err = b.Acquire(ctxBG, "k1")
	wantErr(t, "bob k1", err, ErrHeld)
}

// TestEdgeR9UnseenTakeoverThenR4d: a takeover that landed unseen is found
// by the retry with PreviousUnclean kept (R9, R4f); once it expires it is R4d.
func TestEdgeR9UnseenTakeoverThenR4d(t *testing.T) {
	clock := newFakeClock()
	f := &lossyDriver{Driver: NewMemoryDriver()}
	a := newDocStore(t, f, clock, "alice")
	b := newDocStore(t, f.Driver, clock, "bob")
	g0 := mustAcquire(t, b, "k")
	clock.Advance(testTTL)
	f.arm(true, 1)
	_, err := a.Acquire(ctxBG, "k")
	wantStorageErr(t, "Acquire", err)
	g := mustAcquire(t, a, "k")
	if g.Epoch != g0.Epoch+1 || !g.PreviousUnclean {
		t.Fatalf("retry = %+v; want epoch 2 unclean", g)
	}
	clock.Advance(testTTL)
	g3 := mustAcquire(t, a, "k")
	if g3.Epoch != 3 || g3.PreviousUnclean {
		t.Fatalf("R4d = %+v", g3)
	}
}

// lossyDriver fails the next Put's reply (after or before committing) and
// then the next getsAfter Gets: the reply and the re-read are both lost.
type lossyDriver struct {
	Driver
	mu        sync.Mutex
	armed     bool
	commit    bool
	getsAfter int
}

func (l *lossyDriver) arm(commit bool, gets int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed, l.commit, l.getsAfter = true, commit, 0
	l.getsAfter = -gets // negative: waiting for the Put
}

func (l *lossyDriver) Get(ctx context.Context, key string) (Record, uint64, error) {
	l.mu.Lock()
	fail := l.getsAfter > 0
	if fail {
		l.getsAfter--
	}
	l.mu.Unlock()
	if fail {
		return Record{}, 0, errInjected
	}
	return l.Driver.Get(ctx, key)
}

func (l *lossyDriver) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	l.mu.Lock()
	armed, commit := l.armed, l.commit
	if armed {
		l.armed, l.getsAfter = false, -l.getsAfter
	}
	l.mu.Unlock()
	if !armed {
		return l.Driver.Put(ctx, rec, pre)
	}
	if commit {
		if _, err := l.Driver.Put(ctx, rec, pre); err != nil {
			return 0, err
		}
	}
	return 0, errInjected
}

// TestEdgeR9UnsettledWrites: writes whose reply and re-read were both lost
// are settled by the next call on the key, whichever it is (R9, R7).
func TestEdgeR9UnsettledWrites(t *testing.T) {
	type env struct {
		f     *lossyDriver
		clock *fakeClock
		a, b  *DocumentStore
	}
	mk := func(t *testing.T) env {
		clock := newFakeClock()
		f := &lossyDriver{Driver: NewMemoryDriver()}
		return env{f, clock, newDocStore(t, f, clock, "alice"), newDocStore(t, f.Driver, clock, "bob")}
	}
	t.Run("acquire landed, Holder settles, acquire reuses", func(t *testing.T) {
		e := mk(t)
		e.f.arm(true, 1)
		_, err := e.a.Acquire(ctxBG, "k")
		wantStorageErr(t, "Acquire", err)
		if r, err := e.a.Holder(ctxBG, "k"); err != nil || r.Owner != "alice" {
			t.Fatal(r, err)
		}
		g := mustAcquire(t, e.a, "k")
		if g.Epoch != 1 {
			t.Fatal(g)
		}
		_, err = e.b.Acquire(ctxBG, "k")
		wantErr(t, "bob", err, ErrHeld)
		wantErr(t, "release", e.a.Release(ctxBG, g), nil)
	})
	t.Run("renew landed, retry renew", func(t *testing.T) {
		e := mk(t)
		g := mustAcquire(t, e.a, "k")
		e.clock.Advance(testTTL / 2)
		e.f.arm(true, 1)
		_, err := e.a.Renew(ctxBG, g)
		wantStorageErr(t, "Renew", err)
		e.clock.Advance(testTTL * 3 / 4) // past the old expiry, before the new
		r, err := e.a.Renew(ctxBG, g)
		if err != nil || r.Epoch != 1 || !r.ExpiresAt.Equal(e.clock.Now().Add(testTTL)) {
			t.Fatal(r, err)
		}
	})
	t.Run("renew not landed, retry after old expiry is ErrLost", func(t *testing.T) {
		e := mk(t)
		g := mustAcquire(t, e.a, "k")
		e.clock.Advance(testTTL / 2)
		e.f.arm(false, 1)
		_, err := e.a.Renew(ctxBG, g)
		wantStorageErr(t, "Renew", err)
		e.clock.Advance(testTTL / 2)
		_, err = e.a.Renew(ctxBG, g)
		wantErr(t, "Renew", err, ErrLost)
		// release after expiry, nobody took over (R7)
		wantErr(t, "Release", e.a.Release(ctxBG, g), nil)
		g2 := mustAcquire(t, e.b, "k")
		if g2.Epoch != 2 || g2.PreviousUnclean {
			t.Fatal(g2)
		}
	})
	t.Run("release not landed, retry", func(t *testing.T) {
		e := mk(t)
		g := mustAcquire(t, e.a, "k")
		e.f.arm(false, 1)
		wantStorageErr(t, "Release", e.a.Release(ctxBG, g))
		_, err := e.b.Acquire(ctxBG, "k")
		wantErr(t, "bob", err, ErrHeld)
		wantErr(t, "Release", e.a.Release(ctxBG, g), nil)
		g2 := mustAcquire(t, e.b, "k")
		if g2.Epoch != 2 || g2.PreviousUnclean {
			t.Fatal(g2)
		}
	})
	t.Run("release landed, Holder between, retry", func(t *testing.T) {
		e := mk(t)
		g := mustAcquire(t, e.a, "k")
		e.f.arm(true, 1)
		wantStorageErr(t, "Release", e.a.Release(ctxBG, g))
		_, err := e.a.Holder(ctxBG, "k")
		wantErr(t, "Holder", err, ErrNotFound)
		wantErr(t, "retried Release", e.a.Release(ctxBG, g), nil)
		wantErr(t, "third Release", e.a.Release(ctxBG, g), ErrLost)
	})
	t.Run("acquire takeover landed unseen keeps PreviousUnclean", func(t *testing.T) {
		e := mk(t)
		mustAcquire(t, e.b, "k")
		e.clock.Advance(testTTL)
		e.f.arm(true, 1)
		_, err := e.a.Acquire(ctxBG, "k")
		wantStorageErr(t, "Acquire", err)
		g := mustAcquire(t, e.a, "k")
		if g.Epoch != 2 || !g.PreviousUnclean {
			t.Fatal(g)
		}
	})
}

// TestEdgeR1EdgeCases: keys and owners at the edges of R1, refused before
// storage is touched; a cancelled ctx and a closed store; R11 names.
func TestEdgeR1EdgeCases(t *testing.T) {
	good := []string{strings.Repeat("a", 256), "@", ":", "-", "_", "a.b", "...", ".a", "a.", "a/b", "a@b:c", "a/.../b", "..a"}
	bad := []string{"", strings.Repeat("a", 257), "/", "/a", "a/", "a//b", ".", "..", "a/./b", "a/..", "./a", " ", "a b", "é", "a\x00", "a*", "a\\b", "a+b", "a%b", "~"}
	for _, k := range good {
		if err := ValidateKey(k); err != nil {
			t.Errorf("good %q: %v", k, err)
		}
	}
	for _, k := range bad {
		if err := ValidateKey(k); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("bad %q: %v", k, err)
		}
	}
	for _, o := range []string{strings.Repeat("o", 256), "~", "!", "a:b@c/d"} {
		if _, err := NewDocumentStore(NewMemoryDriver(), WithOwner(o)); err != nil {
			t.Errorf("owner %q: %v", o, err)
		}
	}
	for _, o := range []string{strings.Repeat("o", 257), "a b", "a\x7f", "é", "\t"} {
		if _, err := NewDocumentStore(NewMemoryDriver(), WithOwner(o)); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("owner %q: %v", o, err)
		}
		if _, err := NewLocalStore(t.TempDir(), WithOwner(o)); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("local owner %q: %v", o, err)
		}
		if _, err := Open(context.Background(), "memory:", WithOwner(o)); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("open owner %q: %v", o, err)
		}
	}
	// cancelled ctx + bad key on every method, closed store
	s, _ := NewDocumentStore(untouchable{t}, WithOwner("me"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Acquire(ctx, "k")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	_, err = s.Renew(ctx, Grant{Key: "k", Owner: "me", Epoch: 1})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled renew: %v", err)
	}
	s.Close()
	_, err = s.Holder(context.Background(), "k")
	if !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v", err)
	}
	if !DriverHasCrossProcessCAS("sqlite") || !DriverHasCrossProcessCAS("mongodb") || DriverHasCrossProcessCAS("memory") || DriverHasCrossProcessCAS("file") || DriverHasCrossProcessCAS("x") || DriverHasCrossProcessCAS("") {
		t.Error("R11")
	}
	if d := NewMemoryDriver(); d.Name() != "memory" {
		t.Error("name")
	}
}

// TestEdgeR6RenewAfterStaleTableExpiry: the second instance of one owner
// renewed the grant, so the first's table has an older expiry. Past that
// expiry but before the record's, the record still names the grant,
// unreleased and unexpired: Renew succeeds (R6). Once the record's expiry
// passes, Renew is ErrLost and the owner's own Acquire is R4d (clean).
func TestEdgeR6RenewAfterStaleTableExpiry(t *testing.T) {
	clock := newFakeClock()
	d := NewMemoryDriver()
	a1 := newDocStore(t, d, clock, "alice")
	a2 := newDocStore(t, d, clock, "alice")
	g := mustAcquire(t, a1, "k")
	clock.Advance(testTTL / 2)
	if _, err := a2.Renew(ctxBG, g); err != nil {
		t.Fatalf("Renew through the second instance = %v", err)
	}
	clock.Advance(testTTL * 3 / 4) // past the first expiry, before the renewed one
	r, err := a1.Renew(ctxBG, g)
	if err != nil || !r.ExpiresAt.Equal(clock.Now().Add(testTTL)) {
		t.Fatalf("Renew through the first instance = %+v, %v; want renewed (R6)", r, err)
	}
	clock.Advance(testTTL)
	_, err = a1.Renew(ctxBG, g)
	wantErr(t, "Renew at expiry", err, ErrLost)
	if g2 := mustAcquire(t, a1, "k"); g2.Epoch != 2 || g2.PreviousUnclean {
		t.Fatalf("Acquire after own expiry = %+v; want epoch 2, clean (R4d)", g2)
	}
}

// TestEdgeR5LocalLoserNamesWinnerThatReleased: on the local store, bob
// has taken the flock and not yet written his record when alice tries the
// key; bob then writes epoch 1 and releases. Alice lost the race: she gets
// ErrHeld naming bob's epoch 1, never a second grant of the round (R5).
func TestEdgeR5LocalLoserNamesWinnerThatReleased(t *testing.T) {
	for range 20 {
		root := t.TempDir()
		a := newLocal(t, root, WithOwner("alice"))
		b := newLocal(t, root, WithOwner("bob"))
		h, locked, err := b.tryLock("k")
		if err != nil || !locked {
			t.Fatalf("bob's tryLock = %v, %v", locked, err)
		}
		type result struct {
			g   Grant
			err error
		}
		done := make(chan result, 1)
		go func() {
			g, err := a.Acquire(ctxBG, "k")
			done <- result{g, err}
		}()
		for a.roundTrips.Load() < 2 { // alice found the flock taken, looked at the record, tries again
			runtime.Gosched()
		}
		g, err := b.acquireLocked("k", h, noRace)
		if err != nil {
			t.Fatalf("bob's acquire = %v", err)
		}
		wantErr(t, "bob's Release", b.Release(ctxBG, g), nil)
		r := <-done
		var held *HeldError
		if !errors.As(r.err, &held) || held.Owner != "bob" || held.Epoch != 1 {
			t.Fatalf("alice's Acquire = %+v, %v; want ErrHeld naming bob epoch 1", r.g, r.err)
		}
		a.Close()
		b.Close()
	}
}
