package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasekit/lease"
)

// These end-to-end tests build the lease binary and run it as real
// processes, with this test binary as COMMAND (childRole).

// leaseBin is the binary TestMain built.
var leaseBin string

// patience bounds every wait for a process; reaching it fails the test.
const patience = 60 * time.Second

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == guardCmd { // the in-process supervisor tests' guard
		os.Exit(mainArgs(os.Args[1:], os.Stdout, os.Stderr))
	}
	if role := os.Getenv("LEASE_TEST_ROLE"); role != "" {
		os.Exit(childRole(role))
	}
	dir, err := os.MkdirTemp("", "lease-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	leaseBin = filepath.Join(dir, "lease")
	args := []string{"build", "-o", leaseBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command(goTool(), append(args, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the lease command: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}

// self is this test binary, run as COMMAND.
func self(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// syncBuffer collects a process's stderr.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a running lease process.
type proc struct {
	cmd    *exec.Cmd
	stdin  interface{ Close() error }
	lines  chan string // stdout, line by line; closed at EOF
	stderr syncBuffer
	exited chan struct{} // closed once the process was waited for
	code   int
}

// baseEnv is the test's environment without LEASE_ variables, so that the
// caller's LEASE_STORE cannot change what a test runs against. Race-enabled
// binaries would otherwise sleep a second at exit.
func baseEnv() []string {
	env := []string{"GORACE=atexit_sleep_ms=0"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASE_") {
			env = append(env, kv)
		}
	}
	return env
}

// startLease starts the lease binary with args and extra environment.
func startLease(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(leaseBin, args...), lines: make(chan string, 64), exited: make(chan struct{})}
	p.cmd.Env = append(baseEnv(), env...)
	p.cmd.Stderr = &p.stderr
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = stdin
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			p.stdin.Close()
			<-p.exited
		}
	})
	return p
}

// line returns the next line of stdout.
func (p *proc) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("lease %v: stdout closed; stderr: %s", p.cmd.Args[1:], p.stderr.String())
		}
		return l
	case <-time.After(patience):
		t.Fatalf("lease %v: no output in %v; stderr: %s", p.cmd.Args[1:], patience, p.stderr.String())
	}
	return ""
}

// wait waits for the process to exit and returns its status (-1 if a
// signal ended it), after checking the rest of its stdout.
func (p *proc) wait(t *testing.T, wantRest ...string) int {
	t.Helper()
	var rest []string
	timeout := time.After(patience)
	for {
		select {
		case l, ok := <-p.lines:
			if ok {
				rest = append(rest, l)
				continue
			}
			select {
			case <-p.exited:
			case <-timeout:
				t.Fatalf("lease %v did not exit", p.cmd.Args[1:])
			}
			if strings.Join(rest, "\n") != strings.Join(wantRest, "\n") {
				t.Errorf("lease %v: rest of stdout = %q; want %q", p.cmd.Args[1:], rest, wantRest)
			}
			return p.code
		case <-timeout:
			t.Fatalf("lease %v did not exit; stderr: %s", p.cmd.Args[1:], p.stderr.String())
		}
	}
}

