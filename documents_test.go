package lease

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

func newDocStore(t testing.TB, d Driver, clock *fakeClock, owner string) *DocumentStore {
	t.Helper()
	s, err := NewDocumentStore(d, WithOwner(owner), WithClock(clock.Now), WithTTL(testTTL))
	if err != nil {
		t.Fatalf("NewDocumentStore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
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

// TestDriverCapabilities checks R11: the table of driver names, and the
// memory driver's name. (Each driver package checks that its driver
// states, through DriverInfo, what its name says: testkit.WantCapabilities.)
func TestDriverCapabilities(t *testing.T) {
	for name, want := range map[string]bool{"mongodb": true, "postgres": true, "sqlite": true, "memory": false, "file": false, "": false} {
		if got := DriverHasCrossProcessCAS(name); got != want {
			t.Errorf("DriverHasCrossProcessCAS(%q) = %v; want %v", name, got, want)
		}
	}
	d := NewMemoryDriver()
	if got := d.Name(); got != "memory" {
		t.Errorf("memory driver Name() = %q", got)
	}
	if got := DriverCapabilities(d).CrossProcess; got {
		t.Errorf("the memory driver states CrossProcess %v; want false", got)
	}
}

// silentDriver is a driver from elsewhere that states nothing about itself.
type silentDriver struct{ Driver }

// TestSilentDriverIsOneProcessExactExpiry: a driver without DriverInfo is
// taken as one-process with exact expiry, even over a driver that keeps
// milliseconds; a driver stating a resolution gets expiries rounded to it.
func TestSilentDriverIsOneProcessExactExpiry(t *testing.T) {
	silent := silentDriver{NewMemoryDriver()}
	if got := DriverCapabilities(silent); got != (Capabilities{}) {
		t.Fatalf("DriverCapabilities of a silent driver = %+v; want the zero value", got)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	for _, tc := range []struct {
		name string
		d    Driver
		want time.Time
	}{
		{"silent: exact", silent, now.Add(testTTL)},
		{"states 1s", statingDriver{NewMemoryDriver(), Capabilities{ExpiryResolution: time.Second}}, now.Add(testTTL).Truncate(time.Second)},
	} {
		s, err := NewDocumentStore(tc.d, WithOwner("alice"), WithClock(func() time.Time { return now }), WithTTL(testTTL))
		if err != nil {
			t.Fatal(err)
		}
		if g := mustAcquire(t, s, "k"); !g.ExpiresAt.Equal(tc.want) {
			t.Errorf("%s: ExpiresAt = %v; want %v", tc.name, g.ExpiresAt, tc.want)
		}
		s.Close()
	}
}

// statingDriver states the capabilities it is given.
type statingDriver struct {
	Driver
	caps Capabilities
}

func (d statingDriver) Capabilities() Capabilities { return d.caps }

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

// TestKeyLocksPinnedWhileHeld: a key's lock stays in the store's locks
// while its table holds the key, and leaves with it (released, lost or
// taken over), so that the locks of a store hold no key it lost.
func TestKeyLocksPinnedWhileHeld(t *testing.T) {
	clock := newFakeClock()
	d := NewMemoryDriver()
	a, b := newDocStore(t, d, clock, "alice"), newDocStore(t, d, clock, "bob")
	pinned := func() (keys []string) {
		a.locks.mu.Lock()
		defer a.locks.mu.Unlock()
		for key, l := range a.locks.m {
			if l.refs != 0 || !l.pinned || l.key != key {
				t.Errorf("lock of %q: refs %d, pinned %v for %q; want an idle lock pinned for its key", key, l.refs, l.pinned, l.key)
			}
			keys = append(keys, key)
		}
		slices.Sort(keys)
		return keys
	}
	grants := map[string]Grant{}
	for _, key := range []string{"a", "b", "c"} {
		g, err := a.Acquire(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		grants[key] = g
	}
	if got := pinned(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("locks of %v while a, b and c are held", got)
	}
	if _, err := a.Renew(t.Context(), grants["a"]); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(t.Context(), grants["b"]); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * testTTL)
	if _, err := b.Acquire(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Renew(t.Context(), grants["c"]); !errors.Is(err, ErrLost) {
		t.Fatalf("Renew of a key taken over = %v; want ErrLost", err)
	}
	if got := pinned(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("locks of %v once b is released and c lost; want only a's", got)
	}
}
