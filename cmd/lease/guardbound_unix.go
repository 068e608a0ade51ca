//go:build unix

package main

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// guardBound bounds how long lease run relies on its guard once the guard
// should have ended COMMAND: a guard that has not exited by then is
// stopped (SIGSTOP, a debugger), starved or wedged, and lease run kills it
// (see killGuard), so that COMMAND dies with it before the lease can pass
// on. The bound is --grace after the last deadline lease run sent it (the
// guard SIGKILLs COMMAND's tree at that deadline; --grace is shorter than
// the safety margin, so the bound comes before the lease's expiry), and
// after a stop order or a forwarded signal, --grace after the guard's own
// SIGKILL was due (at least guardSlack), whichever comes first.
type guardBound struct {
	grace    time.Duration
	deadline time.Time // the last deadline sent, plus grace; zero: none
	order    time.Time // the first order to stop COMMAND, plus grace and slack; zero: none
	timer    *time.Timer
	fired    bool // the bound was reached: lease run killed the guard
}

// guardSlack is the least time lease run gives a guard to reap COMMAND's
// tree and exit after the guard's own SIGKILL, after a stop order, so
// that it does not kill a guard that is about to exit by itself.
const guardSlack = time.Second

// deadlineSent moves the bound to d, on the monotonic clock (monoNow),
// plus grace; d 0 (no deadline) sets none.
func (b *guardBound) deadlineSent(d int64) {
	if d == 0 {
		return
	}
	b.deadline = time.Now().Add(time.Duration(d-monoNow()) + b.grace)
	b.arm()
}

// ordered starts the bound after the first order to stop COMMAND.
func (b *guardBound) ordered() {
	if b.order.IsZero() {
		b.order = time.Now().Add(b.grace + max(b.grace, guardSlack))
		b.arm()
	}
}

// arm sets the timer to the earlier bound.
func (b *guardBound) arm() {
	at := b.deadline
	if at.IsZero() || (!b.order.IsZero() && b.order.Before(at)) {
		at = b.order
	}
	if b.timer == nil {
		b.timer = time.NewTimer(time.Until(at))
	} else {
		b.timer.Reset(time.Until(at))
	}
}

// C is when the bound is reached; nil (never ready) while none is set.
func (b *guardBound) C() <-chan time.Time {
	if b.timer == nil {
		return nil
	}
	return b.timer.C
}

func (b *guardBound) stop() {
	if b.timer != nil {
		b.timer.Stop()
	}
}

// guardKilledLine is how lease run says it kills its guard.
const guardKilledLine = "killing the guard"

// killGuard SIGKILLs the guard and waits for it to die, at most
// orphanPatience, and reports whether it died. COMMAND has SIGKILL as its
// parent-death signal: it dies with the guard.
func killGuard(cmd *exec.Cmd, waited <-chan struct{}) bool {
	_ = cmd.Process.Kill() // safe even if the guard has just exited: os.Process knows
	t := time.NewTimer(orphanPatience)
	defer t.Stop()
	select {
	case <-waited:
		return true
	case <-t.C:
		return false
	}
}

// exited reports whether the guard was already waited for.
func exited(waited <-chan struct{}) bool {
	select {
	case <-waited:
		return true
	default:
		return false
	}
}

// send writes an order to the guard without waiting, and reports whether
// it was written. An order (at most 9 bytes) goes into a pipe whole or
// not at all, and the pipe is full only when the guard has not read
// thousands of them: lease run must not stop with a stopped guard, whom
// guardBound then deals with.
func send(orders *os.File, order []byte) bool {
	rc, err := orders.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	if rerr := rc.Write(func(fd uintptr) bool {
		n, err = syscall.Write(int(fd), order)
		return true // never wait for room
	}); rerr != nil {
		return false
	}
	return err == nil && n == len(order)
}