// runLease runs the lease binary to completion with stdin from /dev/null.
func runLease(t *testing.T, dir string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, leaseBin, args...)
	cmd.Dir = dir
	cmd.Env = append(baseEnv(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("lease %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// crossProcessStores are the stores two lease processes can share.
func crossProcessStores(t *testing.T) map[string]string {
	dir := t.TempDir()
	locks := filepath.Join(dir, "locks")
	if err := os.MkdirAll(locks, 0o755); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"sqlite": "sqlite:" + filepath.Join(dir, "leases.db"),
		"file":   "file:" + locks,
	}
}

// forEachStore runs fn against every store that coordinates processes.
func forEachStore(t *testing.T, fn func(t *testing.T, url string)) {
	for _, name := range []string{"sqlite", "file"} {
		t.Run(name, func(t *testing.T) {
			url := crossProcessStores(t)[name]
			requireStore(t, url)
			fn(t, url)
		})
	}
}

// requireStore fails unless url opens in this process.
func requireStore(t *testing.T, url string) {
	t.Helper()
	s, err := lease.Open(t.Context(), url)
	if err != nil {
		t.Fatalf("Open(%q) = %v", url, err)
	}
	s.Close()
}

// logLines reports whether stderr is n lines, each starting with the one
// "lease: " prefix it holds, as errors should read in a log.
func logLines(stderr string, n int) bool {
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	for _, l := range lines {
		if !strings.HasPrefix(l, "lease: ") || strings.Count(l, "lease: ") != 1 {
			return false
		}
	}
	return len(lines) == n && strings.HasSuffix(stderr, "\n")
}

func roleEnv(role string) []string { return []string{"LEASE_TEST_ROLE=" + role} }

// TestUsageErrors: bad command lines, unknown schemes and invalid keys
// (R1) print one line on stderr and exit 2, never a stack trace.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"no subcommand", nil, nil},
		{"unknown subcommand", nil, []string{"lock", "k"}},
		{"run without key", nil, []string{"run"}},
		{"run without command", nil, []string{"run", "--store", "memory:", "k"}},
		{"unknown flag", nil, []string{"run", "--wait", "k", "--", "true"}},
		{"bad duration", nil, []string{"run", "--ttl", "soon", "k", "--", "true"}},
		{"zero ttl", nil, []string{"run", "--ttl", "0s", "k", "--", "true"}},
		{"no-wait and timeout", nil, []string{"run", "--no-wait", "--timeout", "1s", "k", "--", "true"}},
		{"conflict code out of range", nil, []string{"run", "--conflict-exit-code", "300", "k", "--", "true"}},
		{"invalid key", nil, []string{"run", "--store", "memory:", "a//b", "--", "true"}},
		{"key too long", nil, []string{"run", "--store", "memory:", strings.Repeat("k", 257), "--", "true"}},
		{"unknown scheme", nil, []string{"run", "--store", "redis://x", "k", "--", "true"}},
		{"no scheme", nil, []string{"holder", "--store", "leases.db", "k"}},
		{"unknown scheme from env", []string{"LEASE_STORE=etcd://x"}, []string{"run", "k", "--", "true"}},
		{"holder without key", nil, []string{"holder", "--store", "memory:"}},
		{"holder with two keys", nil, []string{"holder", "--store", "memory:", "k", "j"}},
		{"holder invalid key", nil, []string{"holder", "--store", "memory:", "/k"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runLease(t, t.TempDir(), tc.env, tc.args...)
			if code != exitUsage {
				t.Errorf("exit status %d; want %d", code, exitUsage)
			}
			if stdout != "" {
				t.Errorf("stdout = %q; want nothing", stdout)
			}
			if !strings.HasPrefix(stderr, "lease: ") || strings.Count(stderr, "\n") != 1 || strings.Contains(stderr, "goroutine") {
				t.Errorf("stderr = %q; want one line starting with \"lease: \"", stderr)
			}
		})
	}
	if code, stdout, _ := runLease(t, t.TempDir(), nil, "help"); code != 0 || !strings.Contains(stdout, "lease run") {
		t.Errorf("lease help: status %d, stdout %q; want 0 and the usage", code, stdout)
	}
}

// TestRunPassesGrant: COMMAND sees its grant in the environment and lease
// exits with COMMAND's status (R2: the first grant has epoch 1).
func TestRunPassesGrant(t *testing.T) {
	code, stdout, stderr := runLease(t, t.TempDir(), roleEnv("env"), "run", "--store", "memory:", "--ttl", "1m", "jobs/nightly", "--", self(t))
	if code != 0 {
		t.Fatalf("status %d; stderr %s", code, stderr)
	}
	env := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		k, v, _ := strings.Cut(l, "=")
		env[k] = v
	}
	if env["LEASE_KEY"] != "jobs/nightly" || env["LEASE_EPOCH"] != "1" || env["LEASE_PREVIOUS_UNCLEAN"] != "false" ||
		lease.ValidateKey(env["LEASE_OWNER"]) != nil {
		t.Errorf("COMMAND's environment = %v", env)
	}
	exp, err := time.Parse(time.RFC3339Nano, env["LEASE_EXPIRES"])
	if err != nil || exp.Before(time.Now()) || exp.After(time.Now().Add(time.Minute)) {
		t.Errorf("LEASE_EXPIRES = %q (%v); want RFC 3339 within the 1m TTL", env["LEASE_EXPIRES"], err)
	}
}

// TestRunExitStatus: lease exits with COMMAND's status, 128+N when signal N
// ended it, and 126/127 when it cannot start.
func TestRunExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		role string
		argv []string
		want int
	}{
		{"success", "0", []string{self(t)}, 0},
		{"failure", "7", []string{self(t)}, 7},
		{"killed", "kill-self", []string{self(t)}, 128 + int(syscall.SIGKILL)},
		{"not found", "", []string{"lease-test-no-such-command"}, exitNotFound},
		{"not executable", "", []string{"/dev/null"}, exitNoExec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "--store", "memory:", "k", "--"}, tc.argv...)
			if code, _, stderr := runLease(t, t.TempDir(), roleEnv(tc.role), args...); code != tc.want {
				t.Errorf("status %d; want %d (stderr %s)", code, tc.want, stderr)
			}
		})
	}
}

