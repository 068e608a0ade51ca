package leasetest

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
)

// DriverOpener returns a fresh, empty backend for t each time it is called,
// and closes it when t ends (t.Cleanup). The suite shares one driver among
// several stores.
type DriverOpener = func(t *testing.T) lease.Driver

// TestDriver checks a document driver, through DocumentStores over it with
// TTL: every TestStore rule, then the rules a driver can break by itself:
// its Get and Put contract, epochs at the top of the range (R2), records
// kept (R3), expiries kept to the resolution it states (R4), expiry
// judged by its server's clock if it states ServerClock (R8), races through
// a slow link (R5), writes whose outcome is unknown (R9), corrupt records
// (R10) and the storage round trips of each operation. The optional
// interfaces the driver implements (BatchDriver's PutMany, BatchReader's
// GetMany, ListDriver's List) are checked write by write as well. A driver
// stating Capabilities.Sessions is checked by the "R24" subtests: it is a
// lease.SessionDriver, keeps each record's Session exactly, and keeps
// session records with compare-and-swap as it keeps key records.
func TestDriver(t *testing.T, open DriverOpener) {
	caps := lease.DriverCapabilities(Shared(t, func() lease.Driver { return open(t) }))
	t.Logf("capabilities: cross-process %v, expiry resolution %v, server clock %v, sessions %v",
		caps.CrossProcess, caps.ExpiryResolution, caps.ServerClock, caps.Sessions)
	runStore(t, driverStores(open))
	for _, c := range driverCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, open) })
	}
	runOptionalCases(t, Shared(t, func() lease.Driver { return open(t) }), open)
	runSessionCases(t, Shared(t, func() lease.Driver { return open(t) }), open)
}

// driverStores opens DocumentStores over one driver per test.
func driverStores(open DriverOpener) StoreOpener {
	return func(t *testing.T, clock func() time.Time, owner string) lease.Store {
		d := Shared(t, func() lease.Driver { return open(t) })
		return newDocStore(t, d, clock, owner)
	}
}

