package leasetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
)

var storeCases = []storeCase{
	{name: "R4a first grant has epoch 1", run: func(t *testing.T, e env) {
		a := e.store("alice")
		wantGrant(t, e, mustAcquire(t, a, "k"), "k", "alice", 1, false)
	}},
	{name: "R4e contention names the holder", run: func(t *testing.T, e env) {
		a, b := e.store("alice"), e.store("bob")
		g := mustAcquire(t, a, "k")
		_, err := b.Acquire(ctxBG, "k")
		var held *lease.HeldError
		if !errors.As(err, &held) || !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("second Acquire = %v; want a *HeldError", err)
		}
		if held.Key != "k" || held.Owner != "alice" || held.Epoch != g.Epoch || !held.ExpiresAt.Equal(g.ExpiresAt) {
			t.Fatalf("HeldError = %+v; want alice's grant %+v", held, g)
		}
	}},
	{name: "R4b release then re-acquire continues the epoch", run: func(t *testing.T, e env) {
		a, b := e.store("alice"), e.store("bob")
		g := mustAcquire(t, a, "k")
		wantErr(t, "Release", a.Release(ctxBG, g), nil)
		wantGrant(t, e, mustAcquire(t, b, "k"), "k", "bob", 2, false)
	}},
	{name: "R4b own release then re-acquire", run: func(t *testing.T, e env) {
		a := e.store("alice")
		wantErr(t, "Release", a.Release(ctxBG, mustAcquire(t, a, "k")), nil)
		wantGrant(t, e, mustAcquire(t, a, "k"), "k", "alice", 2, false)
	}},
	{name: "R4c re-entrant acquire returns the same grant", run: func(t *testing.T, e env) {
		a := e.store("alice")
		g1 := mustAcquire(t, a, "k")
		e.clock.Advance(e.ttl / 2)
		if g2 := mustAcquire(t, a, "k"); g2 != g1 {
			t.Fatalf("re-entrant Acquire = %+v; want %+v", g2, g1)
		}
	}},
	{name: "R4 a previous life of the same owner is another holder", run: func(t *testing.T, e env) {
		old := e.store("alice")
		mustAcquire(t, old, "k")
		_, err := e.store("alice").Acquire(ctxBG, "k")
		wantErr(t, "Acquire by a new instance of the same owner", err, lease.ErrHeld)
	}},
	{name: "R4f takeover at expiry, not 1ms before", needsExpiry: true, run: func(t *testing.T, e env) {
		a, b := e.store("alice"), e.store("bob")
		g := mustAcquire(t, a, "k")
		e.clock.Set(g.ExpiresAt.Add(-time.Millisecond))
		_, err := b.Acquire(ctxBG, "k")
		wantErr(t, "Acquire 1ms before expiry", err, lease.ErrHeld)
		e.clock.Set(g.ExpiresAt)
		wantGrant(t, e, mustAcquire(t, b, "k"), "k", "bob", 2, true)
	}},
	{name: "R4d own expired grant gets a new epoch, clean", needsExpiry: true, run: func(t *testing.T, e env) {
		a := e.store("alice")
		g := mustAcquire(t, a, "k")
		e.clock.Set(g.ExpiresAt)
		wantGrant(t, e, mustAcquire(t, a, "k"), "k", "alice", 2, false)
	}},
	{name: "R6 renew extends and keeps the epoch", needsExpiry: true, run: func(t *testing.T, e env) {
		a, b := e.store("alice"), e.store("bob")
		g := mustAcquire(t, a, "k")
		e.clock.Advance(e.ttl - time.Millisecond)
		r, err := a.Renew(ctxBG, g)
		wantErr(t, "Renew", err, nil)
		wantGrant(t, e, r, "k", "alice", 1, false)
		e.clock.Set(g.ExpiresAt) // the old expiry no longer frees the key
		_, err = b.Acquire(ctxBG, "k")
		wantErr(t, "Acquire after renew", err, lease.ErrHeld)
		rec, err := b.Holder(ctxBG, "k")
		wantErr(t, "Holder", err, nil)
		if !rec.ExpiresAt.Equal(r.ExpiresAt) || rec.Epoch != 1 {
			t.Fatalf("Holder = %+v; want the renewed expiry %v", rec, r.ExpiresAt)
		}
	}},
	{name: "R6 renew after a steal is ErrLost", needsExpiry: true, run: func(t *testing.T, e env) {
		a, b := e.store("alice"), e.store("bob")
		g := mustAcquire(t, a, "k")
		e.clock.Set(g.ExpiresAt)
		mustAcquire(t, b, "k")
		_, err := a.Renew(ctxBG, g)
		wantErr(t, "Renew after steal", err, lease.ErrLost)
		if errors.Is(err, lease.ErrHeld) {
			t.Fatalf("Renew after steal = %v; must not match ErrHeld", err)
		}
	}},
	{name: "R6 renew after expiry is ErrLost even if nobody took the key", needsExpiry: true, run: func(t *testing.T, e env) {
		a := e.store("alice")
		g := mustAcquire(t, a, "k")
		e.clock.Set(g.ExpiresAt)
		_, err := a.Renew(ctxBG, g)
		wantErr(t, "Renew after expiry", err, lease.ErrLost)
	}},
	{name: "R7 release twice is ErrLost the second time", run: func(t *testing.T, e env) {
		a := e.store("alice")
		g := mustAcquire(t, a, "k")
		wantErr(t, "first Release", a.Release(ctxBG, g), nil)
		wantErr(t, "second Release", a.Release(ctxBG, g), lease.ErrLost)
	}},
	{name: "R6 renew after release is ErrLost", run: func(t *testing.T, e env) {
		a := e.store("alice")
		g := mustAcquire(t, a, "k")
		wantErr(t, "Release", a.Release(ctxBG, g), nil)
		_, err := a.Renew(ctxBG, g)
		wantErr(t, "Renew after release", err, lease.ErrLost)
	}},
	{name: "R7 release after expiry succeeds if nobody took over", needsExpiry: true, run: func(t *testing.T, e env) {
		a, b := e.store("alice"), e.store("bob")
		g := mustAcquire(t, a, "k")
		e.clock.Set(g.ExpiresAt.Add(time.Hour))
		wantErr(t, "Release after expiry", a.Release(ctxBG, g), nil)
		wantGrant(t, e, mustAcquire(t, b, "k"), "k", "bob", 2, false)
	}},
	{name: "R7 release after a steal is ErrLost and leaves the new holder", needsExpiry: true, run: func(t *testing.T, e env) {
		a, b := e.store("alice"), e.store("bob")
		g := mustAcquire(t, a, "k")
		e.clock.Set(g.ExpiresAt)
		gb := mustAcquire(t, b, "k")
		wantErr(t, "Release after steal", a.Release(ctxBG, g), lease.ErrLost)
		rec, err := a.Holder(ctxBG, "k")
		wantErr(t, "Holder", err, nil)
		if rec.Owner != "bob" || rec.Epoch != gb.Epoch {
			t.Fatalf("Holder = %+v; want bob at epoch %d", rec, gb.Epoch)
		}
	}},
	{name: "Holder names the live holder or says ErrNotFound", run: func(t *testing.T, e env) {
		a, b := e.store("alice"), e.store("bob")
		_, err := b.Holder(ctxBG, "k")
		wantErr(t, "Holder of a never-used key", err, lease.ErrNotFound)
		g := mustAcquire(t, a, "k")
		rec, err := b.Holder(ctxBG, "k")
		wantErr(t, "Holder", err, nil)
		if rec.Key != "k" || rec.Owner != "alice" || rec.Epoch != g.Epoch || rec.Released || !rec.ExpiresAt.Equal(g.ExpiresAt) {
			t.Fatalf("Holder = %+v; want alice's grant %+v", rec, g)
		}
		wantErr(t, "Release", a.Release(ctxBG, g), nil)
		_, err = b.Holder(ctxBG, "k")
		wantErr(t, "Holder after release", err, lease.ErrNotFound)
	}},
	{name: "Holder says ErrNotFound after expiry", needsExpiry: true, run: func(t *testing.T, e env) {
		a := e.store("alice")
		g := mustAcquire(t, a, "k")
		e.clock.Set(g.ExpiresAt)
		_, err := a.Holder(ctxBG, "k")
		wantErr(t, "Holder at expiry", err, lease.ErrNotFound)
	}},
	{name: "R2 epochs grow with every new holder", run: func(t *testing.T, e env) {
		stores := []lease.Store{e.store("alice"), e.store("bob"), e.store("carol")}
		for i := range 9 {
			s := stores[i%len(stores)]
			g := mustAcquire(t, s, "k")
			if g.Epoch != uint64(i+1) {
				t.Fatalf("holder %d got epoch %d; want %d", i, g.Epoch, i+1)
			}
			wantErr(t, "Release", s.Release(ctxBG, g), nil)
		}
	}},
	{name: "keys are independent", run: func(t *testing.T, e env) {
		a, b := e.store("alice"), e.store("bob")
		mustAcquire(t, a, "k1")
		wantGrant(t, e, mustAcquire(t, b, "k2"), "k2", "bob", 1, false)
	}},
	{name: "R1 invalid keys are refused by every method", run: func(t *testing.T, e env) {
		a := e.rawStore("alice")
		for _, bad := range invalidKeys {
			g := lease.Grant{Key: bad.key, Owner: "alice", Epoch: 1}
			_, err := a.Acquire(ctxBG, bad.key)
			wantErr(t, "Acquire("+bad.name+")", err, lease.ErrInvalidKey)
			_, err = a.Renew(ctxBG, g)
			wantErr(t, "Renew("+bad.name+")", err, lease.ErrInvalidKey)
			wantErr(t, "Release("+bad.name+")", a.Release(ctxBG, g), lease.ErrInvalidKey)
			_, err = a.Holder(ctxBG, bad.key)
			wantErr(t, "Holder("+bad.name+")", err, lease.ErrInvalidKey)
		}
	}},
	{name: "a cancelled context stops every call and writes nothing", run: func(t *testing.T, e env) {
		a, b := e.store("alice"), e.store("bob")
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
		wantErr(t, "ReleaseAll", a.ReleaseAll(ctx), context.Canceled)
		_, err = b.Holder(ctxBG, "k2")
		wantErr(t, "Holder of the key a cancelled Acquire named", err, lease.ErrNotFound)
		if rec, err := b.Holder(ctxBG, "k"); err != nil || rec.Epoch != g.Epoch {
			t.Fatalf("Holder after a cancelled Release = %+v, %v; want alice still holding", rec, err)
		}
	}},
	{name: "Close then use is ErrClosed", run: func(t *testing.T, e env) {
		a := e.store("alice")
		g := mustAcquire(t, a, "k")
		wantErr(t, "Close", a.Close(), nil)
		wantErr(t, "second Close", a.Close(), nil)
		_, err := a.Acquire(ctxBG, "k")
		wantErr(t, "Acquire after Close", err, lease.ErrClosed)
		_, err = a.Renew(ctxBG, g)
		wantErr(t, "Renew after Close", err, lease.ErrClosed)
		wantErr(t, "Release after Close", a.Release(ctxBG, g), lease.ErrClosed)
		_, err = a.Holder(ctxBG, "k")
		wantErr(t, "Holder after Close", err, lease.ErrClosed)
		wantErr(t, "ReleaseAll after Close", a.ReleaseAll(ctxBG), lease.ErrClosed)
		for _, err := range a.Holders(ctxBG, "") {
			wantErr(t, "Holders after Close", err, lease.ErrClosed)
		}
	}},
	{name: "R5 racing stores: exactly one winner, losers name it", run: func(t *testing.T, e env) {
		raceRounds(t, e, 8, 10)
	}},
	{name: "R13 ReleaseAll frees every key, each clean", run: func(t *testing.T, e env) {
		a, b := e.store("alice"), e.store("bob")
		keys := []string{"jobs/1", "jobs/2", "profile:3"}
		for _, k := range keys {
			mustAcquire(t, a, k)
		}
		wantErr(t, "ReleaseAll", a.ReleaseAll(ctxBG), nil)
		for _, k := range keys {
			wantGrant(t, e, mustAcquire(t, b, k), k, "bob", 2, false)
		}
		wantErr(t, "ReleaseAll with nothing held", a.ReleaseAll(ctxBG), nil)
	}},
	{name: "R13 ReleaseAll reports a lost key as ErrLost and releases the others", needsExpiry: true, run: func(t *testing.T, e env) {
		a, b, c := e.store("alice"), e.store("bob"), e.store("carol")
		g1 := mustAcquire(t, a, "k1")
		e.clock.Set(g1.ExpiresAt) // k1 is now free to take
		mustAcquire(t, a, "k2")
		stolen := mustAcquire(t, b, "k1")
		err := a.ReleaseAll(ctxBG)
		wantErr(t, "ReleaseAll with k1 stolen", err, lease.ErrLost)
		rec, herr := c.Holder(ctxBG, "k1")
		if herr != nil || rec.Owner != "bob" || rec.Epoch != stolen.Epoch {
			t.Fatalf("Holder(k1) after ReleaseAll = %+v, %v; want bob's epoch %d untouched", rec, herr, stolen.Epoch)
		}
		wantGrant(t, e, mustAcquire(t, c, "k2"), "k2", "carol", 2, false)
	}},
	{name: "R14 Holders lists live holders by prefix in key order", run: func(t *testing.T, e env) {
		a, b := e.store("alice"), e.store("bob")
		for _, k := range []string{"jobs/b", "jobs/a", "profile:1", "jobs/c"} {
			mustAcquire(t, a, k)
		}
		released := mustAcquire(t, b, "jobs/released")
		wantErr(t, "Release", b.Release(ctxBG, released), nil)
		wantKeys(t, b, "jobs/", "jobs/a", "jobs/b", "jobs/c")
		wantKeys(t, b, "", "jobs/a", "jobs/b", "jobs/c", "profile:1")
		wantKeys(t, b, "nothing/")
		// R14: listing locked and created nothing: the next holder of a
		// listed key and of a never-used key is unaffected.
		wantGrant(t, e, mustAcquire(t, b, "nothing/x"), "nothing/x", "bob", 1, false)
		_, err := b.Acquire(ctxBG, "jobs/a")
		wantErr(t, "Acquire of a listed key", err, lease.ErrHeld)
	}},
	{name: "R14 Holders skips expired records", needsExpiry: true, run: func(t *testing.T, e env) {
		a := e.store("alice")
		old := mustAcquire(t, a, "jobs/old")
		e.clock.Set(old.ExpiresAt)
		mustAcquire(t, a, "jobs/new")
		wantKeys(t, a, "jobs/", "jobs/new")
	}},
	{name: "R15 Close ends every Held with ErrLost and ErrClosed", run: func(t *testing.T, e env) {
		// Hold may judge the grant's expiry by the real clock: start there.
		e.clock.Set(time.Now().Truncate(time.Millisecond))
		// Hold on the store itself, not a wrapper: a wrapper hides the
		// store's Close from Hold, as any Store of a caller's own would.
		a := e.rawStore("alice")
		var helds []*lease.Held
		for _, k := range []string{"held/1", "held/2"} {
			h, err := lease.Hold(ctxBG, a, e.ns+k, lease.FailIfHeld())
			if err != nil {
				t.Fatalf("Hold(%s) = %v", k, err)
			}
			helds = append(helds, h)
		}
		wantErr(t, "Close", a.Close(), nil)
		for _, h := range helds {
			select {
			case <-h.Context().Done():
			case <-time.After(2 * time.Second):
				t.Fatalf("Held %q: Context still live 2s after Close; R15 wants it ended at once", h.Grant().Key)
			}
			cause := context.Cause(h.Context())
			if !errors.Is(cause, lease.ErrLost) || !errors.Is(cause, lease.ErrClosed) {
				t.Fatalf("Held %q ended with %v; want a cause matching ErrLost and ErrClosed", h.Grant().Key, cause)
			}
		}
		_, err := a.Acquire(ctxBG, "held/3")
		wantErr(t, "Acquire after Close", err, lease.ErrClosed)
	}},
	{name: "R4 a previous life of the owner meets its record; renew at expiry is ErrLost", needsExpiry: true, run: func(t *testing.T, e env) {
		a1 := e.store("alice")
		g := mustAcquire(t, a1, "k")
		a2 := e.store("alice")
		_, err := a2.Acquire(ctxBG, "k")
		var he *lease.HeldError
		if !errors.As(err, &he) || he.Owner != "alice" || he.Epoch != 1 {
			t.Fatalf("Acquire by a new instance of the owner = %v; want ErrHeld naming alice epoch 1 (R4e)", err)
		}
		e.clock.Set(g.ExpiresAt)
		_, err = a2.Renew(ctxBG, g)
		wantErr(t, "Renew at expiry through the other instance", err, lease.ErrLost)
		_, err = a1.Renew(ctxBG, g)
		wantErr(t, "Renew at expiry", err, lease.ErrLost)
		wantGrant(t, e, mustAcquire(t, a2, "k"), "k", "alice", 2, true) // R4f, not R4d
		wantErr(t, "Release by the previous life", a1.Release(ctxBG, g), lease.ErrLost)
		if rec, err := a1.Holder(ctxBG, "k"); err != nil || rec.Epoch != 2 {
			t.Fatalf("Holder = %+v, %v; want epoch 2", rec, err)
		}
	}},
	{name: "R3 Record reads a key's record whatever its state, and changes nothing", needsExpiry: true, run: func(t *testing.T, e env) {
		a, raw := e.store("alice"), e.rawStore("bob")
		b, ok := raw.(recordReader)
		if !ok {
			t.Skip("the store has no Record method")
		}
		key := e.ns + "k"
		if _, err := b.Record(ctxBG, key); !errors.Is(err, lease.ErrNotFound) {
			t.Fatalf("Record of a key never written = %v; want ErrNotFound", err)
		}
		if _, err := b.Record(ctxBG, e.ns+"a//b"); !errors.Is(err, lease.ErrInvalidKey) {
			t.Fatalf("Record of an invalid key = %v; want ErrInvalidKey", err)
		}
		wantRecord := func(state, owner string, epoch uint64, released bool) {
			t.Helper()
			rec, err := b.Record(ctxBG, key)
			if err != nil || rec.Owner != owner || rec.Epoch != epoch || rec.Released != released {
				t.Fatalf("Record of a %s key = %+v, %v; want %s's epoch %d, released %v", state, rec, err, owner, epoch, released)
			}
		}
		g := mustAcquire(t, a, "k")
		wantRecord("live", "alice", 1, false)
		wantErr(t, "Release", a.Release(ctxBG, g), nil)
		wantRecord("released", "alice", 1, true)
		g = mustAcquire(t, a, "k") // and alice dies holding it
		e.clock.Set(g.ExpiresAt)
		if _, err := b.Holder(ctxBG, key); !errors.Is(err, lease.ErrNotFound) {
			t.Fatalf("Holder of an expired key = %v; want ErrNotFound", err)
		}
		wantRecord("expired", "alice", 2, false)
		if g, err := raw.Acquire(ctxBG, key); err != nil || g.Epoch != 3 || !g.PreviousUnclean {
			t.Fatalf("Acquire after Record = %+v, %v; want epoch 3, PreviousUnclean", g, err)
		}
	}},
	{name: "R5 many goroutines on two stores: only grants, ErrHeld and ErrLost", run: func(t *testing.T, e env) {
		stores := []lease.Store{e.store("alice"), e.store("bob")}
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				s, key := stores[i%2], fmt.Sprintf("k%d", i%3)
				for j := range 30 {
					g, err := s.Acquire(ctxBG, key)
					if errors.Is(err, lease.ErrHeld) {
						continue
					}
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					if _, err := s.Renew(ctxBG, g); err != nil && !errors.Is(err, lease.ErrLost) {
						t.Errorf("Renew: %v", err)
					}
					if j%3 == 0 {
						if err := s.Release(ctxBG, g); err != nil && !errors.Is(err, lease.ErrLost) {
							t.Errorf("Release: %v", err)
						}
					}
					if j%7 == 0 {
						e.clock.Advance(e.ttl / 3)
					}
				}
			})
		}
		wg.Wait()
	}},
	{name: "R1 owners of any printable ASCII renew and release", run: func(t *testing.T, e env) {
		for i, owner := range []string{`a]b*c?[d^~!`, `"'\%_$.{}`, strings.Repeat("~", 256), "!", `.*`, `%`} {
			s := e.store(owner)
			key := fmt.Sprintf("odd%d", i)
			g := mustAcquire(t, s, key)
			e.clock.Advance(time.Second)
			if _, err := s.Renew(ctxBG, g); err != nil {
				t.Fatalf("owner %q: Renew = %v", owner, err)
			}
			wantErr(t, "Release", s.Release(ctxBG, g), nil)
			if _, err := e.store("other").Holder(ctxBG, key); !errors.Is(err, lease.ErrNotFound) {
				t.Fatalf("owner %q: Holder after Release = %v; want ErrNotFound", owner, err)
			}
		}
	}},
}

