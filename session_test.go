package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// sessionCounter is the memory driver, which states Sessions, counting its
// key writes and session writes apart, with hooks that see each write
// before it lands and a switch that makes every call fail.
type sessionCounter struct {
	*memoryDriver

	mu            sync.Mutex
	keyWrites     int
	sessionWrites []SessionRecord // every session write that landed, in order
	down          bool
	failEnd       bool                // writes that end a session clean fail
	perKey        time.Duration       // how long each key of a call takes (a slow database)
	onPut         func(Record)        // called before a key write, without d.mu
	onPutSession  func(SessionRecord) // called before a session write, without d.mu
}

func newSessionCounter() *sessionCounter {
	return &sessionCounter{memoryDriver: NewMemoryDriver().(*memoryDriver)}
}

func (d *sessionCounter) Capabilities() Capabilities { return Capabilities{Sessions: true} }

func (d *sessionCounter) failing() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down {
		return errDown
	}
	return nil
}

func (d *sessionCounter) setDown(down bool) { d.mu.Lock(); d.down = down; d.mu.Unlock() }

func (d *sessionCounter) setFailEnd(fail bool) { d.mu.Lock(); d.failEnd = fail; d.mu.Unlock() }

func (d *sessionCounter) counts() (keys int, sessions []SessionRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.keyWrites, slices.Clone(d.sessionWrites)
}

func (d *sessionCounter) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.keyWrites, d.sessionWrites = 0, nil
}

func (d *sessionCounter) Get(ctx context.Context, key string) (Record, uint64, error) {
	if err := d.failing(); err != nil {
		return Record{}, 0, err
	}
	return d.memoryDriver.Get(ctx, key)
}

func (d *sessionCounter) GetMany(ctx context.Context, keys []string) ([]GetResult, error) {
	if err := d.failing(); err != nil {
		return nil, err
	}
	time.Sleep(d.perKey * time.Duration(len(keys)))
	return d.memoryDriver.GetMany(ctx, keys)
}

func (d *sessionCounter) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	return d.putAll(ctx, []Write{{Rec: rec, Pre: pre}}, func() (uint64, error) { return d.memoryDriver.Put(ctx, rec, pre) })
}

func (d *sessionCounter) PutMany(ctx context.Context, ws []Write) ([]PutResult, error) {
	var results []PutResult
	_, err := d.putAll(ctx, ws, func() (uint64, error) {
		var err error
		results, err = d.memoryDriver.PutMany(ctx, ws)
		return 0, err
	})
	return results, err
}

func (d *sessionCounter) putAll(_ context.Context, ws []Write, put func() (uint64, error)) (uint64, error) {
	if err := d.failing(); err != nil {
		return 0, err
	}
	d.mu.Lock()
	hook := d.onPut
	d.keyWrites += len(ws)
	d.mu.Unlock()
	time.Sleep(d.perKey * time.Duration(len(ws)))
	if hook != nil {
		for _, w := range ws {
			hook(w.Rec)
		}
	}
	return put()
}

func (d *sessionCounter) GetSession(ctx context.Context, id string) (SessionRecord, uint64, error) {
	if err := d.failing(); err != nil {
		return SessionRecord{}, 0, err
	}
	return d.memoryDriver.GetSession(ctx, id)
}

func (d *sessionCounter) PutSession(ctx context.Context, rec SessionRecord, pre Precondition) (uint64, error) {
	if err := d.failing(); err != nil {
		return 0, err
	}
	d.mu.Lock()
	hook, failEnd := d.onPutSession, d.failEnd
	d.mu.Unlock()
	if failEnd && rec.State == SessionEndedClean {
		return 0, errDown
	}
	if hook != nil {
		hook(rec)
	}
	v, err := d.memoryDriver.PutSession(ctx, rec, pre)
	if err == nil {
		d.mu.Lock()
		d.sessionWrites = append(d.sessionWrites, rec)
		d.mu.Unlock()
	}
	return v, err
}

// holdAll holds keys through s with HoldEach and returns the Helds.
func holdAll(t *testing.T, s Store, keys []string) []*Held {
	t.Helper()
	var hs []*Held
	for r := range HoldEach(t.Context(), s, keys) {
		if r.Err != nil {
			t.Fatalf("HoldEach: %q: %v", r.Key, r.Err)
		}
		hs = append(hs, r.Held)
	}
	return hs
}

