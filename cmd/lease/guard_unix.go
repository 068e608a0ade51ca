//go:build unix

package main

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// sweepEvery is how often the guard looks again for processes of
// COMMAND's tree while it is killing them, and, where it cannot reap them
// itself (no subreaper), whether COMMAND's group is empty yet.
const sweepEvery = 10 * time.Millisecond

// reaped is a child the guard waited for.
type reaped struct {
	pid    int
	status syscall.WaitStatus
}

// guard runs COMMAND for lease run; see the package doc. Its fields are
// set from the command line lease run starts it with.
type guard struct {
	grace      time.Duration
	deadline   int64 // the lease's deadline on the monotonic clock (monoNow); 0: none
	parent     int   // lease run's pid; a different parent means it died
	foreground bool  // give COMMAND's group the terminal
	argv       []string
	stderr     io.Writer

	pgid     int                 // COMMAND's process group (its pid)
	status   *syscall.WaitStatus // COMMAND's, once reaped
	stopping bool                // SIGTERM (or a forwarded signal) was sent; SIGKILL follows after grace
	killing  bool                // SIGKILL was sent; it is sent again every sweep until the tree is gone
	noKids   bool                // the guard has no children left
	expired  bool                // the deadline came without a newer one: COMMAND was stopped, exit 76
}

// run starts COMMAND and returns once COMMAND and every process it left
// behind are gone, with COMMAND's status (128+N if signal N ended it).
func (g *guard) run(control *os.File) int {
	reaper := setSubreaper() // before COMMAND starts, so every orphan comes here
	sigc := make(chan os.Signal, 8)
	// Caught, not ignored: COMMAND then starts with the default actions.
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, parentDeathSignal)

	if code := g.start(); code != 0 {
		return code
	}
	kids, none := make(chan reaped, 16), make(chan struct{})
	go reapAll(kids, none)
	orders, parentGone := make(chan order, 8), make(chan struct{})
	go readOrders(control, orders, parentGone)

	var graceUp <-chan time.Time
	var sweep <-chan time.Time
	deadman := g.armDeadman()
	for !g.done() {
		select {
		case k := <-kids:
			if k.pid == g.pgid {
				g.status = &k.status
				if !g.stopping && g.treeAlive(reaper) {
					warn(g.stderr, "%s exited; stopping the processes it left running", g.argv[0])
					graceUp = g.stop(syscall.SIGTERM, g.grace)
				}
			}
		case <-none:
			g.noKids, none = true, nil
		case o := <-orders:
			if o.code == orderDeadline {
				g.deadline = o.deadline
				deadman.Reset(g.untilStop())
			} else if t := g.stop(o.signal(), g.grace); t != nil {
				graceUp = t
			}
		case <-deadman.C:
			if len(orders) > 0 || unread(controlFD) > 0 {
				// lease run sent newer deadlines in time; read them first.
				deadman.Reset(time.Millisecond)
			} else if t := g.deadlineReached(); t != nil {
				graceUp = t
			}
		case sig := <-sigc:
			if sig == parentDeathSignal && os.Getppid() != g.parent {
				g.kill()
			} // other signals reach lease run, which forwards them here
		case <-parentGone:
			parentGone = nil
			g.kill()
		case <-graceUp:
			graceUp = nil
			if g.treeAlive(reaper) {
				warn(g.stderr, "processes of %s still running %v after the stop signal; sending SIGKILL", g.argv[0], g.grace)
			}
			g.kill()
		case <-sweep:
		}
		if g.killing {
			g.signalTree(syscall.SIGKILL)
		}
		if (g.killing || g.noKids) && sweep == nil {
			t := time.NewTicker(sweepEvery)
			defer t.Stop()
			sweep = t.C
		}
	}
	if g.expired {
		return exitLost
	}
	return exitStatus(*g.status)
}

// armDeadman starts the guard's own clock on the lease (a dead man's
// switch): it fires --grace before the lease's deadline. lease run moves
// the deadline on with every renewal; when it does not (it is stopped,
// starved or wedged), the guard stops COMMAND's tree by itself, so that
// the tree is gone by the deadline, before the lease can expire. Without a
// deadline the timer never fires.
func (g *guard) armDeadman() *time.Timer { return time.NewTimer(g.untilStop()) }

// untilStop is how long until COMMAND must be sent the stop signal so that
// SIGKILL, --grace later, lands by the deadline.
func (g *guard) untilStop() time.Duration {
	if g.deadline == 0 {
		return time.Duration(math.MaxInt64)
	}
	return max(time.Duration(g.deadline-monoNow())-g.grace, 0)
}

