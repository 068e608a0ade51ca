//go:build linux

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/sqlite"
)

// These tests check the guard design (see the package doc) with real
// shell commands: nothing COMMAND started outlives the lease, whatever
// happens to lease run. They find COMMAND's tree in /proc.

// treeScript is COMMAND for the tree tests: a shell that ignores SIGTERM,
// a worker in its group that ignores SIGTERM too, and a process that
// left the group (setsid), all still running when "ready" is printed.
const treeScript = `trap "" TERM; (trap "" TERM; exec sleep 1000) & setsid sleep 1000 & echo ready; wait`

// procID names one process for its whole life: pid numbers are reused,
// start times (in clock ticks since boot) tell the lives apart.
type procID struct {
	pid   int
	start string
}

func (p procID) String() string { return strconv.Itoa(p.pid) + ":" + p.start }

// procStat returns pid's state letter and start time, and false if pid
// is gone.
func procStat(pid int) (state, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", "", false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return "", "", false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return "", "", false
	}
	return f[0], f[19], true // fields 3 and 22 of stat: state, starttime
}

// procStart returns pid's start time, and false if pid is gone.
func procStart(pid int) (string, bool) {
	_, start, ok := procStat(pid)
	return start, ok
}

// alive reports whether p still runs. A zombie runs nothing: it is dead,
// waiting for its parent to reap it (the guard's own zombie, once lease
// run is dead, waits for init, which here may take its time).
func (p procID) alive() bool {
	state, start, ok := procStat(p.pid)
	return ok && start == p.start && state != "Z" && state != "X"
}

// treeOf returns the living descendants of pid.
func treeOf(t *testing.T, pid int) []procID {
	t.Helper()
	var tree []procID
	for _, d := range descendants(pid) {
		if start, ok := procStart(d); ok {
			tree = append(tree, procID{d, start})
		}
	}
	return tree
}

// survivors returns the processes of tree that still exist.
func survivors(tree []procID) []procID {
	var out []procID
	for _, p := range tree {
		if p.alive() {
			out = append(out, p)
		}
	}
	return out
}

// waitGone waits until no process of tree exists and returns when that
// was seen; it fails the test after patience.
func waitGone(t *testing.T, tree []procID) time.Time {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		left := survivors(tree)
		if len(left) == 0 {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v still exist %v later", left, patience)
		}
		time.Sleep(time.Millisecond) // polling the kernel's process table: nothing to wait on
	}
}

// noZombies fails the test if this process has an unreaped child.
func noZombies(t *testing.T) {
	t.Helper()
	for _, pid := range allPids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(os.Getpid()) {
			t.Errorf("zombie child %d left unreaped", pid)
		}
	}
}

func allPids() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// startTree starts lease run with treeScript on url and returns it and
// COMMAND's tree: the guard, the shell, the worker and the escapee.
func startTree(t *testing.T, url string, extra ...string) (*proc, []procID) {
	t.Helper()
	args := append(append([]string{"run", "--store", url}, extra...), "k", "--", "sh", "-c", treeScript)
	p := startLease(t, nil, args...)
	if l := p.line(t); l != "ready" {
		t.Fatalf("COMMAND said %q; want ready", l)
	}
	tree := treeOf(t, p.cmd.Process.Pid)
	if len(tree) < 4 {
		t.Fatalf("COMMAND's tree is %v; want the guard, sh, the worker and the setsid process", tree)
	}
	return p, tree
}

// TestKilledLeaseKillsTree: R5 for the command. When lease run is
// SIGKILLed, its guard kills COMMAND's whole tree, even the processes
// that ignore SIGTERM or left the group. On a file: store the flock stays
// held until then: a successor that gets the key finds none of them
// alive. On an expiring store the tree is gone long before the lease
// expires.
func TestKilledLeaseKillsTree(t *testing.T) {
	forEachStore(t, func(t *testing.T, url string) {
		const ttl = 3 * time.Second
		p, tree := startTree(t, url, "--ttl", ttl.String())
		killed := time.Now()
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		var pids []string
		for _, q := range tree {
			pids = append(pids, q.String())
		}
		env := append(roleEnv("gone"), "LEASE_TEST_PIDS="+strings.Join(pids, " "))
		if lockDirOf(url) != "" {
			// Try for the key as fast as processes start; every success
			// must find the old tree gone.
			for {
				code, stdout, stderr := runLease(t, t.TempDir(), env, "run", "--no-wait", "--store", url, "k", "--", self(t))
				if code == 0 {
					if stdout != "gone unclean=true\n" {
						t.Errorf("successor's COMMAND said %q; want gone unclean=true", stdout)
					}
					break
				}
				if code != exitConflict || time.Since(killed) > patience {
					t.Fatalf("successor: status %d, stderr %s; want %d until the tree is gone", code, stderr, exitConflict)
				}
			}
		} else {
			// The last renewal was at most TTL/3 before the kill, so the
			// lease expires no sooner than 2/3 of the TTL after it.
			if gone := waitGone(t, tree); gone.Sub(killed) >= 2*ttl/3 {
				t.Errorf("tree gone %v after lease was killed; want before the lease could expire (%v)", gone.Sub(killed), 2*ttl/3)
			}
			code, stdout, stderr := runLease(t, t.TempDir(), env, "run", "--timeout", "20s", "--store", url, "k", "--", self(t))
			if code != 0 || stdout != "gone unclean=true\n" {
				t.Errorf("successor: status %d, stdout %q, stderr %s; want 0, gone unclean=true", code, stdout, stderr)
			}
		}
		p.wait(t) // stdout closes only once every process holding it is gone
		if left := survivors(tree); len(left) > 0 {
			t.Errorf("processes %v of the killed lease's tree survive", left)
		}
		noZombies(t)
	})
}

