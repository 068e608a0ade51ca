package lease

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// storeEnv is one backend under the contract suite: every store it makes
// shares the backend and the fake clock.
type storeEnv struct {
	clock *fakeClock
	// expires: grants expire at now+testTTL (document stores). The local
	// store's grants never expire; cases about expiry do not run on it.
	expires bool
	// newStore opens one more store instance, with its own owner.
	newStore func(t *testing.T, owner string) Store
}

// contractCase is one rule checked against every store kind.
type contractCase struct {
	name        string
	needsExpiry bool
	run         func(t *testing.T, e storeEnv)
}

// runContract runs every case that applies to the env that mk builds.
func runContract(t *testing.T, mk func(t *testing.T) storeEnv) {
	for _, c := range contractCases {
		t.Run(c.name, func(t *testing.T) {
			e := mk(t)
			if c.needsExpiry && !e.expires {
				return // the local store has no expiry; see local_test.go
			}
			c.run(t, e)
		})
	}
}

func mustAcquire(t *testing.T, s Store, key string) Grant {
	t.Helper()
	g, err := s.Acquire(context.Background(), key)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v", key, err)
	}
	return g
}

func wantErr(t *testing.T, op string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s = %v; want %v", op, err, want)
	}
}

// wantGrant checks a new grant's fields (R2, R4, R6).
func wantGrant(t *testing.T, e storeEnv, g Grant, key, owner string, epoch uint64, unclean bool) {
	t.Helper()
	want := Grant{Key: key, Owner: owner, Epoch: epoch, PreviousUnclean: unclean}
	if e.expires {
		want.ExpiresAt = e.clock.Now().Add(testTTL)
	}
	if g.Key != want.Key || g.Owner != want.Owner || g.Epoch != want.Epoch ||
		g.PreviousUnclean != want.PreviousUnclean || !g.ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("grant = %+v; want %+v", g, want)
	}
}

var ctxBG = context.Background()

