package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
)

// fakeHeld is a lease the test loses by hand.
type fakeHeld struct {
	expires  time.Time     // zero: a fixed expiry far ahead
	margin   time.Duration // Deadline is expires minus margin
	ctx      context.Context
	lose     context.CancelCauseFunc
	mu       sync.Mutex
	released int
}

func newFakeHeld() *fakeHeld {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &fakeHeld{ctx: ctx, lose: cancel}
}

func (f *fakeHeld) Grant() lease.Grant {
	expires := f.expires
	if expires.IsZero() {
		expires = time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	}
	return lease.Grant{Key: "k", Owner: "me", Epoch: 7, ExpiresAt: expires}
}
func (f *fakeHeld) Deadline() time.Time      { return f.Grant().ExpiresAt.Add(-f.margin) }
func (f *fakeHeld) Context() context.Context { return f.ctx }
func (f *fakeHeld) Release(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released++
	return nil
}

// superviseChild runs role under a supervisor in this process, and returns
// the first line COMMAND printed and a function that waits for the status.
func superviseChild(t *testing.T, h holding, role string, grace time.Duration, margin ...time.Duration) (first string, status func() (int, string)) {
	t.Helper()
	t.Setenv("LEASE_TEST_ROLE", role)
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	sv := supervisor{stdout: w, stderr: &stderr, sigc: make(chan os.Signal), grace: grace, guard: []string{self(t), guardCmd}}
	if len(margin) > 0 {
		h.(*fakeHeld).margin = margin[0]
	}
	done := make(chan int, 1)
	go func() {
		done <- sv.run(h, []string{self(t)})
		w.Close()
	}()
	lines := bufio.NewReader(r)
	first, err = lines.ReadString('\n')
	if err != nil {
		t.Fatalf("COMMAND's first line: %v", err)
	}
	return strings.TrimSpace(first), func() (int, string) {
		t.Helper()
		defer r.Close()
		select {
		case code := <-done:
			_, _ = io.Copy(io.Discard, lines)
			return code, stderr.String()
		case <-time.After(patience):
			t.Fatalf("supervisor still running after %v", patience)
			return 0, ""
		}
	}
}

// TestLossStopsCommand: R8. When the lease is lost, COMMAND gets SIGTERM,
// and SIGKILL after the grace period if it ignores that; lease run exits
// with the lost status.
func TestLossStopsCommand(t *testing.T) {
	for _, tc := range []struct {
		role     string
		wantKill bool
	}{
		{"trap", false},    // exits on SIGTERM
		{"stubborn", true}, // ignores SIGTERM
	} {
		t.Run(tc.role, func(t *testing.T) {
			h := newFakeHeld()
			first, status := superviseChild(t, h, tc.role, 100*time.Millisecond)
			if first != "ready" {
				t.Fatalf("COMMAND said %q; want ready", first)
			}
			h.lose(fmt.Errorf("stolen: %w", lease.ErrLost))
			code, stderr := status()
			if code != exitLost {
				t.Errorf("status %d; want %d", code, exitLost)
			}
			if !strings.Contains(stderr, "stolen") {
				t.Errorf("stderr %q; want it to say why the lease was lost", stderr)
			}
			if killed := strings.Contains(stderr, "SIGKILL"); killed != tc.wantKill {
				t.Errorf("stderr %q; SIGKILL sent = %v, want %v", stderr, killed, tc.wantKill)
			}
			if h.released != 1 {
				t.Errorf("Release called %d times; want once", h.released)
			}
		})
	}
}

// TestSupervisePassesGrant: the environment describes the grant exactly.
func TestSupervisePassesGrant(t *testing.T) {
	h := newFakeHeld()
	first, status := superviseChild(t, h, "env", time.Second)
	if first != "LEASE_KEY=k" {
		t.Errorf("first line %q; want LEASE_KEY=k", first)
	}
	if code, _ := status(); code != 0 {
		t.Errorf("status %d", code)
	}
	got := strings.Join(leaseEnv(h.Grant()), " ")
	want := "LEASE_KEY=k LEASE_EPOCH=7 LEASE_OWNER=me LEASE_EXPIRES=2030-01-02T03:04:05.000000006Z LEASE_PREVIOUS_UNCLEAN=false"
	if got != want {
		t.Errorf("leaseEnv = %q; want %q", got, want)
	}
	if env := leaseEnv(lease.Grant{Key: "k", Epoch: 1}); env[3] != "LEASE_EXPIRES=" {
		t.Errorf("never-expiring grant: %q; want LEASE_EXPIRES empty", env[3])
	}
}

// TestGuardKeepsDeadline: issue 18, finding 6. lease run tells the guard
// the lease's deadline (expiry minus the safety margin); when no renewal
// moves it on (here the grant is never renewed, as when lease run is
// wedged), the guard stops COMMAND by itself --grace before it, SIGKILL
// at the deadline, and exits with the lost status.
func TestGuardKeepsDeadline(t *testing.T) {
	if !hasMonoClock {
		t.Skip("no monotonic clock shared between processes on this system")
	}
	// A --grace long enough for the guard, on a loaded machine, to SIGKILL
	// COMMAND and exit before lease run's bound on it (the deadline plus
	// --grace) kills the guard.
	const grace, margin = 400 * time.Millisecond, time.Second
	h := newFakeHeld()
	h.expires = time.Now().Add(4 * time.Second)
	first, status := superviseChild(t, h, "stubborn", grace, margin)
	if first != "ready" {
		t.Fatalf("COMMAND said %q; want ready", first)
	}
	code, stderr := status()
	stopped := time.Now()
	if code != exitLost {
		t.Errorf("status %d; want %d", code, exitLost)
	}
	if !strings.Contains(stderr, "has not renewed the lease in time") || !strings.Contains(stderr, "SIGKILL") {
		t.Errorf("stderr %q; want the guard to say it stopped COMMAND for want of a renewal, then SIGKILLed it", stderr)
	}
	if h.Context().Err() != nil {
		t.Error("the lease was lost; want the guard alone to have acted")
	}
	if deadline := h.expires.Add(-margin); stopped.Before(deadline.Add(-grace)) {
		t.Errorf("COMMAND stopped at %v; want no sooner than --grace before the deadline %v", stopped, deadline)
	}
}