// TestKilledGuardKillsTree: if the guard itself is SIGKILLed, COMMAND dies
// with it, lease run kills the orphans that come to it, and leaves the
// lease unreleased: the next holder is told to recover.
func TestKilledGuardKillsTree(t *testing.T) {
	url := crossProcessStores(t)["file"]
	p, tree := startTree(t, url)
	if err := syscall.Kill(tree[0].pid, syscall.SIGKILL); err != nil { // the guard: lease run's only child
		t.Fatal(err)
	}
	if code := p.wait(t); code != 128+int(syscall.SIGKILL) {
		t.Errorf("status %d; want 128+9 (stderr %s)", code, p.stderr.String())
	}
	if left := survivors(tree); len(left) > 0 {
		t.Errorf("processes %v survive lease run", left)
	}
	code, stdout, _ := runLease(t, t.TempDir(), nil, "holder", "--store", url, "k")
	if code != 0 || !strings.Contains(stdout, "never released epoch 1") {
		t.Errorf("holder after the guard died: %d %q; want free, epoch 1 never released", code, stdout)
	}
	noZombies(t)
}

// TestLossKillsGroupAfterGrace: R6, R8. When the lease is lost, COMMAND's
// group gets SIGTERM; the direct child exits on it, a member ignores it
// and is SIGKILLed after --grace; lease run exits 76 only after that.
func TestLossKillsGroupAfterGrace(t *testing.T) {
	const grace = 400 * time.Millisecond
	path := filepath.Join(t.TempDir(), "leases.db")
	requireStore(t, "sqlite:"+path)
	p := startLease(t, nil, "run", "--store", "sqlite:"+path, "--ttl", "6s", "--grace", grace.String(), "k", "--",
		"sh", "-c", `sh -c 'trap "" TERM; echo member $$; exec sleep 1000' & wait`)
	f := strings.Fields(p.line(t))
	pid, _ := strconv.Atoi(f[len(f)-1])
	start, ok := procStart(pid)
	if len(f) != 2 || f[0] != "member" || !ok {
		t.Fatalf("COMMAND said %q; want member PID", f)
	}
	member := procID{pid, start}
	steal(t, path, "k")
	stopping := p.stderr.waitFor(t, "stopping")
	code := p.wait(t)
	exited := time.Now()
	if code != exitLost {
		t.Errorf("status %d; want %d (stderr %s)", code, exitLost, p.stderr.String())
	}
	if member.alive() {
		t.Errorf("member %v of COMMAND's group outlived lease run", member)
	}
	if d := exited.Sub(stopping); d < grace/2 {
		t.Errorf("lease exited %v after the loss; want SIGKILL after the %v grace first", d, grace)
	}
	if stderr := p.stderr.String(); !strings.Contains(stderr, "lease lost") || !strings.Contains(stderr, "SIGKILL") || !logLines(stderr, 2) {
		t.Errorf("stderr %q; want two log lines: the loss and the SIGKILL", stderr)
	}
	noZombies(t)
}

// steal makes another owner the holder of key in the SQLite file at path,
// behind its holder's back. A renewal landing between the read and the
// write makes the write conflict; the thief then reads again.
func steal(t *testing.T, path, key string) {
	t.Helper()
	d, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for try := 0; ; try++ {
		rec, version, err := d.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Session != "" {
			endSession(t, d, rec.Session) // as a taker does first (R21): the holder's renewal then fails
		}
		rec.Owner, rec.Epoch, rec.ExpiresAt, rec.Session = "thief", rec.Epoch+1, time.Now().Add(time.Hour), ""
		_, err = d.Put(t.Context(), rec, lease.Precondition{Version: version})
		if err == nil {
			return
		}
		if !errors.Is(err, lease.ErrConflict) || try == 100 {
			t.Fatal(err)
		}
	}
}