// deadlineReached stops COMMAND's tree as on loss when the switch fires,
// with SIGKILL due at the deadline, and returns when SIGKILL is due.
func (g *guard) deadlineReached() <-chan time.Time {
	if g.stopping || g.killing || g.deadline == 0 {
		return nil
	}
	left := max(time.Duration(g.deadline-monoNow()), 0)
	warn(g.stderr, "lease run has not renewed the lease in time (stopped, starved or wedged?): stopping %s %v before the lease's deadline, so that it cannot outlive the lease",
		g.argv[0], left.Round(time.Millisecond))
	g.expired = true
	return g.stop(syscall.SIGTERM, min(g.grace, left))
}

// start starts COMMAND in a process group of its own; on failure it
// returns lease run's status for it (126 or 127), having said why.
func (g *guard) start() int {
	cmd := exec.Command(g.argv[0], g.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = commandAttr(g.foreground)
	if err := cmd.Start(); err != nil {
		code := exitNoExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return fail(g.stderr, code, "cannot run %s: %v", g.argv[0], err)
	}
	// The guard reaps every child itself (COMMAND and the orphans it
	// inherits as subreaper), so cmd.Wait is never called.
	g.pgid = cmd.Process.Pid
	return 0
}

// controlFD is the guard's end of the control pipe.
const controlFD = 3

// orderStop is the order lease run sends when the lease is lost: SIGTERM,
// then SIGKILL after the grace. orderDeadline is followed by 8 bytes, big
// endian: the lease's new deadline on the monotonic clock, sent on every
// renewal. Any other order is a signal number to forward to COMMAND's
// group (no signal has orderDeadline's number).
const (
	orderStop     = 0
	orderDeadline = 0xff
)

// order is one order read from lease run.
type order struct {
	code     byte
	deadline int64 // for orderDeadline
}

// signal is the signal an order other than orderDeadline sends.
func (o order) signal() syscall.Signal {
	if o.code == orderStop {
		return syscall.SIGTERM
	}
	return syscall.Signal(o.code)
}

// deadlineOrder encodes the order that moves the guard's deadline to d.
// Its 9 bytes are written at once, and a pipe never splits a write that
// small, so the guard reads it whole.
func deadlineOrder(d int64) []byte {
	b := make([]byte, 9)
	b[0] = orderDeadline
	binary.BigEndian.PutUint64(b[1:], uint64(d))
	return b
}

// stop sends sig to COMMAND's group and, for SIGTERM, to every process
// of its tree, and starts the grace period (SIGKILL after grace) if it has
// not started yet.
func (g *guard) stop(sig syscall.Signal, grace time.Duration) <-chan time.Time {
	if sig == syscall.SIGTERM {
		g.signalTree(sig)
	} else {
		_ = syscall.Kill(-g.pgid, sig)
	}
	if g.stopping || g.killing {
		return nil
	}
	g.stopping = true
	return time.After(grace)
}

// kill starts killing COMMAND's whole tree; run repeats it every sweep.
func (g *guard) kill() {
	g.killing = true
	g.signalTree(syscall.SIGKILL)
}

// signalTree sends sig to COMMAND's process group and to every living
// descendant of the guard, inside the group or not.
func (g *guard) signalTree(sig syscall.Signal) {
	_ = syscall.Kill(-g.pgid, sig)
	for _, pid := range descendants(os.Getpid()) {
		_ = syscall.Kill(pid, sig)
	}
}

// treeAlive reports whether anything of COMMAND's tree still runs. A
// subreaper sees the whole tree among its descendants (zombies aside: they
// run nothing and it reaps them); elsewhere only the group can be seen.
func (g *guard) treeAlive(reaper bool) bool {
	if reaper {
		return len(descendants(os.Getpid())) > 0
	}
	return groupAlive(g.pgid)
}

// done reports whether COMMAND was reaped and its group is empty. As a
// subreaper the guard is every tree process's ancestor until it is reaped,
// so having no children means the tree is gone; elsewhere the group is
// all it can see.
func (g *guard) done() bool {
	return g.status != nil && g.noKids && !groupAlive(g.pgid)
}

// groupAlive reports whether process group pgid has any member, zombies
// included.
func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) != syscall.ESRCH
}

// reapAll waits for every child of this process and reports each; it
// closes none when no child is left.
func reapAll(kids chan<- reaped, none chan<- struct{}) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil: // ECHILD: nothing left to wait for
			close(none)
			return
		}
		kids <- reaped{pid: pid, status: ws}
	}
}

// readOrders passes on each order lease run writes; end of file means
// lease run is gone (its end of the pipe closed when it died).
func readOrders(control *os.File, orders chan<- order, parentGone chan<- struct{}) {
	buf := make([]byte, 9)
	for {
		if _, err := io.ReadFull(control, buf[:1]); err != nil {
			close(parentGone)
			return
		}
		o := order{code: buf[0]}
		if o.code == orderDeadline {
			if _, err := io.ReadFull(control, buf[1:]); err != nil {
				close(parentGone)
				return
			}
			o.deadline = int64(binary.BigEndian.Uint64(buf[1:]))
		}
		orders <- o
	}
}

// exitStatus follows the shell: the exit code, or 128+N for signal N.
func exitStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