var contractCases = []contractCase{
	{name: "R4a first grant has epoch 1", run: func(t *testing.T, e storeEnv) {
		a := e.newStore(t, "alice")
		wantGrant(t, e, mustAcquire(t, a, "k"), "k", "alice", 1, false)
	}},
	{name: "R4e contention names the holder", run: func(t *testing.T, e storeEnv) {
		a, b := e.newStore(t, "alice"), e.newStore(t, "bob")
		g := mustAcquire(t, a, "k")
		_, err := b.Acquire(ctxBG, "k")
		var held *HeldError
		if !errors.As(err, &held) || !errors.Is(err, ErrHeld) {
			t.Fatalf("second Acquire = %v; want a *HeldError", err)
		}
		if held.Key != "k" || held.Owner != "alice" || held.Epoch != g.Epoch || !held.ExpiresAt.Equal(g.ExpiresAt) {
			t.Fatalf("HeldError = %+v; want alice's grant %+v", held, g)
		}
	}},
	{name: "R4b release then re-acquire continues the epoch", run: func(t *testing.T, e storeEnv) {
		a, b := e.newStore(t, "alice"), e.newStore(t, "bob")
		g := mustAcquire(t, a, "k")
		wantErr(t, "Release", a.Release(ctxBG, g), nil)
		wantGrant(t, e, mustAcquire(t, b, "k"), "k", "bob", 2, false)
	}},
	{name: "R4b own release then re-acquire", run: func(t *testing.T, e storeEnv) {
		a := e.newStore(t, "alice")
		wantErr(t, "Release", a.Release(ctxBG, mustAcquire(t, a, "k")), nil)
		wantGrant(t, e, mustAcquire(t, a, "k"), "k", "alice", 2, false)
	}},
	{name: "R4c re-entrant acquire returns the same grant", run: func(t *testing.T, e storeEnv) {
		a := e.newStore(t, "alice")
		g1 := mustAcquire(t, a, "k")
		e.clock.Advance(testTTL / 2)
		if g2 := mustAcquire(t, a, "k"); g2 != g1 {
			t.Fatalf("re-entrant Acquire = %+v; want %+v", g2, g1)
		}
	}},
	{name: "R4 a previous life of the same owner is another holder", run: func(t *testing.T, e storeEnv) {
		old := e.newStore(t, "alice")
		mustAcquire(t, old, "k")
		_, err := e.newStore(t, "alice").Acquire(ctxBG, "k")
		wantErr(t, "Acquire by a new instance of the same owner", err, ErrHeld)
	}},
	{name: "R4f takeover at expiry, not 1ms before", needsExpiry: true, run: func(t *testing.T, e storeEnv) {
		a, b := e.newStore(t, "alice"), e.newStore(t, "bob")
		g := mustAcquire(t, a, "k")
		e.clock.Set(g.ExpiresAt.Add(-time.Millisecond))
		_, err := b.Acquire(ctxBG, "k")
		wantErr(t, "Acquire 1ms before expiry", err, ErrHeld)
		e.clock.Set(g.ExpiresAt)
		wantGrant(t, e, mustAcquire(t, b, "k"), "k", "bob", 2, true)
	}},
	{name: "R4d own expired grant gets a new epoch, clean", needsExpiry: true, run: func(t *testing.T, e storeEnv) {
		a := e.newStore(t, "alice")
		g := mustAcquire(t, a, "k")
		e.clock.Set(g.ExpiresAt)
		wantGrant(t, e, mustAcquire(t, a, "k"), "k", "alice", 2, false)
	}},
	{name: "R6 renew extends and keeps the epoch", needsExpiry: true, run: func(t *testing.T, e storeEnv) {
		a, b := e.newStore(t, "alice"), e.newStore(t, "bob")
		g := mustAcquire(t, a, "k")
		e.clock.Advance(testTTL - time.Millisecond)
		r, err := a.Renew(ctxBG, g)
		wantErr(t, "Renew", err, nil)
		wantGrant(t, e, r, "k", "alice", 1, false)
		e.clock.Set(g.ExpiresAt) // the old expiry no longer frees the key
		_, err = b.Acquire(ctxBG, "k")
		wantErr(t, "Acquire after renew", err, ErrHeld)
		rec, err := b.Holder(ctxBG, "k")
		wantErr(t, "Holder", err, nil)
		if !rec.ExpiresAt.Equal(r.ExpiresAt) || rec.Epoch != 1 {
			t.Fatalf("Holder = %+v; want the renewed expiry %v", rec, r.ExpiresAt)
		}
	}},
	{name: "R6 renew after a steal is ErrLost", needsExpiry: true, run: func(t *testing.T, e storeEnv) {
		a, b := e.newStore(t, "alice"), e.newStore(t, "bob")
		g := mustAcquire(t, a, "k")
		e.clock.Set(g.ExpiresAt)
		mustAcquire(t, b, "k")
		_, err := a.Renew(ctxBG, g)
		wantErr(t, "Renew after steal", err, ErrLost)
		if errors.Is(err, ErrHeld) {
			t.Fatalf("Renew after steal = %v; must not match ErrHeld", err)
		}
	}},
	{name: "R6 renew after expiry is ErrLost even if nobody took the key", needsExpiry: true, run: func(t *testing.T, e storeEnv) {
		a := e.newStore(t, "alice")
		g := mustAcquire(t, a, "k")
		e.clock.Set(g.ExpiresAt)
		_, err := a.Renew(ctxBG, g)
		wantErr(t, "Renew after expiry", err, ErrLost)
	}},
	{name: "R7 release twice is ErrLost the second time", run: func(t *testing.T, e storeEnv) {
		a := e.newStore(t, "alice")
		g := mustAcquire(t, a, "k")
		wantErr(t, "first Release", a.Release(ctxBG, g), nil)
		wantErr(t, "second Release", a.Release(ctxBG, g), ErrLost)
	}},
	{name: "R6 renew after release is ErrLost", run: func(t *testing.T, e storeEnv) {
		a := e.newStore(t, "alice")
		g := mustAcquire(t, a, "k")
		wantErr(t, "Release", a.Release(ctxBG, g), nil)
		_, err := a.Renew(ctxBG, g)
		wantErr(t, "Renew after release", err, ErrLost)
	}},
	{name: "R7 release after expiry succeeds if nobody took over", needsExpiry: true, run: func(t *testing.T, e storeEnv) {
		a, b := e.newStore(t, "alice"), e.newStore(t, "bob")
		g := mustAcquire(t, a, "k")
		e.clock.Set(g.ExpiresAt.Add(time.Hour))
		wantErr(t, "Release after expiry", a.Release(ctxBG, g), nil)
		wantGrant(t, e, mustAcquire(t, b, "k"), "k", "bob", 2, false)
	}},
	{name: "R7 release after a steal is ErrLost and leaves the new holder", needsExpiry: true, run: func(t *testing.T, e storeEnv) {
		a, b := e.newStore(t, "alice"), e.newStore(t, "bob")
		g := mustAcquire(t, a, "k")
		e.clock.Set(g.ExpiresAt)
		gb := mustAcquire(t, b, "k")
		wantErr(t, "Release after steal", a.Release(ctxBG, g), ErrLost)
		rec, err := a.Holder(ctxBG, "k")
		wantErr(t, "Holder", err, nil)
		if rec.Owner != "bob" || rec.Epoch != gb.Epoch {
			t.Fatalf("Holder = %+v; want bob at epoch %d", rec, gb.Epoch)
		}
	}},
	{name: "Holder names the live holder or says ErrNotFound", run: func(t *testing.T, e storeEnv) {
		a, b := e.newStore(t, "alice"), e.newStore(t, "bob")
		_, err := b.Holder(ctxBG, "k")
		wantErr(t, "Holder of a never-used key", err, ErrNotFound)
		g := mustAcquire(t, a, "k")
		rec, err := b.Holder(ctxBG, "k")
		wantErr(t, "Holder", err, nil)
		if rec.Key != "k" || rec.Owner != "alice" || rec.Epoch != g.Epoch || rec.Released || !rec.ExpiresAt.Equal(g.ExpiresAt) {
			t.Fatalf("Holder = %+v; want alice's grant %+v", rec, g)
		}
		wantErr(t, "Release", a.Release(ctxBG, g), nil)
		_, err = b.Holder(ctxBG, "k")
		wantErr(t, "Holder after release", err, ErrNotFound)
	}},
	{name: "Holder says ErrNotFound after expiry", needsExpiry: true, run: func(t *testing.T, e storeEnv) {
		a := e.newStore(t, "alice")
		g := mustAcquire(t, a, "k")
		e.clock.Set(g.ExpiresAt)
		_, err := a.Holder(ctxBG, "k")
		wantErr(t, "Holder at expiry", err, ErrNotFound)
	}},
	{name: "R2 epochs grow with every new holder", run: func(t *testing.T, e storeEnv) {
		stores := []Store{e.newStore(t, "alice"), e.newStore(t, "bob"), e.newStore(t, "carol")}
		for i := range 9 {
			s := stores[i%len(stores)]
			g := mustAcquire(t, s, "k")
			if g.Epoch != uint64(i+1) {
				t.Fatalf("holder %d got epoch %d; want %d", i, g.Epoch, i+1)
			}
			wantErr(t, "Release", s.Release(ctxBG, g), nil)
		}
	}},
	{name: "keys are independent", run: func(t *testing.T, e storeEnv) {
		a, b := e.newStore(t, "alice"), e.newStore(t, "bob")
		mustAcquire(t, a, "k1")
		wantGrant(t, e, mustAcquire(t, b, "k2"), "k2", "bob", 1, false)
	}},
	{name: "R1 invalid keys are refused by every method", run: func(t *testing.T, e storeEnv) {
		a := e.newStore(t, "alice")
		for _, bad := range badKeys {
			g := Grant{Key: bad.key, Owner: "alice", Epoch: 1}
			_, err := a.Acquire(ctxBG, bad.key)
			wantErr(t, "Acquire("+bad.name+")", err, ErrInvalidKey)
			_, err = a.Renew(ctxBG, g)
			wantErr(t, "Renew("+bad.name+")", err, ErrInvalidKey)
			wantErr(t, "Release("+bad.name+")", a.Release(ctxBG, g), ErrInvalidKey)
			_, err = a.Holder(ctxBG, bad.key)
			wantErr(t, "Holder("+bad.name+")", err, ErrInvalidKey)
		}
	}},
	{name: "a cancelled context stops every call and writes nothing", run: func(t *testing.T, e storeEnv) {
		a, b := e.newStore(t, "alice"), e.newStore(t, "bob")
		g := mustAcquire(t, a, "k")
		ctx, cancel := context.WithCancel(ctxBG)
		cancel()
		_, err := b.Acquire(ctx, "k2")
		wantErr(t, "Acquire", err, context.Canceled)
		_, err = a.Renew(ctx, g)
		wantErr(t, "Renew", err, context.Canceled)
		wantErr(t, "Release", a.Release(ctx, g), context.Canceled)
		_, err = a.Holder(ctx, "k")
		wantErr(t, "Holder", err, context.Canceled)
		_, err = b.Holder(ctxBG, "k2")
		wantErr(t, "Holder of the key a cancelled Acquire named", err, ErrNotFound)
		if rec, err := b.Holder(ctxBG, "k"); err != nil || rec.Epoch != g.Epoch {
			t.Fatalf("Holder after a cancelled Release = %+v, %v; want alice still holding", rec, err)
		}
	}},
	{name: "Close then use is ErrClosed", run: func(t *testing.T, e storeEnv) {
		a := e.newStore(t, "alice")
		g := mustAcquire(t, a, "k")
		wantErr(t, "Close", a.Close(), nil)
		wantErr(t, "second Close", a.Close(), nil)
		_, err := a.Acquire(ctxBG, "k")
		wantErr(t, "Acquire after Close", err, ErrClosed)
		_, err = a.Renew(ctxBG, g)
		wantErr(t, "Renew after Close", err, ErrClosed)
		wantErr(t, "Release after Close", a.Release(ctxBG, g), ErrClosed)
		_, err = a.Holder(ctxBG, "k")
		wantErr(t, "Holder after Close", err, ErrClosed)
	}},
	{name: "R5 racing stores: exactly one winner, losers name it", run: func(t *testing.T, e storeEnv) {
		raceRounds(t, e, 8, 10)
	}},
}

