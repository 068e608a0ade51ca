//go:build linux

package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Issue 18, finding 6: a stopped lease run must not let COMMAND outlive
// its lease. These tests SIGSTOP the lease process (as a debugger, a
// frozen cgroup or a paused container would) and check, with a record
// kept by the COMMANDs themselves, that a second lease run on the key
// never runs its COMMAND while the first one can still write.

func init() { extraRoles["append"] = roleAppend }

// roleAppend is COMMAND for these tests. It appends "EPOCH UNIXNANO" lines
// to $LEASE_TEST_LOG every couple of milliseconds until stdin closes: an
// append-only record that orders the writes of every COMMAND on the key.
// When it starts it first checks that no process of LEASE_TEST_PIDS (a
// previous holder's tree) exists, and records "overlap" if one does.
func roleAppend() int {
	log, err := os.OpenFile(os.Getenv("LEASE_TEST_LOG"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Println("cannot open the log:", err)
		return 1
	}
	defer log.Close()
	epoch := os.Getenv("LEASE_EPOCH")
	for _, f := range strings.Fields(os.Getenv("LEASE_TEST_PIDS")) {
		pidStr, start, _ := strings.Cut(f, ":")
		pid, _ := strconv.Atoi(pidStr)
		if (procID{pid, start}).alive() {
			fmt.Fprintf(log, "overlap %s %s\n", epoch, f)
		}
	}
	fmt.Println("in", epoch, os.Getenv("LEASE_PREVIOUS_UNCLEAN"))
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	tick := time.NewTicker(2 * time.Millisecond) // the work's own pace
	defer tick.Stop()
	for {
		if _, err := fmt.Fprintf(log, "%s %d\n", epoch, time.Now().UnixNano()); err != nil {
			fmt.Println("append:", err)
			return 1
		}
		select {
		case <-stdinClosed:
			fmt.Println("out")
			return 0
		case <-tick.C:
		}
	}
}

// appendLog reads the log: each line's epoch and time, in append order.
type appendLine struct {
	epoch string
	at    time.Time
	raw   string
}

func readAppendLog(t *testing.T, path string) []appendLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []appendLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		l := appendLine{raw: sc.Text()}
		if len(fields) == 2 {
			ns, _ := strconv.ParseInt(fields[1], 10, 64)
			l.epoch, l.at = fields[0], time.Unix(0, ns)
		}
		lines = append(lines, l)
	}
	return lines
}

// waitAppends waits until the log holds at least n lines of epoch.
func waitAppends(t *testing.T, path, epoch string, n int) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		count := 0
		for _, l := range readAppendLog(t, path) {
			if l.epoch == epoch {
				count++
			}
		}
		if count >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("COMMAND of epoch %s appended %d lines in %v; want %d", epoch, count, patience, n)
		}
		time.Sleep(time.Millisecond) // polling a file another process writes: nothing to wait on
	}
}

// stopLease SIGSTOPs the lease process pid at a moment when it does not
// hold the SQLite file's write lock (a renewal caught mid-commit would
// block every other process, which is not what this test is about): after
// each stop it tries the lock without waiting; if the stopped process has
// it, it lets the process go on until its commit ends, and stops it again.
func stopLease(t *testing.T, pid int, dbPath string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for tries := 0; ; tries++ {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		waitStopped(t, pid)
		if writeLockFree(t, db, 0) {
			return
		}
		if tries == 100 {
			t.Fatal("the stopped lease process held the SQLite write lock 100 times in a row")
		}
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		writeLockFree(t, db, patience) // waits until its commit is done
	}
}

// waitStopped waits until the kernel shows pid stopped.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		if state, _, ok := procStat(pid); ok && state == "T" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d not stopped %v after SIGSTOP", pid, patience)
		}
		time.Sleep(time.Millisecond) // polling the kernel's process table: nothing to wait on
	}
}

// writeLockFree reports whether the SQLite write lock could be taken
// within wait, and gives it back.
func writeLockFree(t *testing.T, db *sql.DB, wait time.Duration) bool {
	t.Helper()
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), fmt.Sprintf("PRAGMA busy_timeout = %d", wait.Milliseconds())); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		return false
	}
	_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
	return true
}