func newDocStore(t *testing.T, d lease.Driver, clock func() time.Time, owner string) *lease.DocumentStore {
	t.Helper()
	s, err := lease.NewDocumentStore(d, lease.WithOwner(owner), lease.WithClock(clock), lease.WithTTL(TTL))
	if err != nil {
		t.Fatalf("NewDocumentStore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sameState reports whether two records say the same thing.
func sameState(a, b lease.Record) bool {
	return a.Key == b.Key && a.Owner == b.Owner && a.Epoch == b.Epoch && a.Released == b.Released && a.ExpiresAt.Equal(b.ExpiresAt)
}

func wantStorageErr(t *testing.T, op string, err error) {
	t.Helper()
	var se *lease.StorageError
	if !errors.As(err, &se) || !errors.Is(err, lease.ErrStorage) {
		t.Fatalf("%s = %v; want a *StorageError", op, err)
	}
	if errors.Is(err, lease.ErrHeld) || errors.Is(err, lease.ErrLost) {
		t.Fatalf("%s = %v; a storage failure must not look like ErrHeld or ErrLost", op, err)
	}
}

type driverCase struct {
	name string
	run  func(t *testing.T, open DriverOpener)
}

var driverCases = []driverCase{
	{"driver Get and Put", testGetPut},
	{"R2 acquire at the top epoch is ErrEpochExhausted", func(t *testing.T, open DriverOpener) {
		d, clock, k := open(t), NewClock(), newNamespace()+"k"
		top := lease.Record{Key: k, Owner: "old", Epoch: math.MaxUint64, ExpiresAt: clock.Now(), Released: true}
		if _, err := d.Put(ctxBG, top, lease.Precondition{Absent: true}); err != nil {
			t.Fatalf("Put: %v", err)
		}
		s := newDocStore(t, d, clock.Now, "alice")
		_, err := s.Acquire(ctxBG, k)
		wantErr(t, "Acquire at MaxUint64", err, lease.ErrEpochExhausted)
		rec, _, err := d.Get(ctxBG, k)
		if err != nil || rec.Epoch != math.MaxUint64 || !rec.Released {
			t.Fatalf("record after refused acquire = %+v, %v; want it unchanged", rec, err)
		}
	}},
	{"R2 the last epoch is granted and kept", func(t *testing.T, open DriverOpener) {
		d, clock, k := open(t), NewClock(), newNamespace()+"k"
		prev := lease.Record{Key: k, Owner: "old", Epoch: math.MaxUint64 - 1, ExpiresAt: clock.Now(), Released: true}
		if _, err := d.Put(ctxBG, prev, lease.Precondition{Absent: true}); err != nil {
			t.Fatalf("Put: %v", err)
		}
		s := newDocStore(t, d, clock.Now, "alice")
		g := mustAcquire(t, s, k)
		if g.Epoch != math.MaxUint64 {
			t.Fatalf("epoch = %d; want MaxUint64", g.Epoch)
		}
		rec, err := s.Holder(ctxBG, k)
		if err != nil || rec.Epoch != math.MaxUint64 {
			t.Fatalf("Holder = %+v, %v; want epoch MaxUint64", rec, err)
		}
		wantErr(t, "Release at MaxUint64", s.Release(ctxBG, g), nil)
	}},
	{"R3 release keeps the record and its epoch", func(t *testing.T, open DriverOpener) {
		d, k := open(t), newNamespace()+"k"
		s := newDocStore(t, d, NewClock().Now, "alice")
		g := mustAcquire(t, s, k)
		wantErr(t, "Release", s.Release(ctxBG, g), nil)
		rec, _, err := d.Get(ctxBG, k)
		if err != nil || !rec.Released || rec.Epoch != g.Epoch || rec.Owner != "alice" {
			t.Fatalf("record after release = %+v, %v; want alice's epoch %d, released", rec, err, g.Epoch)
		}
	}},
	{"R4 grants expire at now + TTL to the stated resolution", testExpiryResolution},
	{"R8 a driver stating ServerClock judges by its server's clock", testServerClock},
	{"R5 racing stores through a slow driver", func(t *testing.T, open DriverOpener) {
		d := Slow(open(t), 200*time.Microsecond)
		e := newEnv(t, TTL, func(t *testing.T, clock func() time.Time, owner string) lease.Store {
			return newDocStore(t, d, clock, owner)
		})
		raceRounds(t, e, 8, 10)
	}},
	{"R5 a loser names the winner even if it released in between", testLoserNamesReleasedWinner},
	{"R9 ambiguous writes", testAmbiguousWrites},
	{"R10 garbage records fail closed", testGarbageRecords},
	{"R10 a corrupt stored record fails closed", testStoredCorruptRecord},
	{"round trips: acquire 2, renew 1, re-entrant acquire 1, release 1", testRoundTrips},
	{"driver Close ends it", testClose},
}

// testGetPut checks the Driver rules every driver must keep.
func testGetPut(t *testing.T, open DriverOpener) {
	d, clock, k := open(t), NewClock(), newNamespace()+"k"
	rec := lease.Record{Key: k, Owner: "alice", Epoch: 1, ExpiresAt: clock.Now().Add(TTL)}
	if _, _, err := d.Get(ctxBG, k); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get of a missing key = %v; want ErrNotFound", err)
	}
	if _, err := d.Put(ctxBG, rec, lease.Precondition{Version: 1}); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("versioned Put of a missing key = %v; want ErrConflict", err)
	}
	v1, err := d.Put(ctxBG, rec, lease.Precondition{Absent: true})
	if err != nil {
		t.Fatalf("Put absent = %v", err)
	}
	if _, err := d.Put(ctxBG, rec, lease.Precondition{Absent: true}); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("second Put absent = %v; want ErrConflict", err)
	}
	got, v, err := d.Get(ctxBG, k)
	if err != nil || v != v1 || !sameState(got, rec) {
		t.Fatalf("Get = %+v v%d, %v; want %+v v%d", got, v, err, rec, v1)
	}
	rec.Released = true
	if _, err := d.Put(ctxBG, rec, lease.Precondition{Version: v1 + 1}); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("Put with a wrong version = %v; want ErrConflict", err)
	}
	v2, err := d.Put(ctxBG, rec, lease.Precondition{Version: v1})
	if err != nil || v2 <= v1 {
		t.Fatalf("Put with the right version = v%d, %v; want a version above %d", v2, err, v1)
	}
	if got, _, err := d.Get(ctxBG, k); err != nil || !sameState(got, rec) {
		t.Fatalf("Get after a released Put = %+v, %v; want %+v (the released flag kept)", got, err, rec)
	}
	if _, err := d.Put(ctxBG, rec, lease.Precondition{Version: v1}); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("Put with a stale version = %v; want ErrConflict", err)
	}
	ctx, cancel := context.WithCancel(ctxBG)
	cancel()
	if _, _, err := d.Get(ctx, k); err == nil {
		t.Fatal("Get with a cancelled context succeeded")
	}
}

