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
	// If the guard is killed, COMMAND's orphans come here to be killed.
	reaper := sv.subreaper && setSubreaper()
	deadline := sv.deadline(h)
	cmd, orders, err := sv.startGuard(h.Grant(), deadline, argv)
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
	bound := &guardBound{grace: sv.grace}
	defer bound.stop()
	bound.deadlineSent(deadline)
	var why reason
	for done := false; !done; {
		select {
		case <-waited:
			done = true
		case <-renewals.ticks():
			if g := h.Grant(); !g.ExpiresAt.Equal(renewals.seen) {
				if d := sv.deadline(h); send(orders, deadlineOrder(d)) { // unsent: told again next tick
					renewals.seen = g.ExpiresAt
					bound.deadlineSent(d)
				}
			}
		case sig := <-sv.sigc:
			s, _ := sig.(syscall.Signal)
			if !why.lost && why.sig == 0 {
				why.sig = s
			}
			send(orders, []byte{byte(s)})
			bound.ordered()
		case <-lost:
			lost = nil
			if why.sig == 0 {
				why.lost = true
			}
			warn(sv.stderr, "%v; stopping %s", context.Cause(h.Context()), argv[0])
			send(orders, []byte{orderStop})
			bound.ordered()
		case <-bound.C():
			if exited(waited) { // the guard ended COMMAND meanwhile (lease run was late: stopped?)
				done = true
				break
			}
			bound.fired = true
			warn(sv.stderr, "the guard of %s has not stopped it in time (is the guard stopped or wedged?): %s, and the command with it",
				argv[0], guardKilledLine)
			if !killGuard(cmd, waited) {
				return fail(sv.stderr, why.code(), "the guard of %s did not die %v after SIGKILL; the lease is left unreleased", argv[0], orphanPatience)
			}
			done = true
		}
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() {
		return sv.guardKilled(h, ws.Signal(), bound.fired, reaper, why, argv)
	}
	sv.releaseAfter(h, why)
	if why.lost || why.sig != 0 {
		return why.code()
	}
	return cmd.ProcessState.ExitCode()
}

// releaseAfter releases the lease once COMMAND's tree is gone. After a
// loss the release only records it if nobody took the key: its failure
// says nothing new.
func (sv supervisor) releaseAfter(h holding, why reason) {
	if err := sv.release(h); err != nil && !why.lost {
		warn(sv.stderr, "releasing %s: %v", h.Grant().Key, err)
	}
}

// code is lease run's exit status when its guard did not end COMMAND by
// itself: 128+N after signal N, else the lost status.
func (r reason) code() int {
	if r.sig != 0 {
		return 128 + int(r.sig)
	}
	return exitLost
}

// guardKilled ends lease run once its guard was killed by signal sig:
// COMMAND died with it (its parent-death signal) and its orphans came
// here (reaper) to be killed. If lease run killed the guard itself (byUs)
// and saw the whole tree gone, it releases the lease as after a loss;
// otherwise it leaves the lease as a crash would, so that the next holder
// recovers.
func (sv supervisor) guardKilled(h holding, sig syscall.Signal, byUs, reaper bool, why reason, argv []string) int {
	gone := reaper && killOrphans()
	if !byUs {
		return fail(sv.stderr, 128+int(sig), "the guard of %s was killed by signal %d (%v); its processes were killed; the lease is left unreleased",
			argv[0], int(sig), sig)
	}
	if !gone {
		return fail(sv.stderr, why.code(), "processes of %s may still run; the lease is left unreleased", argv[0])
	}
	sv.releaseAfter(h, why)
	return why.code()
}

// startGuard starts the guard for argv and returns it and the write end of
// its control pipe, on which each byte is an order: orderStop or a signal
// to forward. The guard gets the read end as descriptor 3 and copies of
// the store's lock files as 4 and up; COMMAND gets none of them.
func (sv supervisor) startGuard(g lease.Grant, deadline int64, argv []string) (*exec.Cmd, *os.File, error) {
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
		"--deadline", strconv.FormatInt(deadline, 10),
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
// subreaper after its guard died, until none is left, and reports whether
// it saw none left (within orphanPatience).
func killOrphans() bool {
	deadline := time.Now().Add(orphanPatience)
	for time.Now().Before(deadline) {
		for _, pid := range descendants(os.Getpid()) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.ECHILD {
				return true
			}
			if err != nil || pid == 0 {
				break
			}
		}
		time.Sleep(sweepEvery)
	}
	return false
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