// TestSignalsStopGroup: SIGINT, SIGTERM and SIGHUP to lease run are
// forwarded to COMMAND's group; a group that ignores them is SIGKILLed
// after --grace, and lease run exits 128+N once it is gone.
func TestSignalsStopGroup(t *testing.T) {
	const grace = 300 * time.Millisecond
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			p := startLease(t, nil, "run", "--store", "memory:", "--grace", grace.String(), "k", "--",
				"sh", "-c", `trap "" INT TERM HUP; sleep 1000 & echo ready; wait`)
			if l := p.line(t); l != "ready" {
				t.Fatalf("COMMAND said %q; want ready", l)
			}
			tree := treeOf(t, p.cmd.Process.Pid)
			sent := time.Now()
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t); code != 128+int(sig) {
				t.Errorf("status %d; want 128+%d (stderr %s)", code, sig, p.stderr.String())
			}
			if d := time.Since(sent); d < grace {
				t.Errorf("lease exited %v after %v; want SIGKILL after the %v grace first", d, sig, grace)
			}
			if left := survivors(tree); len(left) > 0 {
				t.Errorf("processes %v survive lease run", left)
			}
			if !strings.Contains(p.stderr.String(), "SIGKILL") {
				t.Errorf("stderr %q; want the SIGKILL reported", p.stderr.String())
			}
			noZombies(t)
		})
	}
}

// TestCommandExitStopsLeftovers: COMMAND exits but leaves a process
// running; it is stopped before the lease is released, and lease run
// exits with COMMAND's status.
func TestCommandExitStopsLeftovers(t *testing.T) {
	url := crossProcessStores(t)["file"]
	p := startLease(t, nil, "run", "--store", url, "k", "--", "sh", "-c", `sleep 1000 & echo $!; exit 4`)
	pid, err := strconv.Atoi(p.line(t))
	if err != nil {
		t.Fatal(err)
	}
	start, _ := procStart(pid)
	left := procID{pid, start}
	if code := p.wait(t); code != 4 {
		t.Errorf("status %d; want COMMAND's 4 (stderr %s)", code, p.stderr.String())
	}
	if left.alive() {
		t.Errorf("COMMAND's background process %v outlived the lease", left)
	}
	if !strings.Contains(p.stderr.String(), "left running") {
		t.Errorf("stderr %q; want it to say it stopped what COMMAND left running", p.stderr.String())
	}
	noZombies(t)
}

// TestTimeoutOnSlowStoreIsHeld: R4e. A --timeout that runs out while a
// store call is in flight still reports the key held (75), never a store
// failure (69). The key's holder expires during the wait, so the waiter's
// takeover write queues behind a write lock the test holds, past the
// timeout.
func TestTimeoutOnSlowStoreIsHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	d, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	expires := time.Now().Add(time.Second)
	if _, err := d.Put(t.Context(), lease.Record{Key: "k", Owner: "ghost", Epoch: 1, ExpiresAt: expires}, lease.Precondition{Absent: true}); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil { // the write lock
		t.Fatal(err)
	}
	defer conn.ExecContext(context.Background(), "ROLLBACK")

	code, stdout, stderr := runLease(t, t.TempDir(), nil, "run", "--store", "sqlite:"+path, "--quiet", "--timeout", "4500ms", "k", "--", "echo", "ran") // under the driver's 5 s busy timeout, so that the timeout comes while the write waits; room for a slow start
	if code != exitConflict || stdout != "" || !strings.Contains(stderr, `held by "ghost"`) || !logLines(stderr, 1) {
		t.Errorf("status %d, stdout %q, stderr %q; want %d, nothing run, one line naming ghost", code, stdout, stderr, exitConflict)
	}
	if time.Now().Before(expires) {
		t.Error("lease gave up before the holder expired: the slow write was never tried")
	}
}

