package lease

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
)

// testDriver is one backend the document-store suite runs against. open is
// called once per test; several stores share the driver it returns.
// Drivers other than memory register themselves from an init in their own
// test file.
type testDriver struct {
	name string
	open func(t *testing.T) Driver
}

var testDrivers = []testDriver{
	{name: "memory", open: func(t *testing.T) Driver { return NewMemoryDriver() }},
}

// docEnv builds a contract-suite env over driver d.
func docEnv(t *testing.T, d Driver) storeEnv {
	clock := newFakeClock()
	return storeEnv{
		clock:   clock,
		expires: true,
		newStore: func(t *testing.T, owner string) Store {
			return newDocStore(t, d, clock, owner)
		},
	}
}

func newDocStore(t testing.TB, d Driver, clock *fakeClock, owner string) *DocumentStore {
	t.Helper()
	s, err := NewDocumentStore(d, WithOwner(owner), WithClock(clock.Now), WithTTL(testTTL))
	if err != nil {
		t.Fatalf("NewDocumentStore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// forEachDriver runs fn once per registered driver.
func forEachDriver(t *testing.T, fn func(t *testing.T, d Driver)) {
	for _, td := range testDrivers {
		t.Run(td.name, func(t *testing.T) { fn(t, td.open(t)) })
	}
}

// TestDocumentContract runs the whole contract suite against every driver.
func TestDocumentContract(t *testing.T) {
	for _, td := range testDrivers {
		t.Run(td.name, func(t *testing.T) {
			runContract(t, func(t *testing.T) storeEnv { return docEnv(t, td.open(t)) })
		})
	}
}

// TestDocumentRace50Rounds: 8 stores over one driver race for one key (R5).
func TestDocumentRace50Rounds(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d Driver) {
		raceRounds(t, docEnv(t, d), 8, 50)
	})
}

// TestEpochExhausted checks R2 at the top of the range, through each driver.
func TestEpochExhausted(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d Driver) {
		clock := newFakeClock()
		top := Record{Key: "k", Owner: "old", Epoch: math.MaxUint64, ExpiresAt: clock.Now(), Released: true}
		if _, err := d.Put(ctxBG, top, Precondition{Absent: true}); err != nil {
			t.Fatalf("Put: %v", err)
		}
		s := newDocStore(t, d, clock, "alice")
		_, err := s.Acquire(ctxBG, "k")
		wantErr(t, "Acquire at MaxUint64", err, ErrEpochExhausted)
		rec, _, err := d.Get(ctxBG, "k")
		if err != nil || rec.Epoch != math.MaxUint64 || !rec.Released {
			t.Fatalf("record after refused acquire = %+v, %v; want it unchanged", rec, err)
		}
	})
}

// TestEpochTopIsGranted checks that the last epoch is granted and round-trips.
func TestEpochTopIsGranted(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d Driver) {
		clock := newFakeClock()
		prev := Record{Key: "k", Owner: "old", Epoch: math.MaxUint64 - 1, ExpiresAt: clock.Now(), Released: true}
		if _, err := d.Put(ctxBG, prev, Precondition{Absent: true}); err != nil {
			t.Fatalf("Put: %v", err)
		}
		s := newDocStore(t, d, clock, "alice")
		g := mustAcquire(t, s, "k")
		if g.Epoch != math.MaxUint64 {
			t.Fatalf("epoch = %d; want MaxUint64", g.Epoch)
		}
		rec, err := s.Holder(ctxBG, "k")
		if err != nil || rec.Epoch != math.MaxUint64 {
			t.Fatalf("Holder = %+v, %v; want epoch MaxUint64", rec, err)
		}
		wantErr(t, "Release at MaxUint64", s.Release(ctxBG, g), nil)
	})
}

// TestRecordsAreKept checks R3: release keeps the record and its epoch.
func TestRecordsAreKept(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d Driver) {
		s := newDocStore(t, d, newFakeClock(), "alice")
		g := mustAcquire(t, s, "k")
		wantErr(t, "Release", s.Release(ctxBG, g), nil)
		rec, _, err := d.Get(ctxBG, "k")
		if err != nil || !rec.Released || rec.Epoch != g.Epoch || rec.Owner != "alice" {
			t.Fatalf("record after release = %+v, %v; want alice's epoch %d, released", rec, err, g.Epoch)
		}
	})
}

// faultDriver wraps a driver to count calls and inject faults.
type faultDriver struct {
	Driver
	mu         sync.Mutex // guards the fields below
	gets, puts int
	// failPut fails the next Put: before committing it, or after.
	failPutBefore, failPutAfter bool
	failGets                    int     // fail this many following Gets
	failReread                  bool    // with failPutAfter: also fail the Get right after that Put
	getOverride                 *Record // return this record from Get instead
}

