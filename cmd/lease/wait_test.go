package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasekit/lease"
)

// waitScene is lease run waiting for key "k", which alice holds, on
// memory stores inside a synctest bubble: time moves only when the test
// sleeps, and nothing else runs then.
type waitScene struct {
	d      lease.Driver
	stderr *syncBuffer
	sigc   chan os.Signal
	code   chan int
}

func newWaitScene(t *testing.T, f runFlags) *waitScene {
	t.Helper()
	w := &waitScene{d: lease.NewMemoryDriver(), stderr: &syncBuffer{}, sigc: make(chan os.Signal, 1), code: make(chan int, 1)}
	alice := w.store(t, "alice")
	if _, err := alice.Acquire(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	waiter := w.store(t, "waiter")
	f.ttl = time.Minute
	go func() {
		h, code := f.hold(waiter, "k", w.sigc, w.stderr)
		if h != nil {
			code = 0
		}
		w.code <- code
	}()
	return w
}

// store opens a store on the scene's records, closed when the test ends.
func (w *waitScene) store(t *testing.T, owner string) lease.Store {
	t.Helper()
	s, err := lease.NewDocumentStore(w.d, lease.WithOwner(owner), lease.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// after lets d pass in the bubble and returns stderr's lines by then.
func (w *waitScene) after(d time.Duration) []string {
	time.Sleep(d)
	synctest.Wait()
	out := strings.TrimSuffix(w.stderr.String(), "\n")
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// takeOver makes carol the holder of k at epoch 2, in one write, as a
// takeover by another process would.
func (w *waitScene) takeOver(t *testing.T) {
	t.Helper()
	rec, v, err := w.d.Get(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	rec.Owner, rec.Epoch, rec.ExpiresAt = "carol", rec.Epoch+1, time.Now().Add(time.Minute)
	if _, err := w.d.Put(t.Context(), rec, lease.Precondition{Version: v}); err != nil {
		t.Fatal(err)
	}
}

// interrupt stops the wait as SIGTERM would and returns lease run's status.
func (w *waitScene) interrupt() int {
	w.sigc <- syscall.SIGTERM
	return <-w.code
}

// TestWaitSaysWhy: issue 20. A lease run that waits for a held key says
// nothing for a second, then one line naming the holder, its epoch and
// when its grant runs out; again only when the holder changes.
func TestWaitSaysWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWaitScene(t, runFlags{})
		start := time.Now()
		if lines := w.after(waitNoticeAfter - time.Millisecond); lines != nil {
			t.Fatalf("stderr before a second of waiting: %q; want nothing", lines)
		}
		lines := w.after(2 * time.Millisecond)
		want := "lease: waiting for k: held by alice (epoch 1) until " +
			start.Add(time.Minute).UTC().Format(time.RFC3339Nano) + " (in 59s)"
		if len(lines) != 1 || lines[0] != want {
			t.Fatalf("stderr after a second of waiting: %q; want %q", lines, want)
		}
		if lines := w.after(5 * waitNoticeEvery); len(lines) != 1 {
			t.Fatalf("stderr while alice still holds k: %q; want the one line, not repeated", lines)
		}
		w.takeOver(t)
		lines = w.after(waitNoticeEvery)
		if len(lines) != 2 || !strings.HasPrefix(lines[1], "lease: waiting for k: held by carol (epoch 2) until ") {
			t.Fatalf("stderr after carol took k over: %q; want a second line naming carol, epoch 2", lines)
		}
		if code := w.interrupt(); code != 128+int(syscall.SIGTERM) {
			t.Errorf("status %d after SIGTERM; want 143", code)
		}
		if !logLines(w.stderr.String(), 2) {
			t.Errorf("stderr %q; want exactly the two lines, each with one lease: prefix", w.stderr.String())
		}
	})
}

// TestWaitQuiet: --quiet says nothing while waiting, and --no-wait never
// waits, so it says only that the key is held.
func TestWaitQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWaitScene(t, runFlags{quiet: true})
		if lines := w.after(10 * waitNoticeEvery); lines != nil {
			t.Errorf("stderr with --quiet: %q; want nothing", lines)
		}
		w.takeOver(t)
		if lines := w.after(10 * waitNoticeEvery); lines != nil {
			t.Errorf("stderr with --quiet after a new holder: %q; want nothing", lines)
		}
		w.interrupt()
	})
	synctest.Test(t, func(t *testing.T) {
		w := newWaitScene(t, runFlags{noWait: true, conflict: exitConflict})
		if code := <-w.code; code != exitConflict {
			t.Errorf("--no-wait status %d; want %d", code, exitConflict)
		}
		if lines := w.after(10 * waitNoticeEvery); len(lines) != 1 || strings.Contains(lines[0], "waiting") {
			t.Errorf("stderr with --no-wait: %q; want one line saying k is held", lines)
		}
	})
}

// TestRunSaysWhomItWaitsFor: the real command, waiting for a key another
// lease run holds, names that holder on stderr before it gives up.
func TestRunSaysWhomItWaitsFor(t *testing.T) {
	forEachStore(t, func(t *testing.T, url string) {
		a := startLease(t, roleEnv("hold"), "run", "--store", url, "k", "--", self(t))
		first := strings.Fields(a.line(t))
		if len(first) != 4 || first[0] != "in" {
			t.Fatalf("first COMMAND said %q; want in OWNER 1 false", first)
		}
		code, stdout, stderr := runLease(t, t.TempDir(), nil, "run", "--store", url, "--timeout", "3s", "k", "--", "echo", "ran")
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		want := "lease: waiting for k: held by " + first[1] + " (epoch 1) until "
		if code != exitConflict || stdout != "" || !logLines(stderr, 2) || !strings.HasPrefix(lines[0], want) {
			t.Errorf("status %d, stdout %q, stderr %q; want %d, nothing run, a line starting %q, then the timeout", code, stdout, stderr, exitConflict, want)
		}
		a.stdin.Close()
		a.wait(t, "out")
	})
}

// TestRunVerbose: --verbose and LEASE_LOG=debug print the lease's events
// on stderr, one log line each; without them lease run prints none.
func TestRunVerbose(t *testing.T) {
	url := "file:" + t.TempDir()
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want bool
	}{
		{"flag", nil, []string{"--verbose"}, true},
		{"env", []string{"LEASE_LOG=debug"}, nil, true},
		{"quiet by default", nil, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append(append([]string{"run", "--store", url}, c.args...), "k", "--", "echo", "ran")
			code, stdout, stderr := runLease(t, t.TempDir(), c.env, args...)
			if code != 0 || stdout != "ran\n" {
				t.Fatalf("status %d, stdout %q, stderr %q; want 0 and ran", code, stdout, stderr)
			}
			got := strings.Contains(stderr, "lease: acquired") && strings.Contains(stderr, "lease: released") &&
				strings.Contains(stderr, "key=k")
			if got != c.want {
				t.Errorf("stderr %q; want the acquired and released events: %v", stderr, c.want)
			}
		})
	}
}