// TestUsageErrorsCreateNothing: durations the library would refuse and
// unknown flags are usage errors (2, one line), found before any store is
// opened: nothing is created, whatever the store.
func TestUsageErrorsCreateNothing(t *testing.T) {
	for _, bad := range [][]string{
		{"--ttl", "500us"}, {"--ttl", "-1s"}, {"--grace", "-1s"}, {"--bogus"},
		{"--ttl", "6s", "--grace", "1s"}, // not shorter than the safety margin
		{"--timeout", "-1s"},
	} {
		for _, scheme := range []string{"sqlite", "file", "memory"} {
			if scheme == "file" && bad[0] == "--ttl" && bad[1] == "6s" {
				continue // file: grants never expire: any grace fits (checked below)
			}
			t.Run(strings.Join(bad, "_")+"/"+scheme, func(t *testing.T) {
				dir := t.TempDir()
				store := map[string]string{
					"sqlite": "sqlite:" + filepath.Join(dir, "leases.db"),
					"file":   "file:" + filepath.Join(dir, "locks"),
					"memory": "memory:",
				}[scheme]
				args := append(append([]string{"run", "--store", store}, bad...), "k", "--", "echo", "ran")
				code, stdout, stderr := runLease(t, dir, nil, args...)
				if code != exitUsage || stdout != "" || !strings.HasPrefix(stderr, "lease: ") || strings.Count(stderr, "\n") != 1 {
					t.Errorf("status %d, stdout %q, stderr %q; want 2 and one line", code, stdout, stderr)
				}
				if entries, _ := os.ReadDir(dir); len(entries) != 0 {
					t.Errorf("%s holds %v after a usage error; want nothing created", dir, entries)
				}
			})
		}
	}
	url := crossProcessStores(t)["file"]
	if code, stdout, stderr := runLease(t, t.TempDir(), nil, "run", "--store", url, "--ttl", "6s", "--grace", "1s", "k", "--", "echo", "ran"); code != 0 || stdout != "ran\n" {
		t.Errorf("file: store with a long grace: status %d, stdout %q, stderr %q; want it to run", code, stdout, stderr)
	}
}

// TestHolderOfMissingStoreCreatesNothing: R14. lease holder and lease
// list on a store that does not exist say nothing is held and create
// nothing.
func TestHolderOfMissingStoreCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	for _, url := range []string{"sqlite:" + filepath.Join(dir, "leases.db"), "file:" + filepath.Join(dir, "locks")} {
		code, stdout, stderr := runLease(t, dir, nil, "holder", "--store", url, "k")
		if code != 0 || !strings.HasPrefix(stdout, "k is free (nothing is held: ") || stderr != "" {
			t.Errorf("holder on %s: status %d, stdout %q, stderr %q; want 0, free, nothing held", url, code, stdout, stderr)
		}
		code, stdout, _ = runLease(t, dir, nil, "holder", "--json", "--store", url, "k")
		if code != 0 || stdout != `{"key":"k","held":false}`+"\n" {
			t.Errorf("holder --json on %s: status %d, stdout %q", url, code, stdout)
		}
		code, stdout, stderr = runLease(t, dir, nil, "list", "--store", url)
		if code != 0 || stdout != "" || !strings.Contains(stderr, "nothing is held") {
			t.Errorf("list on %s: status %d, stdout %q, stderr %q; want 0, no lines, nothing held", url, code, stdout, stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("%s holds %v after holder and list; want nothing created", dir, entries)
	}
}

// waitFor waits until the buffer holds s and returns when it saw it.
func (s *syncBuffer) waitFor(t *testing.T, sub string) time.Time {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !strings.Contains(s.String(), sub) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q on stderr after %v: %q", sub, patience, s.String())
		}
		time.Sleep(time.Millisecond) // polling the pipe's copy: nothing to wait on
	}
	return time.Now()
}

func init() { extraRoles["gone"] = roleGone }

// roleGone reports, as a successor's COMMAND, whether any process of
// LEASE_TEST_PIDS ("pid:start ...") still exists.
func roleGone() int {
	var left []string
	for _, f := range strings.Fields(os.Getenv("LEASE_TEST_PIDS")) {
		pidStr, start, _ := strings.Cut(f, ":")
		pid, _ := strconv.Atoi(pidStr)
		if (procID{pid, start}).alive() {
			left = append(left, f)
		}
	}
	if len(left) > 0 {
		fmt.Println("alive", strings.Join(left, " "))
		return 1
	}
	fmt.Println("gone unclean=" + os.Getenv("LEASE_PREVIOUS_UNCLEAN"))
	return 0
}

// endSession ends session id unclean, as a taker does before it takes a
// key of it (R21), whatever its expiry.
func endSession(t *testing.T, d lease.Driver, id string) {
	t.Helper()
	sd := d.(lease.SessionDriver)
	for try := 0; ; try++ {
		sess, version, err := sd.GetSession(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		sess.State = lease.SessionEndedUnclean
		_, err = sd.PutSession(t.Context(), sess, lease.Precondition{Version: version})
		if err == nil {
			return
		}
		if !errors.Is(err, lease.ErrConflict) || try == 100 {
			t.Fatal(err)
		}
	}
}