var errInjected = errors.New("injected fault")

func (f *faultDriver) Get(ctx context.Context, key string) (Record, uint64, error) {
	f.mu.Lock()
	f.gets++
	fail, override := f.failGets > 0, f.getOverride
	if fail {
		f.failGets--
	}
	f.mu.Unlock()
	if fail {
		return Record{}, 0, errInjected
	}
	if override != nil {
		return *override, 1, nil
	}
	return f.Driver.Get(ctx, key)
}

func (f *faultDriver) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	f.mu.Lock()
	f.puts++
	before, after := f.failPutBefore, f.failPutAfter
	f.failPutBefore, f.failPutAfter = false, false
	f.mu.Unlock()
	if before {
		return 0, errInjected
	}
	v, err := f.Driver.Put(ctx, rec, pre)
	if after && err == nil {
		f.set(func(f *faultDriver) {
			if f.failReread {
				f.failGets, f.failReread = f.failGets+1, false
			}
		})
		return 0, errInjected
	}
	return v, err
}

func (f *faultDriver) set(fn func(f *faultDriver)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *faultDriver) calls() (gets, puts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets, f.puts
}

// TestRoundTrips checks the budget: renew 1, release 1, acquire 2.
func TestRoundTrips(t *testing.T) {
	f := &faultDriver{Driver: NewMemoryDriver()}
	s := newDocStore(t, f, newFakeClock(), "alice")
	step := func(name string, want int, fn func()) {
		t.Helper()
		g0, p0 := f.calls()
		fn()
		g1, p1 := f.calls()
		if got := g1 - g0 + p1 - p0; got != want {
			t.Errorf("%s: %d round trips; want %d", name, got, want)
		}
	}
	var g Grant
	step("acquire", 2, func() { g = mustAcquire(t, s, "k") })
	step("renew", 1, func() { g, _ = s.Renew(ctxBG, g) })
	step("re-entrant acquire", 1, func() { mustAcquire(t, s, "k") })
	step("release", 1, func() { wantErr(t, "Release", s.Release(ctxBG, g), nil) })
}