// TestStoppedLeaseStopsCommand: issue 18, finding 6. The lease process is
// stopped while COMMAND runs. On an expiring store its guard stops
// COMMAND's tree by itself before the lease can expire; a second lease run
// then takes the key over (epoch 2, previous unclean) and its COMMAND
// finds nothing of the first one alive, and no line of the first COMMAND
// follows the second's first line in the record they share. When the
// stopped lease runs again it exits 76. On a file: store the flock stays
// held while the first COMMAND runs: the second lease run does not start.
func TestStoppedLeaseStopsCommand(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		dbPath := filepath.Join(dir, "leases.db")
		url := "sqlite:" + dbPath
		requireStore(t, url)
		const ttl = 3 * time.Second
		logPath := filepath.Join(dir, "appends")
		env := append(roleEnv("append"), "LEASE_TEST_LOG="+logPath)

		a := startLease(t, env, "run", "--store", url, "--ttl", ttl.String(), "k", "--", self(t))
		if l := a.line(t); l != "in 1 false" {
			t.Fatalf("first COMMAND said %q; want in 1 false", l)
		}
		tree := treeOf(t, a.cmd.Process.Pid)
		waitAppends(t, logPath, "1", 10)
		stopLease(t, a.cmd.Process.Pid, dbPath)
		expires := holderExpiry(t, url)

		var pids []string
		for _, p := range tree {
			pids = append(pids, p.String())
		}
		b := startLease(t, append(env, "LEASE_TEST_PIDS="+strings.Join(pids, " ")),
			"run", "--store", url, "--ttl", ttl.String(), "--timeout", patience.String(), "k", "--", self(t))
		if l := b.line(t); l != "in 2 true" {
			t.Fatalf("second COMMAND said %q; want in 2 true (a takeover)", l)
		}
		if left := survivors(tree); len(left) > 0 {
			t.Errorf("processes %v of the stopped lease's COMMAND live on while the next holder's COMMAND runs", left)
		}
		waitAppends(t, logPath, "2", 5)
		b.stdin.Close()
		if code := b.wait(t, "out"); code != 0 {
			t.Errorf("second lease: status %d; stderr %s", code, b.stderr.String())
		}

		if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if code := a.wait(t); code != exitLost {
			t.Errorf("stopped lease, continued: status %d; want %d (stderr %s)", code, exitLost, a.stderr.String())
		}
		if stderr := a.stderr.String(); !strings.Contains(stderr, "has not renewed the lease in time") {
			t.Errorf("stopped lease's stderr %q; want the guard to say why it stopped COMMAND", stderr)
		}
		checkNoOverlap(t, readAppendLog(t, logPath), expires)
		noZombies(t)
	})

	t.Run("file", func(t *testing.T) {
		url := crossProcessStores(t)["file"]
		logPath := filepath.Join(t.TempDir(), "appends")
		env := append(roleEnv("append"), "LEASE_TEST_LOG="+logPath)
		a := startLease(t, env, "run", "--store", url, "k", "--", self(t))
		if l := a.line(t); l != "in 1 false" {
			t.Fatalf("first COMMAND said %q; want in 1 false", l)
		}
		if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		waitStopped(t, a.cmd.Process.Pid)
		code, stdout, stderr := runLease(t, t.TempDir(), env, "run", "--store", url, "--timeout", "1s", "k", "--", self(t))
		if code != exitConflict || stdout != "" {
			t.Errorf("second lease while the first is stopped: status %d, stdout %q, stderr %q; want %d, nothing run", code, stdout, stderr, exitConflict)
		}
		before := len(readAppendLog(t, logPath))
		waitAppends(t, logPath, "1", before+5) // the first COMMAND still runs: the flock is still held
		if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		a.stdin.Close()
		if code := a.wait(t, "out"); code != 0 {
			t.Errorf("first lease, continued: status %d; stderr %s", code, a.stderr.String())
		}
		for _, l := range readAppendLog(t, logPath) {
			if l.epoch != "1" {
				t.Fatalf("log line %q: only the first COMMAND may have written", l.raw)
			}
		}
	})
}

// holderExpiry returns the expiry of key k's live holder, from lease holder.
func holderExpiry(t *testing.T, url string) time.Time {
	t.Helper()
	code, stdout, stderr := runLease(t, t.TempDir(), nil, "holder", "--store", url, "--json", "k")
	var h holderJSON
	if err := json.Unmarshal([]byte(stdout), &h); err != nil || code != 0 || !h.Held || h.Expires == nil {
		t.Fatalf("holder: status %d, %q, %v (stderr %s); want a live holder with an expiry", code, stdout, err, stderr)
	}
	return *h.Expires
}

// checkNoOverlap checks the shared record: epoch 1's lines all come before
// epoch 2's first, none was written at or after the first lease's expiry,
// and the second COMMAND found none of the first's processes alive.
func checkNoOverlap(t *testing.T, lines []appendLine, expires time.Time) {
	t.Helper()
	second, late := -1, 0
	var last1 time.Time
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l.raw, "overlap"):
			t.Errorf("the second COMMAND started while the first's process %s lived", l.raw)
		case l.epoch == "2" && second < 0:
			second = i
		case l.epoch == "1" && second >= 0:
			if late++; late == 1 {
				t.Errorf("line %d %q: the first COMMAND wrote after the second one's first line (%d)", i, l.raw, second)
			}
		case l.epoch == "1":
			last1 = l.at
		}
	}
	if late > 0 {
		t.Errorf("the first COMMAND wrote %d lines after the second COMMAND started", late)
	}
	if second < 0 {
		t.Fatal("the second COMMAND wrote nothing")
	}
	if !last1.Before(expires) {
		t.Errorf("the first COMMAND wrote at %v, at or after its lease expired (%v)", last1, expires)
	}
}

// TestRenewalsKeepCommandRunning: the guard's own deadline moves on with
// every renewal lease run makes, so a COMMAND that runs for several TTLs
// is not stopped.
func TestRenewalsKeepCommandRunning(t *testing.T) {
	url := crossProcessStores(t)["sqlite"]
	requireStore(t, url)
	code, stdout, stderr := runLease(t, t.TempDir(), nil, "run", "--store", url, "--ttl", "1s", "k", "--", "sh", "-c", "sleep 3.5; echo done")
	if code != 0 || stdout != "done\n" || stderr != "" {
		t.Errorf("COMMAND running for over three TTLs: status %d, stdout %q, stderr %q; want 0, done, nothing", code, stdout, stderr)
	}
}
