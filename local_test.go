//go:build unix

package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasekit/lease/internal/localfs"
)

// newLocal returns a LocalStore on root that the test closes at its end.
func newLocal(t testing.TB, root string, opts ...Option) *LocalStore {
	t.Helper()
	s, err := NewLocalStore(root, opts...)
	if err != nil {
		t.Fatalf("NewLocalStore(%q) = %v", root, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// wantHeld checks that err is a *HeldError naming owner and epoch.
func wantHeld(t testing.TB, err error, owner string, epoch uint64) {
	t.Helper()
	var he *HeldError
	if !errors.As(err, &he) || !errors.Is(err, ErrHeld) {
		t.Fatalf("err = %v; want a *HeldError", err)
	}
	if he.Owner != owner || he.Epoch != epoch || !he.ExpiresAt.IsZero() {
		t.Fatalf("HeldError = %+v; want owner %q epoch %d, no expiry", he, owner, epoch)
	}
}

// TestLocalCases checks what is particular to the local store: a crash
// (Close) frees the key at once, the flock binds a grant to one instance,
// and a replaced lock file ends the grant. Each case gets a fresh root and
// two stores on it, a and b.
func TestLocalCases(t *testing.T) {
	ctx := context.Background()
	const key = "jobs/nightly"
	cases := []struct {
		name string
		run  func(t *testing.T, root string, a, b *LocalStore)
	}{
		{"R4a grants never expire", func(t *testing.T, root string, a, b *LocalStore) {
			g := mustAcquire(t, a, key)
			if want := (Grant{Key: key, Owner: "a", Epoch: 1}); g != want {
				t.Fatalf("Acquire = %+v; want %+v", g, want)
			}
			r, err := a.Renew(ctx, g)
			if err != nil || r != g {
				t.Fatalf("Renew = %+v, %v; want %+v", r, err, g)
			}
		}},
		{"R4c one release of a re-entrant grant frees the key", func(t *testing.T, root string, a, b *LocalStore) {
			g := mustAcquire(t, a, key)
			mustAcquire(t, a, key)
			if err := a.Release(ctx, g); err != nil {
				t.Fatal(err)
			}
			if g := mustAcquire(t, b, key); g.Epoch != 2 || g.PreviousUnclean {
				t.Fatalf("after release: %+v; want epoch 2 clean", g)
			}
		}},
		{"R4f a crashed holder (Close) yields epoch+1 PreviousUnclean", func(t *testing.T, root string, a, b *LocalStore) {
			mustAcquire(t, a, key)
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			g := mustAcquire(t, b, key)
			if g.Epoch != 2 || !g.PreviousUnclean {
				t.Fatalf("after crash: %+v; want epoch 2 unclean", g)
			}
		}},
		{"R6 renew of a grant another holder took is ErrLost, not ErrHeld", func(t *testing.T, root string, a, b *LocalStore) {
			g := mustAcquire(t, a, key)
			a.Close()
			mustAcquire(t, b, key)
			if _, err := b.Renew(ctx, g); !errors.Is(err, ErrLost) || errors.Is(err, ErrHeld) {
				t.Fatalf("Renew of a lost grant = %v; want ErrLost", err)
			}
			stale := g
			stale.Owner = "b"
			if _, err := b.Renew(ctx, stale); !errors.Is(err, ErrLost) {
				t.Fatalf("Renew of an old epoch = %v; want ErrLost", err)
			}
		}},
		{"R6 renew when the lock file was replaced is ErrLost", func(t *testing.T, root string, a, b *LocalStore) {
			g := mustAcquire(t, a, key)
			path := a.lockPath(key)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// A foreign tool replaces the file: a's flock now guards nothing.
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Renew(ctx, g); !errors.Is(err, ErrLost) {
				t.Fatalf("Renew = %v; want ErrLost", err)
			}
		}},
		{"R6 renew of a record someone else rewrote is ErrLost and frees the flock", func(t *testing.T, root string, a, b *LocalStore) {
			g := mustAcquire(t, a, key)
			// A foreign writer that ignores the flock names another holder.
			f, err := os.OpenFile(a.lockPath(key), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := writeRecord(f, 2, toSlot(Record{Key: key, Owner: "intruder", Epoch: 5})); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Renew(ctx, g); !errors.Is(err, ErrLost) {
				t.Fatalf("Renew = %v; want ErrLost", err)
			}
			wantFlockFree(t, a.lockPath(key))
			if g := mustAcquire(t, b, key); g.Epoch != 6 || !g.PreviousUnclean {
				t.Fatalf("after the intruder: %+v; want epoch 6 unclean", g)
			}
		}},
		{"R7 release by an instance that does not hold the grant is ErrLost", func(t *testing.T, root string, a, b *LocalStore) {
			g := mustAcquire(t, a, key)
			if err := b.Release(ctx, g); !errors.Is(err, ErrLost) {
				t.Fatalf("Release by b = %v; want ErrLost", err)
			}
			if _, err := b.Acquire(ctx, key); !errors.Is(err, ErrHeld) {
				t.Fatalf("after b's refused release: %v; want ErrHeld", err)
			}
		}},
		{"Holder names the live holder, ErrNotFound otherwise", func(t *testing.T, root string, a, b *LocalStore) {
			if _, err := b.Holder(ctx, key); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Holder of a fresh key = %v; want ErrNotFound", err)
			}
			g := mustAcquire(t, a, key)
			for _, s := range []*LocalStore{a, b} {
				rec, err := s.Holder(ctx, key)
				want := Record{Key: key, Owner: "a", Epoch: 1}
				if err != nil || rec != want {
					t.Fatalf("Holder = %+v, %v; want %+v", rec, err, want)
				}
			}
			if err := a.Release(ctx, g); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Holder(ctx, key); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Holder after release = %v; want ErrNotFound", err)
			}
			mustAcquire(t, a, key)
			a.Close()
			if _, err := b.Holder(ctx, key); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Holder after the holder crashed = %v; want ErrNotFound", err)
			}
		}},
		{"R1 invalid keys create no file", func(t *testing.T, root string, a, b *LocalStore) {
			for _, bad := range badKeys {
				if _, err := a.Acquire(ctx, bad.key); !errors.Is(err, ErrInvalidKey) {
					t.Errorf("Acquire(%s) = %v; want ErrInvalidKey", bad.name, err)
				}
				if _, err := a.Holder(ctx, bad.key); !errors.Is(err, ErrInvalidKey) {
					t.Errorf("Holder(%s) = %v; want ErrInvalidKey", bad.name, err)
				}
			}
			if ents, _ := os.ReadDir(root); len(ents) != 0 {
				t.Fatalf("root holds %d entries after invalid keys; want none", len(ents))
			}
			// The longest key and the longest owner fit one slot together.
			longOwner := strings.Repeat("o", 256)
			s := newLocal(t, root, WithOwner(longOwner))
			long := strings.Repeat("k", 256)
			if g := mustAcquire(t, s, long); g.Epoch != 1 {
				t.Fatalf("longest key: %+v", g)
			}
			if rec, err := a.Holder(ctx, long); err != nil || rec.Owner != longOwner || rec.Key != long {
				t.Fatalf("Holder of the longest key = %+v, %v", rec, err)
			}
		}},
		{"a cancelled context is returned before storage is touched", func(t *testing.T, root string, a, b *LocalStore) {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := a.Acquire(cctx, key); !errors.Is(err, context.Canceled) {
				t.Fatalf("Acquire = %v; want context.Canceled", err)
			}
			if ents, _ := os.ReadDir(root); len(ents) != 0 {
				t.Fatalf("root holds %d entries; want none", len(ents))
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			a := newLocal(t, root, WithOwner("a"))
			b := newLocal(t, root, WithOwner("b"))
			tc.run(t, root, a, b)
		})
	}
}

// TestLocalRoot (NewLocalStore; R1 for owners): a root that is a file, is
// not writable, or sits in a directory that does not exist is refused at
// NewLocalStore; a missing root is created owner-only, and so are lock files.
func TestLocalRoot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, root := range map[string]string{
		"empty":          "",
		"file":           file,
		"missing parent": filepath.Join(dir, "no", "such"),
		// As root, permission bits do not stop us, so use a directory
		// the kernel refuses writes in for everyone.
		"unwritable": "/proc/self",
	} {
		if s, err := NewLocalStore(root); err == nil {
			s.Close()
			t.Errorf("%s: NewLocalStore(%q) succeeded; want an error", name, root)
		}
	}
	if _, err := NewLocalStore(dir, WithOwner("has space")); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("bad owner: %v; want ErrInvalidKey", err)
	}

	root := filepath.Join(dir, "leases")
	s := newLocal(t, root)
	mustAcquire(t, s, "k")
	if fi, err := os.Stat(root); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("root mode = %v, %v; want 0700", fi.Mode(), err)
	}
	fi, err := os.Stat(s.lockPath("k"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("lock file mode = %v, %v; want 0600", fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 1 {
		t.Fatalf("root holds %d entries; want the one lock file (no probe left behind)", len(ents))
	}
}

// TestLocalOpen (R11): Open accepts file:/dir and file:///dir, not a host.
func TestLocalOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, url := range []string{"file:" + dir, "file://" + dir} {
		s, err := Open(ctx, url, WithOwner("o"))
		if err != nil {
			t.Fatalf("Open(%q) = %v", url, err)
		}
		if _, ok := s.(*LocalStore); !ok {
			t.Fatalf("Open(%q) = %T; want *LocalStore", url, s)
		}
		g := mustAcquire(t, s, "k")
		if err := s.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	if _, err := Open(ctx, "file://host"+dir); err == nil {
		t.Fatal("Open with a host succeeded; want an error")
	}
}

// TestLocalGoroutines: stores on one root, each used by its own
// goroutine, never let two holders overlap, and every grant gets the next
// epoch (R2, R5).
func TestLocalGoroutines(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	var (
		holders atomic.Int32
		mu      sync.Mutex
		epochs  []uint64
		wg      sync.WaitGroup
		errs    = make(chan error, 8)
	)
	for i := range 8 {
		s := newLocal(t, root, WithOwner(fmt.Sprintf("g%d", i)))
		wg.Go(func() {
			for range 25 {
				g, err := s.Acquire(ctx, "k")
				if errors.Is(err, ErrHeld) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				if holders.Add(1) > 1 {
					errs <- errors.New("two holders at once")
				}
				mu.Lock()
				epochs = append(epochs, g.Epoch)
				mu.Unlock()
				holders.Add(-1)
				if err := s.Release(ctx, g); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(epochs) == 0 {
		t.Fatal("no acquire succeeded")
	}
	for i, e := range epochs {
		if e != uint64(i+1) {
			t.Fatalf("grant %d has epoch %d; want %d (epochs %v)", i, e, i+1, epochs)
		}
	}
}

// openFDs counts this process's open descriptors on files under root, so
// that descriptors other tests or the runtime open do not count.
func openFDs(t *testing.T, root string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting descriptors needs /proc: %v", err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(target, root+"/") {
			n++
		}
	}
	return n
}

// TestLocalNoDescriptorLeft (Close, R4f): held keys cost descriptors until
// Release or Close, and refused or contended calls cost none.
func TestLocalNoDescriptorLeft(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	a := newLocal(t, root, WithOwner("a"))
	b := newLocal(t, root, WithOwner("b"))
	g := mustAcquire(t, a, "k1")
	mustAcquire(t, a, "k2")
	mustAcquire(t, a, "k2")
	if _, err := b.Acquire(ctx, "k1"); !errors.Is(err, ErrHeld) {
		t.Fatalf("Acquire = %v; want ErrHeld", err)
	}
	if _, err := b.Holder(ctx, "k2"); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Holder(ctx, "k1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Holder = %v; want ErrNotFound", err)
	}
	if n := openFDs(t, root); n != 1 {
		t.Fatalf("%d descriptors open holding one key; want 1", n)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n := openFDs(t, root); n != 0 {
		t.Fatalf("%d descriptors open after Close; want none", n)
	}
}

// TestLocalInodeCheck: fileIDOf and pathID, which tell whether the lock
// file path still names the locked inode, agree on one file and its hard
// links and tell a replaced file apart.
func TestLocalInodeCheck(t *testing.T) {
	dir := t.TempDir()
	path, link := filepath.Join(dir, "lock"), filepath.Join(dir, "link")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Link(path, link); err != nil {
		t.Fatal(err)
	}
	id := func(get func() (localfs.FileID, error)) localfs.FileID {
		t.Helper()
		v, err := get()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	byFD := id(func() (localfs.FileID, error) { return localfs.IDOf(f) })
	if !byFD.Same(id(func() (localfs.FileID, error) { return localfs.PathID(path) })) {
		t.Fatal("a descriptor and its path name different inodes")
	}
	if !byFD.Same(id(func() (localfs.FileID, error) { return localfs.PathID(link) })) {
		t.Fatal("a hard link names a different inode")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if byFD.Same(id(func() (localfs.FileID, error) { return localfs.PathID(path) })) {
		t.Fatal("a replaced file has the old inode")
	}
}

// TestLocalCloseWhileBusy: Close while other goroutines use the store ends
// every call with ErrClosed (or an answer it had before), never a storage
// error, and leaves no descriptor open.
func TestLocalCloseWhileBusy(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, err := NewLocalStore(root, WithOwner("busy"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Go(func() {
			key := fmt.Sprintf("k%d", i)
			for {
				g, err := s.Acquire(ctx, key)
				if err == nil {
					_, err = s.Renew(ctx, g)
				}
				if err == nil {
					err = s.Release(ctx, g)
				}
				switch {
				case errors.Is(err, ErrClosed):
					return
				case err != nil && !errors.Is(err, ErrLost):
					errs <- err
					return
				}
			}
		})
	}
	mustAcquire(t, s, "k-extra") // at least one key held at Close
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("call racing Close: %v; want ErrClosed", err)
	}
	if n := openFDs(t, root); n != 0 {
		t.Fatalf("%d descriptors open after Close; want none", n)
	}
}

// TestLocalLoserWaitsForWinnersRecord (R5): between a winner taking the
// flock and writing its record, the record still shows the last, released
// holder. A loser must not name that holder: it looks again until the
// winner's record appears. A flock whose holder never writes is reported
// as held by an unnamed owner, after a bounded wait.
func TestLocalLoserWaitsForWinnersRecord(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	a := newLocal(t, root, WithOwner("old"))
	g := mustAcquire(t, a, "k")
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	path := a.lockPath("k")

	// The "winner": takes the flock by hand and has not written yet.
	winner := flockByHand(t, path)
	defer winner.Close()
	loser := newLocal(t, root, WithOwner("loser"))
	got := make(chan error, 1)
	go func() {
		_, err := loser.Acquire(ctx, "k")
		got <- err
	}()
	// Write only once the loser has found the flock taken twice, so that it
	// has certainly seen the released record.
	for loser.roundTrips.Load() < 2 {
		select {
		case err := <-got:
			t.Fatalf("Acquire returned %v before the winner wrote its record", err)
		default:
			runtime.Gosched()
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := writeRecord(f, 3, toSlot(Record{Key: "k", Owner: "winner", Epoch: 2})); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, <-got, "winner", 2)

	// A holder that never writes: the loser gives up looking and names nobody.
	if err := writeRecord(f, 4, toSlot(Record{Key: "k", Owner: "winner", Epoch: 2, Released: true})); err != nil {
		t.Fatal(err)
	}
	_, err = loser.Acquire(ctx, "k")
	wantHeld(t, err, "", 0)
}
