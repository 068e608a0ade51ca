//go:build linux

package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekit/lease/sqlite"
)

// Issue 26, defect 1: lease run must not rely on a guard that may be
// stopped (SIGSTOP, a debugger). These tests stop the guard alone and
// check that lease run kills it, and COMMAND with it, before the lease
// can pass on, and that it never waits for the guard without a bound.

// stopGuard SIGSTOPs the guard of a lease run whose tree is tree (the
// guard is its first process: lease run's only child) and returns it.
// If the test ends with the guard still alive, it is killed, so that no
// stopped process outlives the test.
func stopGuard(t *testing.T, tree []procID) procID {
	t.Helper()
	guard := tree[0]
	t.Cleanup(func() {
		if guard.alive() {
			_ = syscall.Kill(guard.pid, syscall.SIGKILL)
		}
	})
	if err := syscall.Kill(guard.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, guard.pid)
	return guard
}

// holdWriteLock takes the SQLite file's write lock, as another program's
// long transaction would, and returns a function that gives it back.
// While it is held every write of every lease process fails.
func holdWriteLock(t *testing.T, dbPath string) (unlock func()) {
	t.Helper()
	db, err := sql.Open("sqlite", fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)", dbPath, patience.Milliseconds()))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(t.Context())
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil { // waits for a commit in progress
		conn.Close()
		db.Close()
		t.Fatal(err)
	}
	return func() {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		conn.Close()
		db.Close()
	}
}

// recordExpiry reads key's expiry from the SQLite file; reads need no
// write lock (WAL), so it works while holdWriteLock's lock is held.
func recordExpiry(t *testing.T, dbPath, key string) time.Time {
	t.Helper()
	d, err := sqlite.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rec, _, err := d.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return rec.ExpiresAt
}

// pidList is tree as LEASE_TEST_PIDS wants it.
func pidList(tree []procID) string {
	var pids []string
	for _, p := range tree {
		pids = append(pids, p.String())
	}
	return strings.Join(pids, " ")
}

// TestStoppedGuardIsKilled: issue 26, defect 1 (R5, R8). Only the guard
// is stopped, then the store is unavailable for more than the TTL (another
// connection holds SQLite's write lock): lease run's renewals fail, its
// Held ends at expiry minus the margin and it orders the guard to stop
// COMMAND, which the guard cannot do. lease run must then kill the guard,
// so that COMMAND dies with it, before the lease expires. A second lease
// run (a real process) takes the key once the store is back: when its
// COMMAND starts, nothing of the first one's tree may be alive, and no line
// of the first COMMAND may follow the second one's first line in the
// record they share.
func TestStoppedGuardIsKilled(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "leases.db")
	url := "sqlite:" + dbPath
	requireStore(t, url)
	logPath := filepath.Join(dir, "appends")
	env := append(roleEnv("append"), "LEASE_TEST_LOG="+logPath)
	// TTL 6s: the Held ends 1s (the margin) before expiry; lease run kills
	// the guard --grace (100ms) later, 900ms before expiry, room enough
	// for a loaded machine.
	flags := []string{"--store", url, "--ttl", "6s", "--grace", "100ms"}
	argv := []string{"k", "--", self(t)}

	a := startLease(t, env, append(append([]string{"run"}, flags...), argv...)...)
	if l := a.line(t); l != "in 1 false" {
		t.Fatalf("first COMMAND said %q; want in 1 false", l)
	}
	tree := treeOf(t, a.cmd.Process.Pid)
	waitAppends(t, logPath, "1", 10)
	stopGuard(t, tree)

	unlock := holdWriteLock(t, dbPath)
	a.stderr.waitFor(t, "stopping") // the Held ended: renewals failed until the margin
	expires := recordExpiry(t, dbPath, "k")
	unlock()

	b := startLease(t, append(env, "LEASE_TEST_PIDS="+pidList(tree)),
		append(append([]string{"run", "--timeout", patience.String()}, flags...), argv...)...)
	if l := b.line(t); !strings.HasPrefix(l, "in 2 ") {
		t.Fatalf("second COMMAND said %q; want in 2 (the next epoch)", l)
	}
	if left := survivors(tree); len(left) > 0 {
		t.Fatalf("processes %v of the first lease run's tree (its guard stopped) live on while the next holder's COMMAND runs; first lease's stderr: %s",
			left, a.stderr.String())
	}
	waitAppends(t, logPath, "2", 5)
	b.stdin.Close()
	if code := b.wait(t, "out"); code != 0 {
		t.Errorf("second lease: status %d; stderr %s", code, b.stderr.String())
	}

	if code := a.wait(t); code != exitLost {
		t.Errorf("first lease: status %d; want %d (stderr %s)", code, exitLost, a.stderr.String())
	}
	if stderr := a.stderr.String(); !strings.Contains(stderr, guardKilledLine) || !logLines(stderr, 2) {
		t.Errorf("first lease's stderr %q; want two log lines: the loss, then that it killed its guard", stderr)
	}
	checkNoOverlap(t, readAppendLog(t, logPath), expires)
	noZombies(t)
}

