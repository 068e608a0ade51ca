//go:build linux

package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/localfs"
)

// awaitLost waits for h's context to end and checks that its cause is a
// loss, not a close.
func awaitLost(t *testing.T, h *Held, what string) {
	t.Helper()
	select {
	case <-h.Context().Done():
	case <-time.After(20 * time.Second): // a guard against a missed event, not a wait for time
		t.Fatalf("the Held of %q is still live after %s", h.Grant().Key, what)
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, ErrLost) || errors.Is(cause, ErrClosed) {
		t.Fatalf("the Held of %q ended with %v; want ErrLost, not ErrClosed", h.Grant().Key, cause)
	}
}

// TestLocalHeldEndsWhenLockFileGoes (R5, R17): a Held of the local store
// ends at once, lost, when its lock file is deleted, replaced or moved
// away with the root: another store would otherwise lock the file now at
// the path and hold the key too. The store then gives the flock up, and
// its watch once it watches nothing.
func TestLocalHeldEndsWhenLockFileGoes(t *testing.T) {
	cases := []struct {
		name string
		keys []string
		act  func(t *testing.T, a *LocalStore, root string)
		// what the next store's Acquire of keys[0] gets then
		epoch   uint64
		unclean bool
	}{
		{"removed", []string{"k"}, func(t *testing.T, a *LocalStore, root string) {
			if err := os.Remove(a.lockPath("k")); err != nil {
				t.Fatal(err)
			}
		}, 1, false},
		{"replaced", []string{"k"}, func(t *testing.T, a *LocalStore, root string) {
			// A copy put back over the original, as a restore from a
			// backup would: it names a's grant, and its flock is free.
			b, err := os.ReadFile(a.lockPath("k"))
			if err != nil {
				t.Fatal(err)
			}
			tmp := filepath.Join(root, "copy")
			if err := os.WriteFile(tmp, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, a.lockPath("k")); err != nil {
				t.Fatal(err)
			}
		}, 2, true},
		{"root_moved", []string{"k", "k2", "k3"}, func(t *testing.T, a *LocalStore, root string) {
			if err := os.Rename(root, root+"-moved"); err != nil {
				t.Fatal(err)
			}
		}, 1, false},
		{"root_removed", []string{"k", "k2", "k3"}, func(t *testing.T, a *LocalStore, root string) {
			if err := os.RemoveAll(root); err != nil {
				t.Fatal(err)
			}
		}, 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			root := filepath.Join(t.TempDir(), "root")
			baseFDs := inotifyFDs(t)
			a := newLocal(t, root, WithOwner("a"))
			a.watchIdle = time.Millisecond
			var hs []*Held
			for _, key := range c.keys {
				hs = append(hs, mustHold(t, a, key))
			}
			if n := inotifyFDs(t); n != baseFDs+1 {
				t.Fatalf("%d inotify descriptors while %d keys are held; want %d (one per store)", n, len(hs), baseFDs+1)
			}
			c.act(t, a, root)
			for _, h := range hs {
				awaitLost(t, h, c.name)
			}
			b := newLocal(t, root, WithOwner("b"))
			g, err := b.Acquire(ctx, c.keys[0])
			if err != nil || g.Epoch != c.epoch || g.PreviousUnclean != c.unclean {
				t.Fatalf("b.Acquire after the Held ended = %+v, %v; want epoch %d, unclean %v", g, err, c.epoch, c.unclean)
			}
			for _, h := range hs {
				if err := h.Release(ctx); !errors.Is(err, ErrLost) {
					t.Fatalf("Release of the lost Held of %q = %v; want ErrLost", h.Grant().Key, err)
				}
			}
			if n := openFDs(t, root); n != 1 { // b's
				t.Fatalf("%d descriptors open under the root; want 1: a gave up its flocks", n)
			}
			awaitInotifyFDs(t, baseFDs, "once a holds nothing")
		})
	}
}