// testClose checks that a closed driver refuses calls. It runs last, in
// case open hands every test the same driver.
func testClose(t *testing.T, open DriverOpener) {
	d := open(t)
	wantErr(t, "Close", d.Close(), nil)
	if _, _, err := d.Get(ctxBG, "k"); err == nil {
		t.Fatal("Get after Close succeeded")
	}
	if _, err := d.Put(ctxBG, lease.Record{Key: "k", Owner: "alice", Epoch: 1}, lease.Precondition{Absent: true}); err == nil {
		t.Fatal("Put after Close succeeded")
	}
}

// testExpiryResolution checks R4's "new grants expire at now + T" to the
// resolution the driver states (to the nanosecond when it states none),
// and that the stored record then equals the grant.
func testExpiryResolution(t *testing.T, open DriverOpener) {
	d, k := open(t), newNamespace()+"k"
	now := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	s, err := lease.NewDocumentStore(d, lease.WithOwner("alice"), lease.WithClock(func() time.Time { return now }), lease.WithTTL(TTL))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := mustAcquire(t, s, k)
	want := now.Add(TTL)
	if r := lease.DriverCapabilities(d).ExpiryResolution; r > 0 {
		want = want.Truncate(r)
	}
	if !g.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt = %v; want %v", g.ExpiresAt, want)
	}
	if again := mustAcquire(t, s, k); again != g {
		t.Fatalf("re-entrant Acquire = %+v; want %+v", again, g)
	}
	rec, _, err := d.Get(ctxBG, k)
	if err != nil || !rec.ExpiresAt.Equal(g.ExpiresAt) {
		t.Fatalf("stored record = %+v, %v; want the grant's expiry %v (is the stated ExpiryResolution %v right?)",
			rec, err, g.ExpiresAt, lease.DriverCapabilities(d).ExpiryResolution)
	}
	now = now.Add(time.Second)
	r, err := s.Renew(ctxBG, g)
	if err != nil || r.Epoch != g.Epoch || r.ExpiresAt.Before(g.ExpiresAt) {
		t.Fatalf("Renew = %+v, %v", r, err)
	}
	wantErr(t, "Release", s.Release(ctxBG, r), nil)
}

// testRoundTrips checks the storage round trips of each operation.
func testRoundTrips(t *testing.T, open DriverOpener) {
	f, k := NewFaultDriver(open(t)), newNamespace()+"k"
	s := newDocStore(t, f, NewClock().Now, "alice")
	step := func(name string, want int, fn func()) {
		t.Helper()
		g0, p0 := f.Calls()
		fn()
		g1, p1 := f.Calls()
		if got := g1 - g0 + p1 - p0; got != want {
			t.Errorf("%s: %d round trips; want %d", name, got, want)
		}
	}
	var g lease.Grant
	step("acquire", 2, func() { g = mustAcquire(t, s, k) })
	step("renew", 1, func() { g, _ = s.Renew(ctxBG, g) })
	step("re-entrant acquire", 1, func() { mustAcquire(t, s, k) })
	step("release", 1, func() { wantErr(t, "Release", s.Release(ctxBG, g), nil) })
}