// TestR20OneWritePerPeriod: however many keys a store's Helds hold, one
// write per renewal period keeps them all (R18–R20): the session's; no key
// record is written after the keys are taken, and every Held's grant
// carries the session's new expiry.
func TestR20OneWritePerPeriod(t *testing.T) {
	for _, n := range []int{1, 1000, 10000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newSessionCounter()
				s := loopStore(t, d, "alice")
				hs := holdAll(t, s, profileKeys(n))
				d.reset()
				const periods = 3
				time.Sleep(periods*holdTTL/3 + holdTTL/6)
				synctest.Wait()
				keys, sessions := d.counts()
				if keys != 0 || len(sessions) != periods {
					t.Fatalf("%d keys held for %d renewal periods: %d key writes and %d session writes; want 0 and %d",
						n, periods, keys, len(sessions), periods)
				}
				last := sessions[len(sessions)-1].ExpiresAt
				for _, h := range hs {
					if err := h.Context().Err(); err != nil {
						t.Fatalf("Held of %q ended: %v", h.key, context.Cause(h.Context()))
					}
					if g := h.Grant(); !g.ExpiresAt.Equal(last) {
						t.Fatalf("Held of %q expires at %v; want its session's %v", h.key, g.ExpiresAt, last)
					}
				}
			})
		})
	}
}

// TestR18SessionDurableFirst: every key record that names a session is
// written after the session's record exists (R18).
func TestR18SessionDurableFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSessionCounter()
		var bad []string
		d.onPut = func(rec Record) {
			if rec.Session == "" {
				return
			}
			if _, _, err := d.memoryDriver.GetSession(context.Background(), rec.Session); err != nil {
				bad = append(bad, rec.Key)
			}
		}
		s := loopStore(t, d, "alice")
		holdAll(t, s, profileKeys(50))
		if len(bad) > 0 {
			t.Fatalf("key records written before their session's record: %v", bad)
		}
	})
}

// TestR21TakeoverEndsTheSessionFirst: a store that finds keys of a
// session past its expiry ends that session once, by a compare-and-swap,
// before it writes any of them, and every key goes to it with epoch + 1
// and PreviousUnclean; no key is taken before the session's expiry.
func TestR21TakeoverEndsTheSessionFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSessionCounter()
		alice := loopStore(t, d, "alice")
		keys := profileKeys(100)
		hs := holdAll(t, alice, keys)
		expiry := hs[0].Grant().ExpiresAt
		alice.Close() // a crash: the session is left to expire (R15, R22)

		bob := loopStore(t, d, "bob")
		var early []string
		var killed bool
		d.onPutSession = func(rec SessionRecord) {
			if rec.Owner == "alice" && rec.State == SessionEndedUnclean {
				killed = true
			}
		}
		d.onPut = func(rec Record) {
			if rec.Owner == "bob" && !isPlaceKey(rec.Key) && (!killed || time.Now().Before(expiry)) {
				early = append(early, rec.Key)
			}
		}
		d.reset()
		got := holdAll(t, bob, keys)
		if len(early) > 0 {
			t.Fatalf("bob wrote %d keys before alice's session was ended after its expiry %v", len(early), expiry)
		}
		_, sessions := d.counts()
		kills := 0
		for _, rec := range sessions {
			if rec.Owner == "alice" {
				kills++
			}
		}
		if kills != 1 {
			t.Fatalf("alice's session written %d times by bob; want one kill (R21)", kills)
		}
		for _, h := range got {
			if g := h.Grant(); g.Epoch != 2 || !g.PreviousUnclean {
				t.Fatalf("bob's grant %+v; want epoch 2, PreviousUnclean", g)
			}
		}
	})
}

// writeRecorder is a sessionCounter that records the keys of each
// PutMany call.
type writeRecorder struct {
	*sessionCounter
	mu    sync.Mutex
	calls [][]string
}

func (d *writeRecorder) PutMany(ctx context.Context, ws []Write) ([]PutResult, error) {
	keys := make([]string, len(ws))
	for i, w := range ws {
		keys[i] = w.Rec.Key
	}
	d.mu.Lock()
	d.calls = append(d.calls, keys)
	d.mu.Unlock()
	return d.sessionCounter.PutMany(ctx, ws)
}

