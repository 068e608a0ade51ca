//go:build linux

package lease

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rootPathSwap makes a store's root path name another, empty directory
// while raising no event on the directory it named: the watch, which is
// on that directory's inode, learns of it only by looking at the path.
type rootPathSwap struct {
	name string
	// setup makes the root path under dir, naming an empty directory, and
	// returns it with the swap.
	setup func(t *testing.T, dir string) (root string, swap func())
}

var rootPathSwaps = []rootPathSwap{
	{"symlink", func(t *testing.T, dir string) (string, func()) {
		// root -> v1, then atomically root -> v2: the usual deploy.
		root := filepath.Join(dir, "root")
		mustMkdir(t, filepath.Join(dir, "v1"), filepath.Join(dir, "v2"))
		if err := os.Symlink("v1", root); err != nil {
			t.Fatal(err)
		}
		return root, func() {
			tmp := filepath.Join(dir, "root.next")
			if err := os.Symlink("v2", tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, root); err != nil {
				t.Fatal(err)
			}
		}
	}},
	{"parent", func(t *testing.T, dir string) (string, func()) {
		// p/root, then p swapped for another p holding another root.
		p, next := filepath.Join(dir, "p"), filepath.Join(dir, "next")
		mustMkdir(t, p, filepath.Join(p, "root"), next, filepath.Join(next, "root"))
		return filepath.Join(p, "root"), func() {
			if err := unix.Renameat2(unix.AT_FDCWD, p, unix.AT_FDCWD, next, unix.RENAME_EXCHANGE); err != nil {
				t.Fatalf("swapping the root's parent: %v", err)
			}
		}
	}},
}

func mustMkdir(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLocalRootPathSwappedOldHeldEnds (R5, R17; issue 26): when the root's
// path comes to name another directory without an event on the watched
// one (a symlink pointed elsewhere, a parent moved), a Held made before
// ends, lost, within about one look at the path (localfs.localRootCheck,
// a second): its lock file is no longer at the path, so another process
// may lock the key's file there.
func TestLocalRootPathSwappedOldHeldEnds(t *testing.T) {
	for _, sw := range rootPathSwaps {
		t.Run(sw.name, func(t *testing.T) {
			root, swap := sw.setup(t, t.TempDir())
			a := newLocal(t, root, WithOwner("a"))
			h := mustHold(t, a, procKey)
			swap()
			awaitLost(t, h, "the root's path named another directory")
			c := startChild(t, "file:"+root, "c")
			c.Send(t, "acquire")
			if got := c.Recv(t); got != "ok 1 false" {
				t.Fatalf("the other process's Acquire: %q; want ok 1 false", got)
			}
		})
	}
}

// TestLocalRootPathSwappedNewHeldEnds (R5, R17; issue 26): after the
// root's path came to name another directory without an event on the
// watched one, a waiter woken in the old directory takes the key at the
// path, in the new one; that Held ends, lost, when its lock file there is
// removed, so that another process that takes the key does not hold it
// beside it.
func TestLocalRootPathSwappedNewHeldEnds(t *testing.T) {
	for _, sw := range rootPathSwaps {
		t.Run(sw.name, func(t *testing.T) {
			root, swap := sw.setup(t, t.TempDir())
			a := newLocal(t, root, WithOwner("a"))
			b := newLocal(t, root, WithOwner("b"))
			mustAcquire(t, b, procKey)
			got := make(chan HoldResult, 1)
			go func() {
				h, err := Hold(t.Context(), a, procKey)
				got <- HoldResult{Held: h, Err: err}
			}()
			awaitWatched(t, a, procKey, 1)
			swap()
			// b dies in the old directory: its descriptor's close wakes
			// a, which takes the key at the path, in the new directory.
			b.Close()
			var r HoldResult
			select {
			case r = <-got:
			case <-time.After(20 * time.Second): // a guard against a lost wake, not a wait for time
				t.Fatal("the waiter did not take the key after the swap")
			}
			if r.Err != nil || r.Held.Grant().Epoch != 1 || r.Held.Grant().PreviousUnclean {
				t.Fatalf("Hold after the swap = %v, %v; want epoch 1, clean, in the new directory", r.Held, r.Err)
			}
			if err := os.Remove(a.lockPath(procKey)); err != nil {
				t.Fatal(err)
			}
			c := startChild(t, "file:"+root, "c")
			c.Send(t, "acquire")
			if got := c.Recv(t); got != "ok 1 false" {
				t.Fatalf("the other process's Acquire: %q; want ok 1 false", got)
			}
			awaitLost(t, r.Held, "its lock file in the new directory was removed and another process took the key")
		})
	}
}

// TestLocalRootPathSwappedWaiterWakes (R4f; issue 26): when the root's
// path comes to name another directory without an event on the watched
// one, a waiter registered before is woken within about one look at the
// path, to try the key in the new directory.
func TestLocalRootPathSwappedWaiterWakes(t *testing.T) {
	for _, sw := range rootPathSwaps {
		t.Run(sw.name, func(t *testing.T) {
			root, swap := sw.setup(t, t.TempDir())
			a := newLocal(t, root, WithOwner("a"))
			w := newWaiter()
			stop, err := a.watchRelease("early", w.wake)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			swap()
			w.await(t, "the root's path named another directory")
		})
	}
}

// TestLocalRootPathSwappedReleaseWakes (R4f; issue 26): after the root's
// path came to name another directory without an event on the watched
// one, a waiter that registers then (as a waiting Hold does) is woken by
// a release in the new directory, far sooner than a Hold's 30 s poll. The
// test's loop tries Acquire only when woken, as the keeper does between
// polls, so that a try racing the release cannot pass for a wake.
func TestLocalRootPathSwappedReleaseWakes(t *testing.T) {
	for _, sw := range rootPathSwaps {
		t.Run(sw.name, func(t *testing.T) {
			root, swap := sw.setup(t, t.TempDir())
			a := newLocal(t, root, WithOwner("a"))
			early, err := a.watchRelease("early", func() {}) // the watch runs from before the swap
			if err != nil {
				t.Fatal(err)
			}
			defer early()
			swap()
			c := startChild(t, "file:"+root, "c")
			c.Send(t, "acquire")
			if r := c.Recv(t); r != "ok 1 false" {
				t.Fatalf("the other process's Acquire: %q; want ok 1 false", r)
			}
			w := newWaiter()
			stop, err := a.watchRelease(procKey, w.wake)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			if _, err := a.Acquire(t.Context(), procKey); !errors.Is(err, ErrHeld) {
				t.Fatalf("Acquire while the other process holds the key = %v; want ErrHeld", err)
			}
			c.Send(t, "release")
			if r := c.Recv(t); r != "released" {
				t.Fatalf("the other process's Release: %q", r)
			}
			guard := time.After(10 * time.Second) // far below the 30 s poll, generous on a loaded machine
			for {
				select {
				case <-w.woken:
				case <-guard:
					t.Fatal("no wake let the waiter take the key within 10 s of the release")
				}
				g, err := a.Acquire(t.Context(), procKey)
				if err == nil {
					if g.Epoch != 2 || g.PreviousUnclean {
						t.Fatalf("Acquire after the release = %+v; want epoch 2, clean", g)
					}
					return
				}
				if !errors.Is(err, ErrHeld) {
					t.Fatal(err)
				}
			}
		})
	}
}
