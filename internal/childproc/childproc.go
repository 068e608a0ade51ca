// Package childproc runs the test binary again as a child process, for
// tests that need real OS processes (separate stores, crashes, flocks
// dropped by the kernel). The child is one test of the same binary,
// selected with -test.run and told what to do through its environment and
// stdin; it answers on stdout with lines "RESULT ...".
package childproc

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// guard bounds every wait for a child: a guard against a hung child, not
// a wait for time to pass.
const guard = 60 * time.Second

// Child is a running child process as its parent test sees it.
type Child struct {
	Name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	results chan string // the RESULT lines, closed at EOF
	exited  chan error  // cmd.Wait's result, once the child has exited
	stderr  *lockedBuffer
}

// Start runs the test binary as the child test named test, with env added
// to its environment, and waits until it answers "ready". Its "RESULT ..."
// lines become the child's answers. The child's stdin stays open until
// Close or StopAll (or the test's end), so a child can serve until its
// stdin reaches EOF.
func Start(t testing.TB, test, name string, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), env...)
	c := &Child{Name: name, cmd: cmd, results: make(chan string, 16), exited: make(chan error, 1), stderr: new(lockedBuffer)}
	cmd.Stderr = c.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting child %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
				c.results <- line
			}
		}
		close(c.results)
		c.exited <- cmd.Wait() // after the last read from stdout, as exec requires
	}()
	t.Cleanup(func() { // a safety net: the tests stop their children themselves
		c.stdin.Close()
		select {
		case <-c.exited:
		case <-time.After(guard / 2):
			c.cmd.Process.Kill()
		}
	})
	if got := c.Recv(t); got != "ready" {
		t.Fatalf("child %s: %s", name, got)
	}
	return c
}

// StopAll closes every child's stdin at once (a race-enabled binary
// lingers a second at exit) and fails the test unless each exits cleanly.
func StopAll(t testing.TB, children []*Child) {
	t.Helper()
	for _, c := range children {
		c.Close()
	}
	for _, c := range children {
		if err := c.Wait(t); err != nil {
			t.Errorf("child %s exited with %v\nstderr: %s", c.Name, err, c.Stderr())
		}
	}
}

// Close closes the child's stdin: a child serving commands ends.
func (c *Child) Close() { c.stdin.Close() }

// Wait returns the child's exit error once it has exited.
func (c *Child) Wait(t testing.TB) error {
	t.Helper()
	select {
	case err := <-c.exited:
		c.exited <- err // for the cleanup and later Waits
		return err
	case <-time.After(guard):
		t.Fatalf("child %s did not exit in %v", c.Name, guard)
	}
	return nil
}

// Send writes one command line to the child's stdin.
func (c *Child) Send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		t.Fatalf("child %s: writing %q: %v\nstderr: %s", c.Name, line, err, c.Stderr())
	}
}

// Recv returns the child's next answer, failing the test if none comes.
func (c *Child) Recv(t testing.TB) string {
	t.Helper()
	select {
	case line, ok := <-c.results:
		if !ok {
			t.Fatalf("child %s ended early: %v\nstderr: %s", c.Name, c.Wait(t), c.Stderr())
		}
		return line
	case <-time.After(guard):
		t.Fatalf("child %s did not answer in %v", c.Name, guard)
	}
	return ""
}

// Signal sends sig to the child process.
func (c *Child) Signal(sig syscall.Signal) error { return c.cmd.Process.Signal(sig) }

// Kill kills the child process (SIGKILL), as a crash would.
func (c *Child) Kill() error { return c.cmd.Process.Kill() }

// Stderr is what the child wrote to its stderr so far.
func (c *Child) Stderr() string { return c.stderr.String() }

// lockedBuffer is the child's stderr: written by exec's copying goroutine,
// read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