// TestRunDefaultStore: with no --store and no LEASE_STORE, lease uses
// sqlite:lease.db in the current directory; LEASE_STORE overrides it.
func TestRunDefaultStore(t *testing.T) {
	t.Run("LEASE_STORE", func(t *testing.T) {
		code, _, stderr := runLease(t, t.TempDir(), []string{"LEASE_STORE=memory:"}, "run", "k", "--", "true")
		if code != 0 {
			t.Errorf("status %d; stderr %s", code, stderr)
		}
	})
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		requireStore(t, "sqlite:"+filepath.Join(dir, "probe.db"))
		code, stdout, stderr := runLease(t, dir, nil, "run", "nightly", "--", "echo", "hello")
		if code != 0 || stdout != "hello\n" {
			t.Fatalf("status %d, stdout %q; want 0, hello (stderr %s)", code, stdout, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "lease.db")); err != nil {
			t.Errorf("default store file: %v", err)
		}
		code, stdout, _ = runLease(t, dir, nil, "holder", "nightly")
		if code != 0 || !strings.HasPrefix(stdout, "nightly is free (") || !strings.HasSuffix(stdout, " released epoch 1 cleanly)\n") {
			t.Errorf("holder after run: status %d, stdout %q; want 0, free, epoch 1 released cleanly", code, stdout)
		}
	})
}

// TestRunKeepsDescriptors: COMMAND inherits stdin, stdout and stderr only,
// not the store's files: the same descriptors as when run directly.
func TestRunKeepsDescriptors(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("needs /proc to list a process's descriptors") // Linux only
	}
	script := []string{"sh", "-c", "ls /proc/$$/fd"}
	direct, err := exec.Command(script[0], script[1:]...).Output()
	if err != nil {
		t.Fatal(err)
	}
	urls := crossProcessStores(t)
	urls["memory"] = "memory:"
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			requireStore(t, url)
			code, stdout, stderr := runLease(t, t.TempDir(), nil, append([]string{"run", "--store", url, "k", "--"}, script...)...)
			if code != 0 || stdout != string(direct) {
				t.Errorf("descriptors under lease = %q (status %d, %s); want %q as when run directly", stdout, code, stderr, direct)
			}
		})
	}
}

// TestRunForwardsSignals: SIGTERM sent to lease reaches COMMAND's group;
// COMMAND exits on it, and lease exits 128+15 without needing SIGKILL.
func TestRunForwardsSignals(t *testing.T) {
	p := startLease(t, roleEnv("trap"), "run", "--store", "memory:", "k", "--", self(t))
	if l := p.line(t); l != "ready" {
		t.Fatalf("COMMAND said %q; want ready", l)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, "got terminated"); code != 128+int(syscall.SIGTERM) {
		t.Errorf("status %d; want 128+15", code)
	}
	if stderr := p.stderr.String(); strings.Contains(stderr, "SIGKILL") {
		t.Errorf("stderr %q; want no SIGKILL for a COMMAND that exits on SIGTERM", stderr)
	}
}

// TestRunOneAtATime: R5. Two lease processes on one key: the second runs
// its COMMAND only after the first's has finished, with the next epoch.
func TestRunOneAtATime(t *testing.T) {
	forEachStore(t, func(t *testing.T, url string) {
		env := append(roleEnv("hold"), "LEASE_TEST_MARKER="+filepath.Join(t.TempDir(), "inside"))
		a := startLease(t, env, "run", "--store", url, "--ttl", "5s", "k", "--", self(t))
		first := strings.Fields(a.line(t))
		if len(first) != 4 || first[0] != "in" || first[2] != "1" {
			t.Fatalf("first COMMAND said %q; want in OWNER 1 false", first)
		}
		b := startLease(t, env, "run", "--store", url, "--ttl", "5s", "k", "--", self(t))

		// While a's COMMAND runs, the key is a's and b waits.
		code, stdout, _ := runLease(t, t.TempDir(), nil, "holder", "--store", url, "--json", "k")
		var h holderJSON
		if err := json.Unmarshal([]byte(stdout), &h); err != nil || code != 0 || !h.Held || h.Owner != first[1] || h.Epoch != 1 {
			t.Errorf("holder while a runs = %s (status %d, %v); want a's owner %s, epoch 1", stdout, code, err, first[1])
		}
		select {
		case l := <-b.lines:
			t.Fatalf("second COMMAND ran while the first held the key: %q", l)
		default:
		}

		a.stdin.Close()
		if code := a.wait(t, "out"); code != 0 {
			t.Fatalf("first lease: status %d; stderr %s", code, a.stderr.String())
		}
		second := strings.Fields(b.line(t))
		if len(second) != 4 || second[0] != "in" || second[2] != "2" || second[3] != "false" || second[1] == first[1] {
			t.Errorf("second COMMAND said %q; want in OTHER-OWNER 2 false", second)
		}
		b.stdin.Close()
		if code := b.wait(t, "out"); code != 0 {
			t.Errorf("second lease: status %d; stderr %s", code, b.stderr.String())
		}
		if _, stdout, _ := runLease(t, t.TempDir(), nil, "holder", "--store", url, "k"); stdout != "k is free ("+second[1]+" released epoch 2 cleanly)\n" {
			t.Errorf("holder after both = %q; want free, released by %s", stdout, second[1])
		}
	})
}

