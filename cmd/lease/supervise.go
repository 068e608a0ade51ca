package main

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/leasekit/lease"
)

// releaseTimeout bounds the release after COMMAND exits.
const releaseTimeout = 10 * time.Second

// holding is what the supervisor needs of a *lease.Held.
type holding interface {
	Grant() lease.Grant
	Context() context.Context
	Release(ctx context.Context) error
}

// supervisor runs COMMAND while a lease is held and stops it if the lease
// is lost.
type supervisor struct {
	stdin          io.Reader // an *os.File, so COMMAND reads it directly
	stdout, stderr io.Writer
	sigc           <-chan os.Signal // forwarded to COMMAND
	grace          time.Duration    // SIGTERM to SIGKILL, after a loss
}

// run starts argv with the grant in its environment, waits for it, and
// releases the lease. It returns lease run's exit status.
func (sv supervisor) run(h holding, argv []string) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = sv.stdin, sv.stdout, sv.stderr
	cmd.Env = append(os.Environ(), leaseEnv(h.Grant())...)
	cmd.SysProcAttr = sysProcAttr()
	// Only stdin, stdout and stderr are inherited: Go opens every other
	// descriptor (the store's database or lock file) close-on-exec.
	if err := cmd.Start(); err != nil {
		sv.release(h)
		code := exitNoExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		return fail(sv.stderr, code, "cannot run %s: %v", argv[0], err)
	}
	waited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the status is in cmd.ProcessState
		close(waited)
	}()

	lost := h.Context().Done()
	var kill <-chan time.Time
	wasLost := false
	for done := false; !done; {
		select {
		case <-waited:
			done = true
		case sig := <-sv.sigc:
			signalChild(cmd.Process, sig)
		case <-lost:
			lost, wasLost = nil, true
			warn(sv.stderr, "%v; stopping %s", context.Cause(h.Context()), argv[0])
			signalChild(cmd.Process, syscall.SIGTERM)
			t := time.NewTimer(sv.grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			warn(sv.stderr, "%s still running %v after SIGTERM; sending SIGKILL", argv[0], sv.grace)
			signalChild(cmd.Process, syscall.SIGKILL)
		}
	}
	if wasLost {
		sv.release(h) // records the release if nobody took the key
		return exitLost
	}
	if err := sv.release(h); err != nil {
		warn(sv.stderr, "releasing %s: %v", h.Grant().Key, err)
	}
	return exitStatus(cmd.ProcessState)
}

func (sv supervisor) release(h holding) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	return h.Release(ctx)
}

// leaseEnv describes the grant to COMMAND, so that it can fence its writes
// with the epoch and run crash recovery when the previous holder died.
func leaseEnv(g lease.Grant) []string {
	expires := ""
	if !g.ExpiresAt.IsZero() {
		expires = g.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	return []string{
		"LEASE_KEY=" + g.Key,
		"LEASE_EPOCH=" + strconv.FormatUint(g.Epoch, 10),
		"LEASE_OWNER=" + g.Owner,
		"LEASE_EXPIRES=" + expires,
		"LEASE_PREVIOUS_UNCLEAN=" + strconv.FormatBool(g.PreviousUnclean),
	}
}

// exitStatus follows the shell: the exit code, or 128+N for signal N.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
