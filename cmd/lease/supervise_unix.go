//go:build unix

package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/leasekit/lease"
)

// canSupervise: this system can run COMMAND under a guard.
const canSupervise = true

// releaseTimeout bounds the release after COMMAND exits.
const releaseTimeout = 10 * time.Second

// orphanPatience bounds how long lease run, after its guard was killed,
// keeps killing the orphans of COMMAND's tree that come to it.
const orphanPatience = 10 * time.Second

// reason is why lease run stopped COMMAND: nothing, the loss of the
// lease, or a signal to lease run.
type reason struct {
	lost bool
	sig  syscall.Signal
}

// run starts the guard, which starts argv with the grant in its
// environment; it waits for the guard, whose status is COMMAND's, and
// releases the lease. It returns lease run's exit status.
func (sv supervisor) run(h holding, argv []string) int {
	if sv.subreaper { // if the guard is killed, COMMAND's orphans come here to be killed
		setSubreaper()
	}
	cmd, orders, err := sv.startGuard(h, argv)
	if err != nil {
		sv.release(h)
		return fail(sv.stderr, exitNoExec, "cannot start the guard for %s: %v", argv[0], err)
	}
	defer orders.Close()
	waited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the status is in cmd.ProcessState
		close(waited)
	}()

	lost := h.Context().Done()
	renewals := sv.watchRenewals(h.Grant())
	defer renewals.stop()
	var why reason
	for done := false; !done; {
		select {
		case <-waited:
			done = true
		case <-renewals.ticks():
			if g := h.Grant(); !g.ExpiresAt.Equal(renewals.seen) {
				renewals.seen = g.ExpiresAt
				_, _ = orders.Write(deadlineOrder(sv.deadline(h)))
			}
		case sig := <-sv.sigc:
			s, _ := sig.(syscall.Signal)
			if !why.lost && why.sig == 0 {
				why.sig = s
			}
			_, _ = orders.Write([]byte{byte(s)})
		case <-lost:
			lost = nil
			if why.sig == 0 {
				why.lost = true
			}
			warn(sv.stderr, "%v; stopping %s", context.Cause(h.Context()), argv[0])
			_, _ = orders.Write([]byte{orderStop})
		}
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() {
		// The guard itself was killed: COMMAND died with it (its parent-
		// death signal) and its orphans came here. Leave the lease as a
		// crash would, so that the next holder recovers.
		if sv.subreaper {
			killOrphans()
		}
		return fail(sv.stderr, 128+int(ws.Signal()), "the guard of %s was killed by signal %d (%v); its processes were killed; the lease is left unreleased",
			argv[0], int(ws.Signal()), ws.Signal())
	}
	switch {
	case why.lost:
		sv.release(h) // records the release if nobody took the key
		return exitLost
	case why.sig != 0:
		if err := sv.release(h); err != nil {
			warn(sv.stderr, "releasing %s: %v", h.Grant().Key, err)
		}
		return 128 + int(why.sig)
	}
	if err := sv.release(h); err != nil {
		warn(sv.stderr, "releasing %s: %v", h.Grant().Key, err)
	}
	return cmd.ProcessState.ExitCode()
}

// startGuard starts the guard for argv and returns it and the write end of
// its control pipe, on which each byte is an order: orderStop or a signal
// to forward. The guard gets the read end as descriptor 3 and copies of
// the store's lock files as 4 and up; COMMAND gets none of them.
func (sv supervisor) startGuard(h holding, argv []string) (*exec.Cmd, *os.File, error) {
	g := h.Grant()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	var locks []*os.File
	if sv.lockDir != "" {
		if locks, err = lockFiles(sv.lockDir); err != nil {
			w.Close()
			return nil, nil, fmt.Errorf("finding the lock file to pass on: %w", err)
		}
		defer closeAll(locks)
	}
	args := append(sv.guard[1:len(sv.guard):len(sv.guard)],
		"--grace", sv.grace.String(),
		"--deadline", strconv.FormatInt(sv.deadline(h), 10),
		"--parent", strconv.Itoa(os.Getpid()),
		"--locks", strconv.Itoa(len(locks)))
	if inForeground(0) {
		args = append(args, "--foreground")
	}
	cmd := exec.Command(sv.guard[0], append(append(args, "--"), argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = sv.stdin, sv.stdout, sv.stderr
	cmd.Env = append(os.Environ(), leaseEnv(g)...)
	cmd.ExtraFiles = append([]*os.File{r}, locks...)
	cmd.SysProcAttr = guardAttr()
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, nil, err
	}
	return cmd, w, nil
}

// renewalWatch is lease run looking for renewals of its grant, to tell
// the guard each new deadline.
type renewalWatch struct {
	ticker *time.Ticker // nil: the grant never expires; nothing to watch
	seen   time.Time    // the ExpiresAt the guard was last told of
}

// watchRenewals starts looking for renewals of g every renewCheck.
func (sv supervisor) watchRenewals(g lease.Grant) *renewalWatch {
	w := &renewalWatch{seen: g.ExpiresAt}
	if !g.ExpiresAt.IsZero() && hasMonoClock {
		w.ticker = time.NewTicker(cmp.Or(sv.renewCheck, time.Second))
	}
	return w
}

// ticks is when to look again; nil (never ready) if there is nothing to watch.
func (w *renewalWatch) ticks() <-chan time.Time {
	if w.ticker == nil {
		return nil
	}
	return w.ticker.C
}

func (w *renewalWatch) stop() {
	if w.ticker != nil {
		w.ticker.Stop()
	}
}

func (sv supervisor) release(h holding) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	return h.Release(ctx)
}

// killOrphans kills and reaps every process that came to lease run as
// subreaper after its guard died, until none is left.
func killOrphans() {
	deadline := time.Now().Add(orphanPatience)
	for time.Now().Before(deadline) {
		for _, pid := range descendants(os.Getpid()) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.ECHILD {
				return
			}
			if err != nil || pid == 0 {
				break
			}
		}
		time.Sleep(sweepEvery)
	}
}

// cmdGuard is the guard's main: lease _guard --grace D --deadline NS
// --parent PID --locks N [--foreground] -- COMMAND [ARGS...], with the
// deadline on the monotonic clock (0: none) and the control pipe
// on descriptor 3 and N lock files after it.
func cmdGuard(args []string, stderr io.Writer) int {
	fs := newFlags(guardCmd)
	g := guard{stderr: stderr}
	var locks int
	fs.DurationVar(&g.grace, "grace", 0, "")
	fs.IntVar(&g.parent, "parent", 0, "")
	fs.Int64Var(&g.deadline, "deadline", 0, "")
	fs.IntVar(&locks, "locks", 0, "")
	fs.BoolVar(&g.foreground, "foreground", false, "")
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 || g.parent <= 0 || locks < 0 {
		return fail(stderr, exitUsage, "%s is started by lease run only", guardCmd)
	}
	g.argv = fs.Args()
	// Neither the control pipe nor the lock files may reach COMMAND; the
	// lock files stay open (their flocks held) until the guard exits.
	for fd := controlFD; fd <= controlFD+locks; fd++ {
		syscall.CloseOnExec(fd)
	}
	control := os.NewFile(controlFD, "control")
	if control == nil {
		return fail(stderr, exitUsage, "%s is started by lease run only", guardCmd)
	}
	return g.run(control)
}
