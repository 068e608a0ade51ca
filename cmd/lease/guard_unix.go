//go:build unix

package main

import (
	"errors"
	"io"
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
	parent     int  // lease run's pid; a different parent means it died
	foreground bool // give COMMAND's group the terminal
	argv       []string
	stderr     io.Writer

	pgid     int                 // COMMAND's process group (its pid)
	status   *syscall.WaitStatus // COMMAND's, once reaped
	stopping bool                // SIGTERM (or a forwarded signal) was sent; SIGKILL follows after grace
	killing  bool                // SIGKILL was sent; it is sent again every sweep until the tree is gone
	noKids   bool                // the guard has no children left
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
	orders, parentGone := make(chan byte, 8), make(chan struct{})
	go readOrders(control, orders, parentGone)

	var graceUp <-chan time.Time
	var sweep <-chan time.Time
	for !g.done() {
		select {
		case k := <-kids:
			if k.pid == g.pgid {
				g.status = &k.status
				if !g.stopping && g.treeAlive(reaper) {
					warn(g.stderr, "%s exited; stopping the processes it left running", g.argv[0])
					graceUp = g.stop(syscall.SIGTERM)
				}
			}
		case <-none:
			g.noKids, none = true, nil
		case o := <-orders:
			sig := syscall.Signal(o)
			if o == orderStop {
				sig = syscall.SIGTERM
			}
			if t := g.stop(sig); t != nil {
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
	return exitStatus(*g.status)
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

// orderStop is the order lease run sends when the lease is lost: SIGTERM,
// then SIGKILL after the grace. Any other order is a signal number to
// forward to COMMAND's group.
const orderStop = 0

// stop sends sig to COMMAND's group and, for SIGTERM, to every process
// of its tree, and starts the grace period if it has not started yet.
func (g *guard) stop(sig syscall.Signal) <-chan time.Time {
	if sig == syscall.SIGTERM {
		g.signalTree(sig)
	} else {
		_ = syscall.Kill(-g.pgid, sig)
	}
	if g.stopping || g.killing {
		return nil
	}
	g.stopping = true
	return time.After(g.grace)
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

// readOrders passes on each byte lease run writes; end of file means
// lease run is gone (its end of the pipe closed when it died).
func readOrders(control *os.File, orders chan<- byte, parentGone chan<- struct{}) {
	buf := make([]byte, 1)
	for {
		if _, err := control.Read(buf); err != nil {
			close(parentGone)
			return
		}
		orders <- buf[0]
	}
}

// exitStatus follows the shell: the exit code, or 128+N for signal N.
func exitStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