// TestAmbiguousWrites checks R9: a write whose reply is lost is settled by
// re-reading, before and after commit, for every operation.
func TestAmbiguousWrites(t *testing.T) {
	clock := newFakeClock()
	newEnv := func(t *testing.T) (*faultDriver, *DocumentStore, *DocumentStore) {
		f := &faultDriver{Driver: NewMemoryDriver()}
		return f, newDocStore(t, f, clock, "alice"), newDocStore(t, f, clock, "bob")
	}
	t.Run("acquire fails before commit: StorageError, retry gets epoch 1", func(t *testing.T) {
		f, a, _ := newEnv(t)
		f.set(func(f *faultDriver) { f.failPutBefore = true })
		_, err := a.Acquire(ctxBG, "k")
		wantStorageErr(t, "Acquire", err)
		if g := mustAcquire(t, a, "k"); g.Epoch != 1 {
			t.Fatalf("retried Acquire epoch = %d; want 1", g.Epoch)
		}
	})
	t.Run("acquire fails after commit: the grant is returned", func(t *testing.T) {
		f, a, b := newEnv(t)
		f.set(func(f *faultDriver) { f.failPutAfter = true })
		g, err := a.Acquire(ctxBG, "k")
		if err != nil || g.Epoch != 1 || g.Owner != "alice" {
			t.Fatalf("Acquire = %+v, %v; want alice's epoch 1", g, err)
		}
		_, err = b.Acquire(ctxBG, "k")
		wantErr(t, "bob's Acquire", err, ErrHeld)
		wantErr(t, "Release", a.Release(ctxBG, g), nil)
	})
	t.Run("acquire after commit with the re-read failing: the retry finds its own write", func(t *testing.T) {
		f, a, b := newEnv(t)
		f.set(func(f *faultDriver) { f.failPutAfter, f.failReread = true, true })
		_, err := a.Acquire(ctxBG, "k")
		wantStorageErr(t, "Acquire", err)
		g := mustAcquire(t, a, "k")
		if g.Epoch != 1 || g.PreviousUnclean {
			t.Fatalf("retried Acquire = %+v; want its own epoch 1, clean", g)
		}
		_, err = b.Acquire(ctxBG, "k")
		wantErr(t, "bob's Acquire", err, ErrHeld)
		wantErr(t, "Release of the settled grant", a.Release(ctxBG, g), nil)
	})
	t.Run("renew fails before commit: StorageError, grant kept", func(t *testing.T) {
		f, a, _ := newEnv(t)
		g := mustAcquire(t, a, "k")
		clock.Advance(testTTL / 2) // so that the renewed record differs from the old one
		f.set(func(f *faultDriver) { f.failPutBefore = true })
		_, err := a.Renew(ctxBG, g)
		wantStorageErr(t, "Renew", err)
		if _, err := a.Renew(ctxBG, g); err != nil {
			t.Fatalf("retried Renew = %v", err)
		}
	})
	t.Run("renew fails after commit: the renewed grant is returned", func(t *testing.T) {
		f, a, _ := newEnv(t)
		g := mustAcquire(t, a, "k")
		clock.Advance(testTTL / 2)
		f.set(func(f *faultDriver) { f.failPutAfter = true })
		r, err := a.Renew(ctxBG, g)
		if err != nil || r.Epoch != g.Epoch || !r.ExpiresAt.Equal(clock.Now().Add(testTTL)) {
			t.Fatalf("Renew = %+v, %v; want the renewed grant", r, err)
		}
		wantErr(t, "Release", a.Release(ctxBG, r), nil)
	})
	t.Run("release fails before commit: error, grant kept, retry works (R7)", func(t *testing.T) {
		f, a, b := newEnv(t)
		g := mustAcquire(t, a, "k")
		f.set(func(f *faultDriver) { f.failPutBefore = true })
		wantStorageErr(t, "Release", a.Release(ctxBG, g))
		_, err := b.Acquire(ctxBG, "k")
		wantErr(t, "bob's Acquire", err, ErrHeld)
		if again := mustAcquire(t, a, "k"); again != g {
			t.Fatalf("re-entrant Acquire after failed release = %+v; want %+v", again, g)
		}
		wantErr(t, "retried Release", a.Release(ctxBG, g), nil)
		if g2 := mustAcquire(t, b, "k"); g2.Epoch != 2 || g2.PreviousUnclean {
			t.Fatalf("bob's Acquire = %+v; want epoch 2, clean", g2)
		}
	})
	t.Run("release fails after commit: nil", func(t *testing.T) {
		f, a, b := newEnv(t)
		g := mustAcquire(t, a, "k")
		f.set(func(f *faultDriver) { f.failPutAfter = true })
		wantErr(t, "Release", a.Release(ctxBG, g), nil)
		if g2 := mustAcquire(t, b, "k"); g2.Epoch != 2 || g2.PreviousUnclean {
			t.Fatalf("bob's Acquire = %+v; want epoch 2, clean", g2)
		}
	})
	t.Run("release after commit with the re-read failing: the next call settles it", func(t *testing.T) {
		f, a, _ := newEnv(t)
		g := mustAcquire(t, a, "k")
		f.set(func(f *faultDriver) { f.failPutAfter, f.failReread = true, true })
		wantStorageErr(t, "Release", a.Release(ctxBG, g))
		g2 := mustAcquire(t, a, "k")
		if g2.Epoch != 2 || g2.PreviousUnclean {
			t.Fatalf("Acquire after the unsettled release = %+v; want epoch 2, clean", g2)
		}
	})
}

func wantStorageErr(t *testing.T, op string, err error) {
	t.Helper()
	var se *StorageError
	if !errors.As(err, &se) || !errors.Is(err, ErrStorage) {
		t.Fatalf("%s = %v; want a *StorageError", op, err)
	}
	if errors.Is(err, ErrHeld) || errors.Is(err, ErrLost) {
		t.Fatalf("%s = %v; a storage failure must not look like ErrHeld or ErrLost", op, err)
	}
}

// TestCorruptRecordsFailClosed checks R10: a record that does not parse is
// never a clean grant or an epoch reset, and nothing is written.
func TestCorruptRecordsFailClosed(t *testing.T) {
	clock := newFakeClock()
	for _, tc := range []struct {
		name string
		rec  *Record // returned by Get; nil: Get returns an ErrCorrupt error
	}{
		{name: "driver reports corrupt"},
		{name: "epoch 0", rec: &Record{Key: "k", Owner: "x", Epoch: 0, Released: true}},
		{name: "empty owner", rec: &Record{Key: "k", Owner: "", Epoch: 4}},
		{name: "owner with a space", rec: &Record{Key: "k", Owner: "a b", Epoch: 4}},
		{name: "record of another key", rec: &Record{Key: "other", Owner: "x", Epoch: 4, Released: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &faultDriver{Driver: corruptDriver{rec: tc.rec}}
			s := newDocStore(t, f, clock, "alice")
			_, err := s.Acquire(ctxBG, "k")
			wantStorageErr(t, "Acquire", err)
			wantErr(t, "Acquire", err, ErrCorrupt)
			_, err = s.Holder(ctxBG, "k")
			wantErr(t, "Holder", err, ErrCorrupt)
			_, err = s.Renew(ctxBG, Grant{Key: "k", Owner: "alice", Epoch: 4})
			wantErr(t, "Renew", err, ErrCorrupt)
			wantErr(t, "Release", s.Release(ctxBG, Grant{Key: "k", Owner: "alice", Epoch: 4}), ErrCorrupt)
			if _, puts := f.calls(); puts != 0 {
				t.Fatalf("%d writes after a corrupt read; want none", puts)
			}
		})
	}
}