// wantKeys checks that Holders(prefix) yields exactly the live holders of
// keys, in that order, with no error (R14).
func wantKeys(t *testing.T, s lease.Store, prefix string, keys ...string) {
	t.Helper()
	var got []string
	for rec, err := range s.Holders(ctxBG, prefix) {
		if err != nil {
			t.Fatalf("Holders(%q) yielded %v", prefix, err)
		}
		if rec.Released || rec.Owner == "" || rec.Epoch == 0 {
			t.Fatalf("Holders(%q) yielded %+v; want only live holders", prefix, rec)
		}
		got = append(got, rec.Key)
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("Holders(%q) = %q; want %q", prefix, got, keys)
	}
}

// raceRounds runs n stores racing for one key over rounds rounds (R5):
// exactly one winner each round, every loser's *HeldError names it, and
// epochs go 1, 2, 3, ...
func raceRounds(t *testing.T, e env, n, rounds int) {
	t.Helper()
	stores := make([]lease.Store, n)
	for i := range stores {
		stores[i] = e.store(fmt.Sprintf("racer-%d", i))
	}
	type result struct {
		s   lease.Store
		g   lease.Grant
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
		var winners []lease.Grant
		var winner lease.Store
		var losers []*lease.HeldError
		for range n {
			r := <-results
			var held *lease.HeldError
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

// recordReader is a store that reads a key's record whatever its state
// (lease.DocumentStore and lease.LocalStore have Record).
type recordReader interface {
	lease.Store
	Record(ctx context.Context, key string) (lease.Record, error)
}
