//go:build unix

package lease

// The local store on the paths a real deployment walks on its first day
// (issue 9): many stores opened at once on a fresh root, a lock file
// emptied or replaced by something that is not a regular file, a
// monitoring loop beside the workers.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/localfs"
)

// TestLocalConcurrentRootCreation: stores created at the same instant on a
// root that does not exist yet all succeed (EEXIST from a racing mkdir is
// not an error) and share one root.
func TestLocalConcurrentRootCreation(t *testing.T) {
	for round := range 50 {
		root := filepath.Join(t.TempDir(), fmt.Sprintf("leases-%d", round))
		start := make(chan struct{})
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				<-start
				s, err := NewLocalStore(root, WithOwner(fmt.Sprintf("s%d", i)))
				if err == nil {
					err = s.Close()
				}
				errs[i] = err
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: store %d: NewLocalStore = %v; want every opener to succeed", round, i, err)
			}
		}
	}
}

// TestLocalEmptiedLockFile (R2, R10): a lock file emptied after the key
// was written is damage, not a key never written: Acquire and Holder fail
// with ErrCorrupt and the file stays empty; the epoch does not restart at 1.
func TestLocalEmptiedLockFile(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	a := newLocal(t, root, WithOwner("a"))
	for range 3 {
		g := mustAcquire(t, a, "k")
		if err := a.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	path := a.lockPath("k")
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	b := newLocal(t, root, WithOwner("b"))
	g, err := b.Acquire(ctx, "k")
	var se *StorageError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &se) {
		t.Fatalf("Acquire of an emptied lock file = %+v, %v; want a *StorageError matching ErrCorrupt", g, err)
	}
	if _, err := b.Holder(ctx, "k"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Holder of an emptied lock file = %v; want ErrCorrupt", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("the emptied lock file was touched: %v, %v", fi.Size(), err)
	}
	wantFlockFree(t, path)
}

// TestLocalLockFileNeverEmpty (R2): a lock file exists only with its
// header in place, also while its first Acquire is still under way, so that
// an empty file can only be damage. Every file in the root, seen at any
// moment while stores race for fresh keys, is a whole lock file.
func TestLocalLockFileNeverEmpty(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	bad := make(chan string, 1)
	wg.Go(func() { // a watcher that reads every lock file over and over
		for {
			select {
			case <-stop:
				return
			default:
			}
			ents, _ := os.ReadDir(root)
			for _, e := range ents {
				if filepath.Ext(e.Name()) != ".lock" {
					continue
				}
				if fi, err := os.Stat(filepath.Join(root, e.Name())); err == nil && fi.Size() != localfs.FileLen {
					select {
					case bad <- fmt.Sprintf("%s is %d bytes", e.Name(), fi.Size()):
					default:
					}
				}
			}
		}
	})
	stores := make([]*LocalStore, 4)
	for i := range stores {
		stores[i] = newLocal(t, root, WithOwner(fmt.Sprintf("s%d", i)))
	}
	for k := range 100 {
		key := fmt.Sprintf("fresh/%d", k)
		var race sync.WaitGroup
		for _, s := range stores {
			race.Go(func() { s.Acquire(ctx, key) })
		}
		race.Wait()
	}
	close(stop)
	wg.Wait()
	select {
	case msg := <-bad:
		t.Fatalf("a lock file was seen without its header: %s", msg)
	default:
	}
}

// TestLocalHolderBesideAcquire (R4f, R14): a monitoring loop calling
// Holder never makes an Acquire of a dead holder's key fail with ErrHeld.
func TestLocalHolderBesideAcquire(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	monitor := newLocal(t, root, WithOwner("monitor"))
	b := newLocal(t, root, WithOwner("b"))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				monitor.Holder(ctx, "k")
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	// Each round's holder crashes (Close), so the record stays unreleased
	// and the monitor keeps looking at a dead holder's key.
	mustAcquire(t, b, "k")
	b.Close()
	for i := range 300 {
		next := newLocal(t, root, WithOwner(fmt.Sprintf("next-%d", i)))
		g, err := next.Acquire(ctx, "k")
		if err != nil {
			t.Fatalf("round %d: Acquire of a dead holder's key beside Holder = %v; want a grant", i, err)
		}
		if !g.PreviousUnclean {
			t.Fatalf("round %d: %+v; want PreviousUnclean", i, g)
		}
		next.Close()
	}
}

// TestLocalNotARegularFile (R10): a lock path that is a FIFO (or any other
// file that is not a regular file) is refused with ErrCorrupt by Acquire,
// Holder and Holders, at once and without blocking, and is left as it was.
func TestLocalNotARegularFile(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := newLocal(t, root, WithOwner("a"))
	path := s.lockPath("k")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // frees a call that blocked on the FIFO, if any did
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	calls := map[string]func() error{
		"Acquire": func() error { _, err := s.Acquire(ctx, "k"); return err },
		"Holder":  func() error { _, err := s.Holder(ctx, "k"); return err },
		"Holders": func() error {
			for _, err := range s.Holders(ctx, "") {
				return err
			}
			return nil
		},
	}
	for name, call := range calls {
		got := make(chan error, 1)
		go func() { got <- call() }()
		select {
		case err := <-got:
			var se *StorageError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &se) {
				t.Errorf("%s on a FIFO = %v; want a *StorageError matching ErrCorrupt", name, err)
			}
		case <-time.After(10 * time.Second): // a guard against a call that blocks
			t.Fatalf("%s on a FIFO blocked", name)
		}
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO was changed: %v, %v", fi, err)
	}
}

// TestLocalQueriesCreateNothing (R14): Holder and Holders of keys never
// written create no lock file, and a root removed under a store is not
// made again by a query.
func TestLocalQueriesCreateNothing(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "leases")
	s := newLocal(t, root, WithOwner("a"))
	if _, err := s.Holder(ctx, "never/written"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Holder of a key never written = %v; want ErrNotFound", err)
	}
	for rec, err := range s.Holders(ctx, "") {
		t.Fatalf("Holders of an empty root yielded %+v, %v", rec, err)
	}
	if ents, err := os.ReadDir(root); err != nil || len(ents) != 0 {
		t.Fatalf("root after queries: %d entries, %v; want none", len(ents), err)
	}
	if err := os.Remove(root); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Holder(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Holder with the root gone = %v; want ErrNotFound", err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Holder made the root again: %v", err)
	}
}