// TestTakeoverWritesRangesOfKeys: the keys of one HoldEach that wait for
// a dead holder stay in step while they wait, so that each batched write
// of the takeover is one range of the keys, or a few, in key order: on
// SQLite a range is a few pages of the table, where keys picked at random
// rewrite a page per key (a takeover of 100,000 keys took 6 to 9 times
// its floor). Each key's own jitter spread the keys of one look over the
// next ones, which mixed them after a few looks.
func TestTakeoverWritesRangesOfKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &writeRecorder{sessionCounter: newSessionCounter()}
		alice := loopStore(t, d.sessionCounter, "alice")
		keys := profileKeys(2 * maxBatch) // several looks a round
		holdAll(t, alice, keys)
		alice.Close() // a crash: bob waits for the session's expiry
		bob := loopStore(t, d, "bob")
		holdAll(t, bob, keys)

		slices.Sort(keys)
		at := make(map[string]int, len(keys))
		for i, k := range keys {
			at[k] = i
		}
		for _, call := range d.calls {
			ranges := 1
			for i := 1; i < len(call); i++ {
				if at[call[i]] != at[call[i-1]]+1 {
					ranges++
				}
			}
			if ranges > 3 {
				t.Fatalf("a takeover write of %d keys is %d ranges of the keys; want at most 3", len(call), ranges)
			}
		}
		if len(d.calls) == 0 {
			t.Fatal("bob took the keys with no batched write")
		}
	})
}

// TestR22ReleaseAllIsOneWrite: ReleaseAll ends every Held, then ends the
// session clean in one write; every key of it is then free, clean (R22,
// R17).
func TestR22ReleaseAllIsOneWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSessionCounter()
		alice := loopStore(t, d, "alice")
		keys := profileKeys(500)
		hs := holdAll(t, alice, keys)
		var liveAtEnd int
		d.onPutSession = func(rec SessionRecord) {
			if rec.State == SessionEndedClean {
				for _, h := range hs {
					if h.Context().Err() == nil {
						liveAtEnd++
					}
				}
			}
		}
		d.reset()
		if err := alice.ReleaseAll(t.Context()); err != nil {
			t.Fatal(err)
		}
		keyWrites, sessions := d.counts()
		if keyWrites != 0 || len(sessions) != 1 || sessions[0].State != SessionEndedClean {
			t.Fatalf("ReleaseAll of %d keys: %d key writes, session writes %+v; want one write ending the session clean",
				len(keys), keyWrites, sessions)
		}
		if liveAtEnd > 0 {
			t.Fatalf("%d Helds still live when the session's end was written (R17)", liveAtEnd)
		}
		for _, h := range hs {
			g, cause := h.Grant(), context.Cause(h.Context())
			want := fmt.Sprintf("lease: lease lost: %q epoch %d was released", g.Key, g.Epoch)
			if !errors.Is(cause, ErrLost) || cause.Error() != want {
				t.Fatalf("cause of %s's Held after ReleaseAll = %v; want %q, matching ErrLost", g.Key, cause, want)
			}
		}
		bob := loopStore(t, d, "bob")
		for _, key := range keys {
			g, err := bob.Acquire(t.Context(), key)
			if err != nil || g.Epoch != 2 || g.PreviousUnclean {
				t.Fatalf("Acquire(%q) after ReleaseAll = %+v, %v; want epoch 2, clean", key, g, err)
			}
		}
		// The next Hold of alice starts a session of its own (R19).
		h := mustHold(t, alice, "another")
		rec, _, _ := d.memoryDriver.Get(t.Context(), "another")
		if rec.Session == "" || rec.Session == sessions[0].ID {
			t.Fatalf("a Hold after ReleaseAll attached its key to session %q; want a new one (ended: %s)", rec.Session, sessions[0].ID)
		}
		h.Release(t.Context())
	})
}

