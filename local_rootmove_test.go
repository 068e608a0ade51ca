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

// swappedRoot is a store whose root directory was swapped for another at
// its path while the store watched it, as a deploy or a restore does.
type swappedRoot struct {
	root string      // the path: the new directory
	a    *LocalStore // the store on root, watching since before the swap
	h0   *Held       // a's Held of "w0" in the new directory
}

// swapRoot makes a store wait for a key held in its root, swaps the root
// for an empty directory in one rename (RENAME_EXCHANGE), and lets the
// waiter take the key in the new directory: the store then watches a
// directory other than the one at its path unless it followed the path.
func swapRoot(t *testing.T) swappedRoot {
	t.Helper()
	dir := t.TempDir()
	root, other := filepath.Join(dir, "root"), filepath.Join(dir, "other")
	a := newLocal(t, root, WithOwner("a"))
	b := newLocal(t, root, WithOwner("b"))
	mustAcquire(t, b, "w0")
	got := make(chan HoldResult, 1)
	go func() {
		h, err := Hold(t.Context(), a, "w0")
		got <- HoldResult{Held: h, Err: err}
	}()
	awaitWatched(t, a, "w0", 1)
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, root, unix.AT_FDCWD, other, unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("swapping the root: %v", err)
	}
	var r HoldResult
	select {
	case r = <-got:
	case <-time.After(20 * time.Second): // a guard against a lost wake, not a wait for time
		t.Fatal("the waiter for w0 did not look in the new root after the swap")
	}
	if r.Err != nil || r.Held.Grant().Epoch != 1 {
		t.Fatalf("Hold of w0 after the swap = %v, %v; want epoch 1 in the new root", r.Held, r.Err)
	}
	return swappedRoot{root: root, a: a, h0: r.Held}
}

// awaitWatched waits until n watchRelease calls on key are in force in s.
func awaitWatched(t *testing.T, s *LocalStore, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // a guard, not a wait for time
	for {
		s.mu.Lock()
		got := s.watched[key]
		s.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d watches of %q; want %d", got, key, n)
		}
		time.Sleep(time.Millisecond) // polls a count
	}
}

// TestLocalRootSwappedHeldEnds (R5, R17; issue 26): after the root was
// swapped under a store that kept watching, a Held made in the new root
// still ends, lost, when its lock file is removed, so that another
// process that then acquires the key does not hold it beside it.
func TestLocalRootSwappedHeldEnds(t *testing.T) {
	sw := swapRoot(t)
	c := startChild(t, "file:"+sw.root, "other")
	h := mustHold(t, sw.a, procKey)
	if err := os.Remove(sw.a.lockPath(procKey)); err != nil {
		t.Fatal(err)
	}
	awaitLost(t, h, "its lock file in the new root was removed")
	c.Send(t, "acquire")
	if r := c.Recv(t); r != "ok 1 false" {
		t.Fatalf("the other process's Acquire: %q; want ok 1 false", r)
	}
	if err := sw.h0.Context().Err(); err != nil {
		t.Fatalf("the Held of w0, untouched in the new root, ended: %v", err)
	}
	if err := h.Release(t.Context()); !errors.Is(err, ErrLost) {
		t.Fatalf("Release of the lost Held = %v; want ErrLost", err)
	}
}

// TestLocalRootSwappedWaiterWakes (R4f; issue 26): after the root was
// swapped under a store that kept watching, a release by another process
// in the new root wakes the store's waiters at once: a watch left on the
// old directory would wake nobody, and a waiting Hold would look only at
// its 30 s poll.
func TestLocalRootSwappedWaiterWakes(t *testing.T) {
	sw := swapRoot(t)
	c := startChild(t, "file:"+sw.root, "other")
	c.Send(t, "acquire")
	if r := c.Recv(t); r != "ok 1 false" {
		t.Fatalf("the other process's Acquire: %q; want ok 1 false", r)
	}
	w := newWaiter()
	stop, err := sw.a.watchRelease(procKey, w.wake)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	got := make(chan HoldResult, 1)
	go func() {
		h, err := Hold(t.Context(), sw.a, procKey)
		got <- HoldResult{Held: h, Err: err}
	}()
	awaitWatched(t, sw.a, procKey, 2) // the test's watch and the Hold's
	c.Send(t, "release")
	if r := c.Recv(t); r != "released" {
		t.Fatalf("the other process's Release: %q", r)
	}
	w.await(t, "a release in the new root")
	select {
	case r := <-got:
		if r.Err != nil || r.Held.Grant().Epoch != 2 || r.Held.Grant().PreviousUnclean {
			t.Fatalf("Hold after the release = %v, %v; want epoch 2, clean", r.Held, r.Err)
		}
	case <-time.After(10 * time.Second): // far below the 30 s poll, generous on a loaded machine
		t.Fatal("the waiting Hold did not take the key within 10 s of the release notice")
	}
}

// TestLocalRootMovedThenRecreated (R4f, R5; issue 26): a root moved away
// with nothing at its path for a while is looked for until a directory
// appears there; then every waiter is woken again (its look while the root
// was missing failed) and a Held made in the new directory is watched.
func TestLocalRootMovedThenRecreated(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	a := newLocal(t, root, WithOwner("a"))
	w := newWaiter()
	stop, err := a.watchRelease("w0", w.wake)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := os.Rename(root, filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	w.await(t, "the root moved away")
	if _, err := a.Acquire(t.Context(), "w0"); !errors.Is(err, ErrStorage) {
		t.Fatalf("Acquire with no root = %v; want ErrStorage", err)
	}
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	// The move woke the waiter twice (a wake and its second, localRewake);
	// a third wake is for the new root.
	for w.count.Load() < 3 {
		w.await(t, "a new root at the path")
	}
	if _, err := a.Acquire(t.Context(), "w0"); err != nil {
		t.Fatalf("Acquire in the new root = %v", err)
	}
	h := mustHold(t, a, "k")
	if err := os.Remove(a.lockPath("k")); err != nil {
		t.Fatal(err)
	}
	awaitLost(t, h, "its lock file in the new root was removed")
}