// testAmbiguousWrites checks R9: a write whose reply is lost is settled by
// re-reading, before and after commit, for every operation.
func testAmbiguousWrites(t *testing.T, open DriverOpener) {
	clock := NewClock()
	newEnv := func(t *testing.T) (*FaultDriver, *lease.DocumentStore, *lease.DocumentStore, string) {
		f := NewFaultDriver(open(t))
		return f, newDocStore(t, f, clock.Now, "alice"), newDocStore(t, f, clock.Now, "bob"), newNamespace() + "k"
	}
	t.Run("acquire fails before commit: StorageError, retry gets epoch 1", func(t *testing.T) {
		f, a, _, k := newEnv(t)
		f.FailNextPut(FailBeforeApply)
		_, err := a.Acquire(ctxBG, k)
		wantStorageErr(t, "Acquire", err)
		if g := mustAcquire(t, a, k); g.Epoch != 1 {
			t.Fatalf("retried Acquire epoch = %d; want 1", g.Epoch)
		}
	})
	t.Run("acquire fails after commit: the grant is returned", func(t *testing.T) {
		f, a, b, k := newEnv(t)
		f.FailNextPut(FailAfterApply)
		g, err := a.Acquire(ctxBG, k)
		if err != nil || g.Epoch != 1 || g.Owner != "alice" {
			t.Fatalf("Acquire = %+v, %v; want alice's epoch 1", g, err)
		}
		_, err = b.Acquire(ctxBG, k)
		wantErr(t, "bob's Acquire", err, lease.ErrHeld)
		wantErr(t, "Release", a.Release(ctxBG, g), nil)
	})
	t.Run("acquire after commit with the re-read failing: the retry finds its own write", func(t *testing.T) {
		f, a, b, k := newEnv(t)
		f.FailNextPut(FailAfterApplyAndReread)
		_, err := a.Acquire(ctxBG, k)
		wantStorageErr(t, "Acquire", err)
		g := mustAcquire(t, a, k)
		if g.Epoch != 1 || g.PreviousUnclean {
			t.Fatalf("retried Acquire = %+v; want its own epoch 1, clean", g)
		}
		_, err = b.Acquire(ctxBG, k)
		wantErr(t, "bob's Acquire", err, lease.ErrHeld)
		wantErr(t, "Release of the settled grant", a.Release(ctxBG, g), nil)
	})
	t.Run("renew fails before commit: StorageError, grant kept", func(t *testing.T) {
		f, a, _, k := newEnv(t)
		g := mustAcquire(t, a, k)
		clock.Advance(TTL / 2) // so that the renewed record differs from the old one
		f.FailNextPut(FailBeforeApply)
		_, err := a.Renew(ctxBG, g)
		wantStorageErr(t, "Renew", err)
		if _, err := a.Renew(ctxBG, g); err != nil {
			t.Fatalf("retried Renew = %v", err)
		}
	})
	t.Run("renew fails after commit: the renewed grant is returned", func(t *testing.T) {
		f, a, _, k := newEnv(t)
		g := mustAcquire(t, a, k)
		clock.Advance(TTL / 2)
		f.FailNextPut(FailAfterApply)
		r, err := a.Renew(ctxBG, g)
		if err != nil || r.Epoch != g.Epoch || !r.ExpiresAt.Equal(clock.Now().Add(TTL)) {
			t.Fatalf("Renew = %+v, %v; want the renewed grant", r, err)
		}
		wantErr(t, "Release", a.Release(ctxBG, r), nil)
	})
	t.Run("release fails before commit: error, grant kept, retry works (R7)", func(t *testing.T) {
		f, a, b, k := newEnv(t)
		g := mustAcquire(t, a, k)
		f.FailNextPut(FailBeforeApply)
		wantStorageErr(t, "Release", a.Release(ctxBG, g))
		_, err := b.Acquire(ctxBG, k)
		wantErr(t, "bob's Acquire", err, lease.ErrHeld)
		if again := mustAcquire(t, a, k); again != g {
			t.Fatalf("re-entrant Acquire after failed release = %+v; want %+v", again, g)
		}
		wantErr(t, "retried Release", a.Release(ctxBG, g), nil)
		if g2 := mustAcquire(t, b, k); g2.Epoch != 2 || g2.PreviousUnclean {
			t.Fatalf("bob's Acquire = %+v; want epoch 2, clean", g2)
		}
	})
	t.Run("release fails after commit: nil", func(t *testing.T) {
		f, a, b, k := newEnv(t)
		g := mustAcquire(t, a, k)
		f.FailNextPut(FailAfterApply)
		wantErr(t, "Release", a.Release(ctxBG, g), nil)
		if g2 := mustAcquire(t, b, k); g2.Epoch != 2 || g2.PreviousUnclean {
			t.Fatalf("bob's Acquire = %+v; want epoch 2, clean", g2)
		}
	})
	t.Run("release after commit with the re-read failing: the next call settles it", func(t *testing.T) {
		f, a, _, k := newEnv(t)
		g := mustAcquire(t, a, k)
		f.FailNextPut(FailAfterApplyAndReread)
		wantStorageErr(t, "Release", a.Release(ctxBG, g))
		g2 := mustAcquire(t, a, k)
		if g2.Epoch != 2 || g2.PreviousUnclean {
			t.Fatalf("Acquire after the unsettled release = %+v; want epoch 2, clean", g2)
		}
	})
}

