//go:build linux

package lease

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// awaitInotifyFDs waits until this process has want inotify descriptors:
// a store's watch that has nothing left to watch ends after the store's
// watchIdle, which the tests that wait for it set short.
func awaitInotifyFDs(t *testing.T, want int, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // a guard, not a wait for time
	for {
		n := inotifyFDs(t)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d inotify descriptors %s; want %d", n, what, want)
		}
		time.Sleep(time.Millisecond) // polls a count
	}
}

// inotifyFDs counts this process's inotify descriptors.
func inotifyFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting descriptors needs /proc: %v", err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(target, "inotify") {
			n++
		}
	}
	return n
}

// wakeCounter counts the wakes of one watchRelease and signals each.
type wakeCounter struct {
	count atomic.Int64
	woken chan struct{}
}

func newWaiter() *wakeCounter { return &wakeCounter{woken: make(chan struct{}, 1)} }

func (w *wakeCounter) wake() {
	w.count.Add(1)
	select {
	case w.woken <- struct{}{}:
	default:
	}
}

// await waits for the next wake, failing the test if none comes.
func (w *wakeCounter) await(t *testing.T, what string) {
	t.Helper()
	select {
	case <-w.woken:
	case <-time.After(30 * time.Second): // a guard against a lost wake, not a wait for time
		t.Fatalf("no wake for %s", what)
	}
}

// TestLocalWatchRelease (R4f): a waiter learns of a holder's death from the
// kernel, without polling: the test's waiting loop tries Acquire only when
// woken. Its own refused tries, and anyone's reads, wake nobody, so it does
// not spin while the holder holds on. The watch's goroutine and inotify
// descriptor end once nothing has been watched for the store's watchIdle.
func TestLocalWatchRelease(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	holder := startChild(t, "file:"+root, "holder")
	holder.Send(t, "acquire")
	if r := holder.Recv(t); r != "ok 1 false" {
		t.Fatalf("holder: %q", r)
	}
	baseFDs := inotifyFDs(t)
	s := newLocal(t, root, WithOwner("waiter"))
	s.watchIdle = time.Millisecond
	w := newWaiter()
	stop, err := s.watchRelease(procKey, w.wake)
	if err != nil {
		t.Fatalf("watchRelease = %v", err)
	}
	defer stop()
	sentinel := newWaiter()
	stopSentinel, err := s.watchRelease("sentinel", sentinel.wake)
	if err != nil {
		t.Fatal(err)
	}
	if n := inotifyFDs(t); n != baseFDs+1 {
		t.Fatalf("%d inotify descriptors with two watches; want %d (one per store)", n, baseFDs+1)
	}

	// While the holder holds on: the waiter's own tries and a monitor's
	// reads raise no wake.
	monitor := newLocal(t, root, WithOwner("monitor"))
	for range 50 {
		_, err := s.Acquire(ctx, procKey)
		wantHeld(t, err, "holder", 1)
		if rec, err := monitor.Holder(ctx, procKey); err != nil || rec.Owner != "holder" {
			t.Fatalf("Holder = %+v, %v", rec, err)
		}
		for _, err := range monitor.Holders(ctx, "") {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// Events come in order: once a later one has woken the sentinel's
	// waiter, every event the loop above raised has been seen.
	other := newLocal(t, root, WithOwner("other"))
	g := mustAcquire(t, other, "sentinel")
	if err := other.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	sentinel.await(t, "the sentinel's release")
	if n := w.count.Load(); n != 0 {
		t.Fatalf("the waiter was woken %d times while the holder held on; want 0 (it would spin)", n)
	}

	// The holder dies: the waiter is woken and takes the key.
	killed := time.Now()
	if err := holder.Kill(); err != nil {
		t.Fatal(err)
	}
	for {
		w.await(t, "the holder's death")
		g, err := s.Acquire(ctx, procKey)
		if errors.Is(err, ErrHeld) {
			continue // woken a moment before the kernel dropped the flock
		}
		if err != nil || g.Epoch != 2 || !g.PreviousUnclean {
			t.Fatalf("Acquire after the holder's death = %+v, %v; want epoch 2 unclean", g, err)
		}
		break
	}
	t.Logf("took the key %v after SIGKILL, woken %d times", time.Since(killed), w.count.Load())
	if n := w.count.Load(); n > 4 {
		t.Fatalf("woken %d times for one death; want a few", n)
	}
	holder.Wait(t)

	stop()
	stopSentinel()
	awaitInotifyFDs(t, baseFDs, "after the last watch stopped")
	if n := openFDs(t, root); n != 1 { // the key s now holds
		t.Fatalf("%d descriptors open under the root; want 1 (the held key)", n)
	}
}

// TestLocalWatchReleaseInProcess: a release by another store, and a crash
// (Close), wake a waiter; Close of the waiting store ends its watch and
// leaves no inotify descriptor; a closed store refuses to watch.
func TestLocalWatchReleaseInProcess(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	baseFDs := inotifyFDs(t)
	a := newLocal(t, root, WithOwner("a"))
	s, err := NewLocalStore(root, WithOwner("s"))
	if err != nil {
		t.Fatal(err)
	}
	g := mustAcquire(t, a, "k")
	w := newWaiter()
	if _, err := s.watchRelease("k", w.wake); err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(ctx, "k")
	wantHeld(t, err, "a", 1)
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	w.await(t, "a release")
	g2 := mustAcquire(t, s, "k")
	if g2.Epoch != 2 || g2.PreviousUnclean {
		t.Fatalf("after a release: %+v; want epoch 2 clean", g2)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := inotifyFDs(t); n != baseFDs {
		t.Fatalf("%d inotify descriptors after Close; want %d", n, baseFDs)
	}
	if _, err := s.watchRelease("k", w.wake); !errors.Is(err, ErrClosed) {
		t.Fatalf("watchRelease on a closed store = %v; want ErrClosed", err)
	}
}

// TestLocalWatchRefusedWakesNobody: waiters refused with the flock in hand
// (a corrupt record, R10) do not wake each other: two stores waiting on
// one damaged key would otherwise retry without end.
func TestLocalWatchRefusedWakesNobody(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	a := newLocal(t, root, WithOwner("a"))
	b := newLocal(t, root, WithOwner("b"))
	g := mustAcquire(t, a, "k")
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(a.lockPath("k"), 0); err != nil {
		t.Fatal(err)
	}
	wa, wb, sentinel := newWaiter(), newWaiter(), newWaiter()
	for _, w := range []struct {
		s    *LocalStore
		key  string
		wake func()
	}{{a, "k", wa.wake}, {b, "k", wb.wake}, {b, "sentinel", sentinel.wake}} {
		stop, err := w.s.watchRelease(w.key, w.wake)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
	}
	for range 20 {
		for _, s := range []*LocalStore{a, b} {
			if _, err := s.Acquire(ctx, "k"); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Acquire of a damaged key = %v; want ErrCorrupt", err)
			}
		}
	}
	c := newLocal(t, root, WithOwner("c"))
	g = mustAcquire(t, c, "sentinel")
	if err := c.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	sentinel.await(t, "the sentinel's release")
	if na, nb := wa.count.Load(), wb.count.Load(); na != 0 || nb != 0 {
		t.Fatalf("refused tries woke the waiters %d and %d times; want 0", na, nb)
	}
}