// raceRounds runs n stores racing for one key over rounds rounds (R5):
// exactly one winner each round, every loser's *HeldError names it, and
// epochs go 1, 2, 3, ...
func raceRounds(t *testing.T, e storeEnv, n, rounds int) {
	t.Helper()
	stores := make([]Store, n)
	for i := range stores {
		stores[i] = e.newStore(t, fmt.Sprintf("racer-%d", i))
	}
	type result struct {
		s   Store
		g   Grant
		err error
	}
	for round := 1; round <= rounds; round++ {
		results := make(chan result, n)
		start := make(chan struct{})
		for _, s := range stores {
			go func() {
				<-start
				g, err := s.Acquire(ctxBG, "race")
				results <- result{s, g, err}
			}()
		}
		close(start)
		var winners []Grant
		var winner Store
		var losers []*HeldError
		for range n {
			r := <-results
			var held *HeldError
			switch {
			case r.err == nil:
				winners, winner = append(winners, r.g), r.s
			case errors.As(r.err, &held):
				losers = append(losers, held)
			default:
				t.Fatalf("round %d: Acquire = %v; want a grant or ErrHeld", round, r.err)
			}
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: %d winners %+v; want exactly 1", round, len(winners), winners)
		}
		w := winners[0]
		if w.Epoch != uint64(round) {
			t.Fatalf("round %d: winner's epoch %d; want %d", round, w.Epoch, round)
		}
		for _, l := range losers {
			if l.Owner != w.Owner || l.Epoch != w.Epoch {
				t.Fatalf("round %d: loser told %q epoch %d holds; winner is %q epoch %d", round, l.Owner, l.Epoch, w.Owner, w.Epoch)
			}
		}
		wantErr(t, "winner's Release", winner.Release(ctxBG, w), nil)
	}
}