// testGarbageRecords checks R10 with records no store could have written:
// never a clean grant or an epoch reset, and nothing is written.
func testGarbageRecords(t *testing.T, open DriverOpener) {
	for _, tc := range []struct {
		name string
		rec  *lease.Record // returned by Get; nil: Get returns an ErrCorrupt error
	}{
		{name: "driver reports corrupt"},
		{name: "epoch 0", rec: &lease.Record{Key: "k", Owner: "x", Epoch: 0, Released: true}},
		{name: "empty owner", rec: &lease.Record{Key: "k", Owner: "", Epoch: 4}},
		{name: "owner with a space", rec: &lease.Record{Key: "k", Owner: "a b", Epoch: 4}},
		{name: "record of another key", rec: &lease.Record{Key: "other", Owner: "x", Epoch: 4, Released: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFaultDriver(GarbageGets(open(t), tc.rec))
			s := newDocStore(t, f, NewClock().Now, "alice")
			wantFailsClosed(t, s, "k")
			if _, puts := f.Calls(); puts != 0 {
				t.Fatalf("%d writes after a corrupt read; want none", puts)
			}
		})
	}
}

// wantFailsClosed checks that every call on key k fails with ErrCorrupt.
func wantFailsClosed(t *testing.T, s lease.Store, k string) {
	t.Helper()
	_, err := s.Acquire(ctxBG, k)
	wantStorageErr(t, "Acquire", err)
	wantErr(t, "Acquire", err, lease.ErrCorrupt)
	_, err = s.Holder(ctxBG, k)
	wantErr(t, "Holder", err, lease.ErrCorrupt)
	_, err = s.Renew(ctxBG, lease.Grant{Key: k, Owner: "alice", Epoch: 4})
	wantErr(t, "Renew", err, lease.ErrCorrupt)
	wantErr(t, "Release", s.Release(ctxBG, lease.Grant{Key: k, Owner: "alice", Epoch: 4}), lease.ErrCorrupt)
}

// testStoredCorruptRecord checks R10 with a malformed record stored through
// the driver itself, where the driver accepts one: a driver that refuses to
// store it has nothing to check here.
func testStoredCorruptRecord(t *testing.T, open DriverOpener) {
	d, k := open(t), newNamespace()+"k"
	bad := lease.Record{Key: k, Owner: "not an owner", Epoch: 4, ExpiresAt: NewClock().Now().Add(TTL)}
	v, err := d.Put(ctxBG, bad, lease.Precondition{Absent: true})
	if err != nil {
		t.Logf("the driver refuses to store a record with the owner %q (%v): no corrupt record to read", bad.Owner, err)
		return
	}
	wantFailsClosed(t, newDocStore(t, d, NewClock().Now, "alice"), k)
	if rec, after, err := d.Get(ctxBG, k); err != nil || after != v || !sameState(rec, bad) {
		t.Fatalf("record after the refused calls = %+v v%d, %v; want it untouched (v%d)", rec, after, err, v)
	}
}

// hookDriver runs beforePut once, just before the next Put reaches the
// driver, so that another store can win the race in between.
type hookDriver struct {
	lease.Driver
	mu        sync.Mutex // guards beforePut
	beforePut func()
}

func (h *hookDriver) Capabilities() lease.Capabilities { return lease.DriverCapabilities(h.Driver) }

func (h *hookDriver) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	h.mu.Lock()
	fn := h.beforePut
	h.beforePut = nil
	h.mu.Unlock()
	if fn != nil {
		fn()
	}
	return h.Driver.Put(ctx, rec, pre)
}

// testLoserNamesReleasedWinner: alice reads the key free, bob acquires and
// releases before alice's compare-and-swap, which fails. Alice lost the
// race: she gets ErrHeld naming bob's grant, not a second win (R5).
func testLoserNamesReleasedWinner(t *testing.T, open DriverOpener) {
	clock, k := NewClock(), newNamespace()+"k"
	h := &hookDriver{Driver: open(t)}
	a := newDocStore(t, h, clock.Now, "alice")
	b := newDocStore(t, h.Driver, clock.Now, "bob") // same records, no hook
	var won lease.Grant
	h.beforePut = func() {
		won = mustAcquire(t, b, k)
		wantErr(t, "bob's Release", b.Release(ctxBG, won), nil)
	}
	g, err := a.Acquire(ctxBG, k)
	var held *lease.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("alice's Acquire = %+v, %v; want ErrHeld naming bob", g, err)
	}
	if held.Owner != "bob" || held.Epoch != won.Epoch {
		t.Fatalf("HeldError names %q epoch %d; want bob epoch %d", held.Owner, held.Epoch, won.Epoch)
	}
}