// TestRunNoWait: R4e. On a held key, --no-wait and a --timeout that runs
// out exit with the conflict status (75, or --conflict-exit-code).
func TestRunNoWait(t *testing.T) {
	forEachStore(t, func(t *testing.T, url string) {
		a := startLease(t, roleEnv("hold"), "run", "--store", url, "k", "--", self(t))
		a.line(t)
		for _, tc := range []struct {
			args []string
			want int
		}{
			{[]string{"--no-wait"}, exitConflict},
			{[]string{"--no-wait", "--conflict-exit-code", "9"}, 9},
			{[]string{"--timeout", "300ms"}, exitConflict},
		} {
			args := append(append([]string{"run", "--store", url}, tc.args...), "k", "--", "echo", "ran")
			code, stdout, stderr := runLease(t, t.TempDir(), nil, args...)
			if code != tc.want || stdout != "" || !strings.Contains(stderr, "held by") || !logLines(stderr, 1) {
				t.Errorf("lease %v: status %d, stdout %q, stderr %q; want %d, nothing run, one line naming the holder",
					tc.args, code, stdout, stderr, tc.want)
			}
		}

		// A waiter stops on SIGTERM (128+15 once it waits; killed by the
		// signal if it had not started waiting yet) without running COMMAND.
		w := startLease(t, nil, "run", "--store", url, "k", "--", "echo", "ran")
		if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		w.wait(t)
		if ws := w.cmd.ProcessState.Sys().(syscall.WaitStatus); w.code != 128+int(syscall.SIGTERM) && ws.Signal() != syscall.SIGTERM {
			t.Errorf("waiter after SIGTERM: %v; want status 143 or death by SIGTERM", w.cmd.ProcessState)
		}

		a.stdin.Close()
		a.wait(t, "out")
		if code, stdout, _ := runLease(t, t.TempDir(), nil, "run", "--store", url, "--no-wait", "k", "--", "echo", "ran"); code != 0 || stdout != "ran\n" {
			t.Errorf("--no-wait on a free key: status %d, stdout %q", code, stdout)
		}
	})
}

// TestRunAfterKilledHolder: R4f. When a holding lease process is killed,
// its COMMAND dies with it, and the next holder sees PreviousUnclean.
func TestRunAfterKilledHolder(t *testing.T) {
	forEachStore(t, func(t *testing.T, url string) {
		a := startLease(t, roleEnv("hold"), "run", "--store", url, "--ttl", "1s", "k", "--", self(t))
		first := strings.Fields(a.line(t))
		if err := a.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		a.wait(t) // stdout reaches EOF only once COMMAND is gone too

		code, stdout, stderr := runLease(t, t.TempDir(), roleEnv("hold"), "run", "--store", url, "k", "--", self(t))
		if want := fmt.Sprintf("in %s 2 true\nout\n", ""); code != 0 || !strings.HasPrefix(stdout, "in ") ||
			!strings.HasSuffix(stdout, " 2 true\nout\n") || strings.Contains(stdout, first[1]) {
			t.Errorf("successor: status %d, stdout %q (stderr %s); want %q with a new owner", code, stdout, stderr, want)
		}
	})
}

// TestRunLostLease: R6, R8. When another owner takes the key (here written
// straight into the SQLite file), lease stops COMMAND, SIGKILLing it after
// --grace if it ignores SIGTERM, and exits with the lost status.
func TestRunLostLease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	requireStore(t, "sqlite:"+path)
	p := startLease(t, roleEnv("stubborn"), "run", "--store", "sqlite:"+path, "--ttl", "900ms", "--grace", "100ms", "k", "--", self(t))
	if l := p.line(t); l != "ready" {
		t.Fatalf("COMMAND said %q; want ready", l)
	}
	steal(t, path, "k")
	if code := p.wait(t); code != exitLost {
		t.Errorf("status %d; want %d (stderr %s)", code, exitLost, p.stderr.String())
	}
	if stderr := p.stderr.String(); !strings.Contains(stderr, "lease lost") || !strings.Contains(stderr, "SIGKILL") {
		t.Errorf("stderr %q; want it to report the loss and the SIGKILL", stderr)
	}
}