// TestR16NoHeldFromAGivenUpSession: when the write that ends ReleaseAll's
// session fails, its keys stay attached to it in the table (ReleaseAll
// again finishes the job, R13) while their Helds have ended (R17). A Hold
// of one of them must not get the grant that an ended Held had: it gets
// one of its own, with a new epoch (R16).
func TestR16NoHeldFromAGivenUpSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSessionCounter()
		s := loopStore(t, d, "alice")
		hs := holdAll(t, s, []string{"a", "b"})
		d.setFailEnd(true)
		if err := s.ReleaseAll(t.Context()); err == nil {
			t.Fatal("ReleaseAll = nil with its session's end failing; want its error")
		}
		for _, h := range hs {
			wantStopped(t, h)
		}
		d.setFailEnd(false)
		h := mustHold(t, s, "a")
		if g := h.Grant(); g.Epoch <= hs[0].Grant().Epoch {
			t.Fatalf("Hold after a failed ReleaseAll got epoch %d, the ended Held's was %d; want a grant of its own (R16)",
				g.Epoch, hs[0].Grant().Epoch)
		}
		if err := s.ReleaseAll(t.Context()); err != nil {
			t.Fatalf("ReleaseAll again = %v; want it to finish the job (R13)", err)
		}
		if rec, _, _ := d.memoryDriver.Get(t.Context(), "b"); rec.Released {
			return // released per key
		} else if sess, _, err := d.memoryDriver.GetSession(t.Context(), rec.Session); err != nil || sess.State != SessionEndedClean {
			t.Fatalf("b after ReleaseAll again: %+v in session %+v, %v; want it free", rec, sess, err)
		}
	})
}

// TestR17NoHeldWhileItsSessionEnds: a Hold of a key whose session
// ReleaseAll is ending, made while the write that ends it is in flight,
// finds the key attached to that session in its store's table (R4c). It
// must not get that grant, whose Held has ended: the write would free the
// key under a live Held (R17). It gets a grant of its own, a new epoch.
func TestR17NoHeldWhileItsSessionEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSessionCounter()
		s := loopStore(t, d, "alice")
		hs := holdAll(t, s, []string{"a", "b"})
		type result struct {
			h     *Held
			epoch uint64 // its epoch when the session's end was written
			err   error
		}
		got := make(chan result, 1)
		var atEnd result
		d.onPutSession = func(rec SessionRecord) {
			if rec.State != SessionEndedClean || got == nil {
				return
			}
			ch := got
			got = nil
			go func() {
				h, err := Hold(t.Context(), s, "a")
				ch <- result{h: h, err: err}
			}()
			time.Sleep(time.Second) // the Hold's look is answered, and its Held made if it gets one
			select {
			case atEnd = <-ch:
				if atEnd.h != nil && atEnd.h.Context().Err() == nil {
					atEnd.epoch = atEnd.h.Grant().Epoch
				}
			default:
				t.Error("the Hold of a key this store was releasing got no answer in a second")
			}
		}
		if err := s.ReleaseAll(t.Context()); err != nil {
			t.Fatal(err)
		}
		if atEnd.err != nil {
			t.Fatalf("Hold during ReleaseAll = %v", atEnd.err)
		}
		if old := hs[0].Grant().Epoch; atEnd.epoch == old {
			t.Fatalf("a Held of the ended Held's grant (epoch %d) was live when the write ending its session was sent (R17)", old)
		}
		if atEnd.h != nil {
			atEnd.h.Release(t.Context())
		}
	})
}

// TestR19LapsedSessionIsNeverRenewed: when the session's renewals fail
// until its deadline, every Held of it ends, and the store never writes
// that session again; its next Hold starts a new one (R19).
func TestR19LapsedSessionIsNeverRenewed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSessionCounter()
		s := loopStore(t, d, "alice")
		hs := holdAll(t, s, profileKeys(20))
		rec, _, _ := d.memoryDriver.Get(t.Context(), hs[0].key)
		old := rec.Session
		d.setDown(true)
		time.Sleep(holdTTL)
		for _, h := range hs {
			wantStopped(t, h)
		}
		d.setDown(false)
		d.reset()
		h := mustHold(t, s, "next")
		time.Sleep(holdTTL)
		synctest.Wait()
		_, sessions := d.counts()
		for _, w := range sessions {
			if w.ID == old {
				t.Fatalf("the lapsed session %s was written again: %+v", old, w)
			}
		}
		if rec, _, _ := d.memoryDriver.Get(t.Context(), "next"); rec.Session == old || rec.Session == "" {
			t.Fatalf("the next Hold's key names session %q; want a new one", rec.Session)
		}
		if err := h.Context().Err(); err != nil {
			t.Fatalf("the new session's Held ended: %v", context.Cause(h.Context()))
		}
	})
}

