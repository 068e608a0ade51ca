//go:build linux

package localfs

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// symlinkedRoot makes root -> v1 under a new directory, and returns root
// and the swap that points it at v2 in one rename, as a deploy does: no
// event reaches v1.
func symlinkedRoot(t *testing.T) (root string, swap func()) {
	t.Helper()
	dir := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		if err := os.Mkdir(filepath.Join(dir, v), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	root = filepath.Join(dir, "root")
	if err := os.Symlink("v1", root); err != nil {
		t.Fatal(err)
	}
	return root, func() {
		tmp := filepath.Join(dir, "next")
		if err := os.Symlink("v2", tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, root); err != nil {
			t.Fatal(err)
		}
	}
}

// withRootCheck sets localRootCheck for one test: no watch may run.
func withRootCheck(t *testing.T, d time.Duration) {
	old := localRootCheck
	localRootCheck = d
	t.Cleanup(func() { localRootCheck = old })
}

// counted returns a check that signals each call, and the channel.
func counted() (func(), chan struct{}) {
	c := make(chan struct{}, 16)
	return func() { c <- struct{}{} }, c
}

// await waits for a signal on c, failing the test if none comes.
func await(t *testing.T, c chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(20 * time.Second): // a guard against a lost event, not a wait for time
		t.Fatalf("no check after %s", what)
	}
}

// TestWatchCheckRootFollowsPath (issue 26): CheckRoot, which the store
// calls when a Held or a waiter registers, follows a root path pointed at
// another directory at once (the periodic look is an hour away here):
// every Held is checked, and events in the new directory are seen.
func TestWatchCheckRootFollowsPath(t *testing.T) {
	withRootCheck(t, time.Hour)
	root, swap := symlinkedRoot(t)
	w, err := StartWatch(root, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	check, checked := counted()
	w.AddHeld("x", check)
	swap()
	w.CheckRoot()
	await(t, checked, "CheckRoot found the path pointed elsewhere")
	if err := os.WriteFile(filepath.Join(root, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	await(t, checked, "x was created in the directory the path names now")
}

// TestWatchLooksAtRootPath (issue 26): with nothing registering, the
// watch's periodic look finds a root path pointed at another directory,
// checks every Held and wakes every waiter.
func TestWatchLooksAtRootPath(t *testing.T) {
	withRootCheck(t, 10*time.Millisecond)
	root, swap := symlinkedRoot(t)
	w, err := StartWatch(root, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	check, checked := counted()
	wake, woken := counted()
	w.AddHeld("x", check)
	w.Add("y", wake)
	swap()
	await(t, checked, "the path was pointed elsewhere")
	await(t, woken, "the path was pointed elsewhere")
}

// TestWatchStopLeavesNothingRunning: once Stop returns, the watch calls
// no wake or check, even with second wakes pending and the root gone (its
// looks for a new one pending), and its goroutine ends: the reader keeps
// the watch's time itself, with no timers whose callbacks could outlive
// Stop (a goroutine-leak check finds none).
func TestWatchStopLeavesNothingRunning(t *testing.T) {
	withRootCheck(t, time.Millisecond)
	var stopped, late atomic.Bool
	for range 20 {
		dir := t.TempDir()
		root := filepath.Join(dir, "root")
		if err := os.Mkdir(root, 0o700); err != nil {
			t.Fatal(err)
		}
		w, err := StartWatch(root, 0)
		if err != nil {
			t.Fatal(err)
		}
		stopped.Store(false)
		wake, woken := counted()
		w.Add("x", func() {
			late.CompareAndSwap(false, stopped.Load())
			wake()
		})
		if err := os.WriteFile(filepath.Join(root, "x"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		await(t, woken, "x was written") // its second wake is now due in localRewake
		if err := os.Rename(root, filepath.Join(dir, "moved")); err != nil {
			t.Fatal(err)
		}
		w.Stop()
		stopped.Store(true)
		awaitNoWatchGoroutine(t)
	}
	if late.Load() {
		t.Fatal("a wake ran after Stop returned")
	}
}

// awaitNoWatchGoroutine waits until no goroutine runs the watch's code: the
// reader closes its done channel a moment before it returns.
func awaitNoWatchGoroutine(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(20 * time.Second) // a guard, not a wait for time
	for {
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "localfs.(*Watch)") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a goroutine of the watch runs after Stop:\n%s", stacks)
		}
		runtime.Gosched() // polls a state
	}
}

// TestWatchStopsItselfWhenIdle: a watch runs while anything is registered
// (each kind alone), however long after its idle time began; once nothing
// has been for its idle time, it stops itself: its goroutine ends, Add and
// AddHeld return nil (the store then starts another watch), and Stop
// still returns.
func TestWatchStopsItselfWhenIdle(t *testing.T) {
	const idle = time.Millisecond
	root := t.TempDir()
	w, err := StartWatch(root, idle)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	wake, woken := counted()
	check, checked := counted()
	name := filepath.Join(root, "x")
	for _, register := range []func() func(){
		func() func() { e := w.Add("x", wake); return func() { w.Remove("x", e) } },
		func() func() { e := w.AddHeld("x", check); return func() { w.RemoveHeld("x", e) } },
	} {
		remove := register()
		// Events keep coming until well past the idle time: the watch
		// still sees each one while something is registered.
		for start := time.Now(); time.Since(start) < 20*idle; {
			if err := os.WriteFile(name, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			select {
			case <-woken:
			case <-checked:
			case <-time.After(20 * time.Second): // a guard against a lost event, not a wait for time
				t.Fatal("the watch saw no event while something was registered")
			}
			os.Remove(name)
			drain(woken, checked)
		}
		remove()
	}
	awaitNoWatchGoroutine(t)
	if w.Add("y", wake) != nil || w.AddHeld("y", check) != nil {
		t.Fatal("a watch that stopped itself took a registration")
	}
}

// drain empties the channels of counted checks.
func drain(cs ...chan struct{}) {
	for _, c := range cs {
		for len(c) > 0 {
			<-c
		}
	}
}