// TestStoppedGuardSignal: lease run never waits for its guard without a
// bound. SIGTERM reaches lease run while its guard is stopped: lease run
// forwards it, and when the guard has not ended COMMAND (which ignores
// SIGTERM) a while after its --grace, lease run kills the guard and
// COMMAND with it, then exits 128+15.
func TestStoppedGuardSignal(t *testing.T) {
	p := startLease(t, roleEnv("stubborn"), "run", "--store", "memory:", "--grace", "100ms", "k", "--", self(t))
	if l := p.line(t); l != "ready" {
		t.Fatalf("COMMAND said %q; want ready", l)
	}
	tree := treeOf(t, p.cmd.Process.Pid)
	stopGuard(t, tree)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("status %d; want 128+15 (stderr %s)", code, p.stderr.String())
	}
	if left := survivors(tree); len(left) > 0 {
		t.Errorf("processes %v survive lease run", left)
	}
	if stderr := p.stderr.String(); !strings.Contains(stderr, guardKilledLine) || !logLines(stderr, 1) {
		t.Errorf("stderr %q; want one log line saying lease run killed its guard", stderr)
	}
	noZombies(t)
}

func init() { extraRoles["parent"] = roleParent }

// roleParent prints "ready PPID", its parent's pid (the guard's), then
// ignores SIGTERM and waits for SIGKILL.
func roleParent() int {
	signal.Ignore(syscall.SIGTERM)
	fmt.Println("ready", os.Getppid())
	time.Sleep(time.Hour)
	return 0
}

// TestStoppedGuardDeadline: lease run bounds its wait for the guard by
// the last deadline it sent it, even while its Held stays live (here a
// fake grant that is never renewed nor lost): when the guard, stopped,
// has not ended COMMAND --grace after that deadline, the supervisor kills
// it, COMMAND dies with it, and lease run exits with the lost status.
func TestStoppedGuardDeadline(t *testing.T) {
	const grace, margin = 100 * time.Millisecond, 300 * time.Millisecond
	h := newFakeHeld()
	h.expires = time.Now().Add(4 * time.Second) // room to stop the guard before its own switch fires
	first, status := superviseChild(t, h, "parent", grace, margin)
	f := strings.Fields(first)
	if len(f) != 2 || f[0] != "ready" {
		t.Fatalf("COMMAND said %q; want ready PPID", first)
	}
	var guardPid int
	fmt.Sscan(f[1], &guardPid)
	start, ok := procStart(guardPid)
	if !ok {
		t.Fatalf("guard %d not found", guardPid)
	}
	stopGuard(t, []procID{{guardPid, start}})
	code, stderr := status()
	if code != exitLost {
		t.Errorf("status %d; want %d (stderr %s)", code, exitLost, stderr)
	}
	if !strings.Contains(stderr, guardKilledLine) {
		t.Errorf("stderr %q; want it to say lease run killed its guard", stderr)
	}
	if deadline := h.expires.Add(-margin); time.Now().Before(deadline) {
		t.Errorf("guard killed before the lease's deadline %v; want --grace after it", deadline)
	}
}