// TestR23MissingSessionFailsClosed: a key whose record names a session
// that is missing is neither free nor held: Holder, Holders, Acquire and
// Hold fail with ErrCorrupt (R23, R10).
func TestR23MissingSessionFailsClosed(t *testing.T) {
	ctx := t.Context()
	d := NewMemoryDriver()
	rec := Record{Key: "k", Owner: "gone", Epoch: 3, ExpiresAt: SessionKeyExpiry, Session: newSessionID()}
	if _, err := d.Put(ctx, rec, Precondition{Absent: true}); err != nil {
		t.Fatal(err)
	}
	s, err := NewDocumentStore(d, WithOwner("alice"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Holder(ctx, "k"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Holder = %v; want ErrCorrupt", err)
	}
	if _, err := s.Acquire(ctx, "k"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Acquire = %v; want ErrCorrupt", err)
	}
	if _, err := Hold(ctx, s, "k"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Hold = %v; want ErrCorrupt", err)
	}
	var errs []error
	for _, err := range s.Holders(ctx, "") {
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], ErrCorrupt) {
		t.Errorf("Holders yielded %v; want one error matching ErrCorrupt", errs)
	}
	if got, _, _ := d.Get(ctx, "k"); got != rec {
		t.Errorf("the record changed: %+v", got)
	}
}

// TestR20ConfirmRenewsTheSession: Confirm renews the session now, in one
// write, and so every Held of it.
func TestR20ConfirmRenewsTheSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSessionCounter()
		s := loopStore(t, d, "alice")
		hs := holdAll(t, s, []string{"a", "b", "c"})
		time.Sleep(time.Second)
		d.reset()
		g, err := hs[0].Confirm(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		keyWrites, sessions := d.counts()
		if keyWrites != 0 || len(sessions) != 1 {
			t.Fatalf("Confirm: %d key writes, %d session writes; want 0 and 1", keyWrites, len(sessions))
		}
		for _, h := range hs {
			if got := h.Grant().ExpiresAt; !got.Equal(g.ExpiresAt) || !got.Equal(sessions[0].ExpiresAt) {
				t.Fatalf("Held of %q expires at %v after Confirm; want %v", h.key, got, g.ExpiresAt)
			}
		}
	})
}

// TestR22SweepRemovesOnlyOldUnnamedSessions: a store that starts a
// session deletes the sessions that expired an hour ago and that no key
// names, and only those.
func TestR22SweepRemovesOnlyOldUnnamedSessions(t *testing.T) {
	ctx := t.Context()
	clock := newFakeClock()
	d := NewMemoryDriver().(*memoryDriver)
	old := clock.Now().Add(-2 * sessionRetention)
	sessions := map[string]SessionRecord{}
	for _, name := range []string{"old", "named", "recent"} {
		exp := old
		if name == "recent" {
			exp = clock.Now().Add(-time.Minute)
		}
		rec := SessionRecord{ID: newSessionID(), Owner: "gone", ExpiresAt: exp, State: SessionEndedUnclean}
		if _, err := d.PutSession(ctx, rec, Precondition{Absent: true}); err != nil {
			t.Fatal(err)
		}
		sessions[name] = rec
	}
	key := Record{Key: "k", Owner: "gone", Epoch: 1, ExpiresAt: SessionKeyExpiry, Session: sessions["named"].ID}
	if _, err := d.Put(ctx, key, Precondition{Absent: true}); err != nil {
		t.Fatal(err)
	}
	s, err := NewDocumentStore(d, WithOwner("alice"), WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	h, err := Hold(ctx, s, "other")
	if err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	s.bg.Wait() // the sweep, started with the session; Close would cancel one not yet begun
	s.Close()
	for name, rec := range sessions {
		_, _, err := d.GetSession(ctx, rec.ID)
		if gone := errors.Is(err, ErrNotFound); gone != (name == "old") {
			t.Errorf("session %q: GetSession = %v; want it removed only if it is the old unnamed one", name, err)
		}
	}
}

// TestR19RenewalAfterAKillLoses: a store whose session another store
// ended (its clock ahead, R21) loses every Held of it at its next
// renewal, and never writes the session live again (R19).
func TestR19RenewalAfterAKillLoses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSessionCounter()
		alice := loopStore(t, d, "alice")
		hs := holdAll(t, alice, []string{"a", "b", "c"})
		ahead := func() time.Time { return time.Now().Add(holdTTL) }
		bob, err := NewDocumentStore(d, WithOwner("bob"), WithTTL(holdTTL), WithClock(ahead))
		if err != nil {
			t.Fatal(err)
		}
		defer bob.Close()
		if g, err := bob.Acquire(t.Context(), "a"); err != nil || !g.PreviousUnclean {
			t.Fatalf("bob's Acquire = %+v, %v; want a takeover", g, err)
		}
		d.reset()
		time.Sleep(holdTTL / 2) // alice's next renewal comes and fails
		for _, h := range hs {
			wantStopped(t, h)
			g, cause := h.Grant(), context.Cause(h.Context())
			var over *sessionOverError
			if !errors.Is(cause, errSessionTaken) || !errors.As(cause, &over) ||
				!strings.HasPrefix(cause.Error(), fmt.Sprintf("lease: lease lost: %q epoch %d: session ", g.Key, g.Epoch)) {
				t.Errorf("cause of %s's Held after its session was killed = %v; want one naming the key, its epoch and the session, matching errSessionTaken", g.Key, cause)
			}
		}
		rec, _, _ := d.memoryDriver.Get(t.Context(), "b")
		sess, _, err := d.memoryDriver.GetSession(t.Context(), rec.Session)
		if err != nil || sess.State != SessionEndedUnclean {
			t.Fatalf("alice's session after the kill: %+v, %v; want it ended unclean", sess, err)
		}
	})
}