// TestGrantExpiresAtNowPlusTTL checks R4's "new grants expire at now + T"
// to the nanosecond on the memory driver, whose records keep a time.Time,
// and to the millisecond below on drivers whose records keep milliseconds.
func TestGrantExpiresAtNowPlusTTL(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d Driver) {
		now := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
		s, err := NewDocumentStore(d, WithOwner("alice"), WithClock(func() time.Time { return now }), WithTTL(testTTL))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		g := mustAcquire(t, s, "k")
		want := now.Add(testTTL)
		if r := expiryResolution(d); r > 0 {
			want = want.Truncate(r)
		}
		if !g.ExpiresAt.Equal(want) {
			t.Fatalf("ExpiresAt = %v; want %v", g.ExpiresAt, want)
		}
		if again := mustAcquire(t, s, "k"); again != g {
			t.Fatalf("re-entrant Acquire = %+v; want %+v", again, g)
		}
		rec, err := s.Holder(ctxBG, "k")
		if err != nil || !rec.ExpiresAt.Equal(g.ExpiresAt) {
			t.Fatalf("Holder = %+v, %v; want the grant's expiry %v", rec, err, g.ExpiresAt)
		}
		now = now.Add(time.Second)
		r, err := s.Renew(ctxBG, g)
		if err != nil || r.Epoch != g.Epoch || r.ExpiresAt.Before(g.ExpiresAt) {
			t.Fatalf("Renew = %+v, %v", r, err)
		}
		wantErr(t, "Release", s.Release(ctxBG, r), nil)
	})
}