// corruptDriver returns one malformed record for every key, and fails the
// test's expectations if written to (the faultDriver around it counts).
type corruptDriver struct{ rec *Record }

func (c corruptDriver) Name() string { return "corrupt" }
func (c corruptDriver) Get(context.Context, string) (Record, uint64, error) {
	if c.rec == nil {
		return Record{}, 0, corrupt("epoch is a string")
	}
	return *c.rec, 1, nil
}
func (c corruptDriver) Put(context.Context, Record, Precondition) (uint64, error) {
	return 0, errInjected
}
func (c corruptDriver) Close() error { return nil }

// TestDriverContract checks the Driver rules every driver must keep.
func TestDriverContract(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d Driver) {
		clock := newFakeClock()
		rec := Record{Key: "k", Owner: "alice", Epoch: 1, ExpiresAt: clock.Now().Add(testTTL)}
		if _, _, err := d.Get(ctxBG, "k"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get of a missing key = %v; want ErrNotFound", err)
		}
		if _, err := d.Put(ctxBG, rec, Precondition{Version: 1}); !errors.Is(err, ErrConflict) {
			t.Fatalf("versioned Put of a missing key = %v; want ErrConflict", err)
		}
		v1, err := d.Put(ctxBG, rec, Precondition{Absent: true})
		if err != nil {
			t.Fatalf("Put absent = %v", err)
		}
		if _, err := d.Put(ctxBG, rec, Precondition{Absent: true}); !errors.Is(err, ErrConflict) {
			t.Fatalf("second Put absent = %v; want ErrConflict", err)
		}
		got, v, err := d.Get(ctxBG, "k")
		if err != nil || v != v1 || !sameState(got, rec) || got.Key != "k" {
			t.Fatalf("Get = %+v v%d, %v; want %+v v%d", got, v, err, rec, v1)
		}
		rec.Released = true
		if _, err := d.Put(ctxBG, rec, Precondition{Version: v1 + 1}); !errors.Is(err, ErrConflict) {
			t.Fatalf("Put with a wrong version = %v; want ErrConflict", err)
		}
		v2, err := d.Put(ctxBG, rec, Precondition{Version: v1})
		if err != nil || v2 <= v1 {
			t.Fatalf("Put with the right version = v%d, %v; want a version above %d", v2, err, v1)
		}
		if _, err := d.Put(ctxBG, rec, Precondition{Version: v1}); !errors.Is(err, ErrConflict) {
			t.Fatalf("Put with a stale version = %v; want ErrConflict", err)
		}
		ctx, cancel := context.WithCancel(ctxBG)
		cancel()
		if _, _, err := d.Get(ctx, "k"); err == nil {
			t.Fatal("Get with a cancelled context succeeded")
		}
		wantErr(t, "Close", d.Close(), nil)
		if _, _, err := d.Get(ctxBG, "k"); err == nil {
			t.Fatal("Get after Close succeeded")
		}
	})
}

// TestDriverCapabilities checks R11.
func TestDriverCapabilities(t *testing.T) {
	for name, want := range map[string]bool{"mongodb": true, "sqlite": true, "postgres": true, "memory": false, "file": false, "": false} {
		if got := DriverHasCrossProcessCAS(name); got != want {
			t.Errorf("DriverHasCrossProcessCAS(%q) = %v; want %v", name, got, want)
		}
	}
	if got := NewMemoryDriver().Name(); got != "memory" {
		t.Errorf("memory driver Name() = %q", got)
	}
}

// TestOpenMemory checks R11's memory: URL and the errors for bad URLs.
func TestOpenMemory(t *testing.T) {
	s, err := Open(ctxBG, "memory:", WithOwner("alice"))
	if err != nil {
		t.Fatalf("Open(memory:) = %v", err)
	}
	g := mustAcquire(t, s, "k")
	wantErr(t, "Release", s.Release(ctxBG, g), nil)
	wantErr(t, "Close", s.Close(), nil)
	for _, url := range []string{"", "nonsense", "postgres://%zz", "redis:"} {
		if s, err := Open(ctxBG, url); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded; want an error", url)
		}
	}
}