// TestR19NoRenewalPastTheDeadline: once the store's own deadline for its
// session has passed (renewals failed until then), a renewal is refused
// without a write, even if the session's record has not expired yet
// (R19).
func TestR19NoRenewalPastTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSessionCounter()
		s := loopStore(t, d, "alice")
		h := mustHold(t, s, "a")
		g := h.Grant()
		d.setDown(true)
		time.Sleep(holdTTL - holdTTL/12) // past the deadline, T - T/6; before the expiry
		wantStopped(t, h)
		d.setDown(false)
		d.reset()
		if _, err := s.Renew(t.Context(), g); !errors.Is(err, ErrLost) {
			t.Fatalf("Renew past the session's deadline = %v; want ErrLost", err)
		}
		if _, sessions := d.counts(); len(sessions) != 0 {
			t.Fatalf("the lapsed session was written: %+v", sessions)
		}
	})
}

// TestR21RetakeAfterALapse: after its session lapsed, a store takes its
// own keys back as HoldEach takes free ones: each with epoch + 1, not
// PreviousUnclean (R4d), under a new session: a write per key and one
// for the session, as at start-up.
func TestR21RetakeAfterALapse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSessionCounter()
		s := loopStore(t, d, "alice")
		keys := profileKeys(200)
		hs := holdAll(t, s, keys)
		d.setDown(true)
		time.Sleep(holdTTL)
		for _, h := range hs {
			wantStopped(t, h)
		}
		d.setDown(false)
		d.reset()
		again := holdAll(t, s, keys)
		for _, h := range again {
			if g := h.Grant(); g.Epoch != 2 || g.PreviousUnclean {
				t.Fatalf("retaken grant %+v; want epoch 2, clean (R4d)", g)
			}
		}
		keyWrites, sessions := d.counts()
		if keyWrites != len(keys) || len(sessions) != 1 || sessions[0].State != SessionLive {
			t.Fatalf("retaking %d keys: %d key writes, session writes %+v; want %d and one new session",
				len(keys), keyWrites, sessions, len(keys))
		}
	})
}

// TestHoldEachOnASlowStoreTakesEveryKey: on a store whose calls take
// time per key, HoldEach's looks are small enough that their grants come
// long before their session's deadline, which nothing renews during the
// first looks: every key is held, none given back (a look of 5,000 keys
// taking longer than half the TTL gave every key back, again and again).
func TestHoldEachOnASlowStoreTakesEveryKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSessionCounter()
		d.perKey = time.Millisecond // 5,000 keys: 10 s of reads and writes, against a TTL of 6 s
		s := loopStore(t, d, "alice")
		keys := profileKeys(5000)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute) // virtual: the store's calls take 10 s
		defer cancel()
		held := 0
		for r := range HoldEach(ctx, s, keys) {
			if r.Err == nil {
				held++
			}
		}
		if held != len(keys) {
			t.Fatalf("held %d of %d keys in ten minutes", held, len(keys))
		}
		if keyWrites, _ := d.counts(); keyWrites != len(keys) {
			t.Fatalf("%d key writes for %d keys; want one each, none given back", keyWrites, len(keys))
		}
	})
}