// TestLocalHeldWatchNoFalseLoss: the store's own writes (acquire, release,
// new lock files), other stores' cycles on other keys, refused tries and a
// new store's probe of the root end no unrelated Held. The watch is one
// inotify instance per store, only while it holds a key through Hold (and
// for its watchIdle after), and Close ends it.
func TestLocalHeldWatchNoFalseLoss(t *testing.T) {
	ctx := t.Context()
	root := t.TempDir()
	baseFDs := inotifyFDs(t)
	a := newLocal(t, root, WithOwner("a"))
	b := newLocal(t, root, WithOwner("b"))
	a.watchIdle, b.watchIdle = time.Millisecond, time.Millisecond
	mustAcquire(t, a, "bare") // a bare grant: nothing to watch
	if n := inotifyFDs(t); n != baseFDs {
		t.Fatalf("%d inotify descriptors with no Held; want %d", n, baseFDs)
	}
	kept := []*Held{mustHold(t, a, "k1"), mustHold(t, a, "k2")}
	for i := range 20 {
		h := mustHold(t, a, "mine") // its acquire and release write its lock file
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		g := mustAcquire(t, a, fmt.Sprintf("a-%d", i%3))
		if err := a.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		g = mustAcquire(t, b, fmt.Sprintf("b-%d", i)) // a new lock file each time
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		hb := mustHold(t, b, "b-shared")
		if err := hb.Release(ctx); err != nil {
			t.Fatal(err)
		}
		_, err := b.Acquire(ctx, "k1")
		wantHeld(t, err, "a", 1)
	}
	newLocal(t, root, WithOwner("c")) // probes the root with a file of its own
	// Events are read in order and losses settled in order: once the
	// sentinel's removal has ended its Held, every earlier event has been
	// checked.
	sentinel := mustHold(t, a, "sentinel")
	if err := os.Remove(a.lockPath("sentinel")); err != nil {
		t.Fatal(err)
	}
	awaitLost(t, sentinel, "its lock file was removed")
	if err := sentinel.Release(ctx); !errors.Is(err, ErrLost) {
		t.Fatalf("Release of the lost sentinel = %v; want ErrLost", err)
	}
	for _, h := range kept {
		if err := h.Context().Err(); err != nil {
			t.Fatalf("the Held of %q ended: %v", h.Grant().Key, context.Cause(h.Context()))
		}
		if _, err := h.Confirm(ctx); err != nil {
			t.Fatalf("Confirm of %q = %v", h.Grant().Key, err)
		}
	}
	awaitInotifyFDs(t, baseFDs+1, "once b holds nothing (one for a, none for b)")
	for _, h := range kept {
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	awaitInotifyFDs(t, baseFDs, "once a's Helds are released")
	h := mustHold(t, a, "k1")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, ErrClosed) {
		t.Fatalf("after Close the Held's cause is %v; want ErrClosed", cause)
	}
	if n := inotifyFDs(t); n != baseFDs {
		t.Fatalf("%d inotify descriptors after Close; want %d", n, baseFDs)
	}
}

// TestLocalWatchKeptBetweenHolds: a store holding one key after another
// keeps its one watch (one inotify instance) from each Release to the next
// Hold, rather than closing it at each Release (which costs the Release a
// wait in the kernel) and starting another. Once it has watched nothing
// for its watchIdle the watch ends, and the next Hold is watched by a new
// one: its Held ends when its lock file goes.
func TestLocalWatchKeptBetweenHolds(t *testing.T) {
	ctx := t.Context()
	baseFDs := inotifyFDs(t)
	s := newLocal(t, t.TempDir(), WithOwner("a"))
	watch := func() *localfs.Watch {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.watch
	}
	var first *localfs.Watch
	for i := range 5 {
		h := mustHold(t, s, "job")
		if i == 0 {
			first = watch()
		} else if w := watch(); w != first {
			t.Fatalf("Hold %d is watched by another watch than the first Hold; want the first kept", i)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n := inotifyFDs(t); n != baseFDs+1 {
			t.Fatalf("%d inotify descriptors after Release %d; want %d, the watch kept", n, i, baseFDs+1)
		}
	}

	idle := newLocal(t, t.TempDir(), WithOwner("b"))
	idle.watchIdle = time.Millisecond
	if err := mustHold(t, idle, "job").Release(ctx); err != nil {
		t.Fatal(err)
	}
	awaitInotifyFDs(t, baseFDs+1, "once b's watch was idle for its watchIdle (a's is kept)")
	h := mustHold(t, idle, "job")
	if err := os.Remove(idle.lockPath("job")); err != nil {
		t.Fatal(err)
	}
	awaitLost(t, h, "its lock file was removed, watched by a new watch")
}
