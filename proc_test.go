//go:build unix

package lease

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cross-process tests run real OS processes: the test binary runs itself
// again as a child, selected by the environment variable below, with its
// own store opened from a URL (an SQLite file, a flock directory). A child reads commands on stdin and
// answers each with one "RESULT ..." line on stdout:
//
//	acquire <unix ms>   set the child's clock, Acquire(procKey)
//	                    → "RESULT ok <epoch> <previous unclean>"
//	                    | "RESULT held <owner> <epoch>" | "RESULT err <text>"
//	release             release the last grant → "RESULT released" | "RESULT err <text>"
//
// Stdin reaching EOF closes the store and ends the child.
const (
	childEnvStore = "LEASE_TEST_CHILD_STORE"
	childEnvOwner = "LEASE_TEST_CHILD_OWNER"
	procKey       = "shared/job"
)

// TestStoreChild is the child's entry point; run directly it does nothing.
func TestStoreChild(t *testing.T) {
	url := os.Getenv(childEnvStore)
	if url == "" {
		return // not a child: the parents are the tests that call startChild
	}
	if err := runStoreChild(url, os.Getenv(childEnvOwner), os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

func runStoreChild(url, owner string, in io.Reader, out io.Writer) error {
	clock := newFakeClock()
	s, err := Open(ctxBG, url, WithOwner(owner), WithClock(clock.Now), WithTTL(testTTL))
	if err != nil {
		fmt.Fprintf(out, "RESULT err %v\n", err)
		return err
	}
	defer s.Close()
	fmt.Fprintln(out, "RESULT ready")
	var last Grant
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "acquire":
			if arg != "" {
				ms, err := strconv.ParseInt(arg, 10, 64)
				if err != nil {
					return err
				}
				clock.Set(time.UnixMilli(ms).UTC())
			}
			g, err := s.Acquire(ctxBG, procKey)
			var held *HeldError
			switch {
			case err == nil:
				last = g
				fmt.Fprintf(out, "RESULT ok %d %v\n", g.Epoch, g.PreviousUnclean)
			case errors.As(err, &held):
				fmt.Fprintf(out, "RESULT held %s %d\n", held.Owner, held.Epoch)
			default:
				fmt.Fprintf(out, "RESULT err %v\n", err)
			}
		case "release":
			if err := s.Release(ctxBG, last); err != nil {
				fmt.Fprintf(out, "RESULT err %v\n", err)
			} else {
				fmt.Fprintln(out, "RESULT released")
			}
		default:
			return fmt.Errorf("unknown command %q", sc.Text())
		}
	}
	return sc.Err()
}

// child is a running child process as its parent test sees it.
type child struct {
	owner   string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	results chan string // the RESULT lines, closed at EOF
	exited  chan error  // cmd.Wait's result, once the child has exited
	stderr  *bytes.Buffer
}

// startChild runs the test binary as a child on the store at url, and
// waits until it has opened the store.
func startChild(t *testing.T, url, owner string) *child {
	t.Helper()
	return startTestChild(t, "TestStoreChild", owner, childEnvStore+"="+url, childEnvOwner+"="+owner)
}

// startTestChild runs the test binary as the child test named test, with
// env added to its environment, and waits until it answers "ready". Its
// "RESULT ..." lines become the child's answers.
func startTestChild(t *testing.T, test, name string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), env...)
	c := &child{owner: name, cmd: cmd, results: make(chan string, 16), exited: make(chan error, 1), stderr: new(bytes.Buffer)}
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
		case <-time.After(30 * time.Second): // a guard, not a wait for time to pass
			c.cmd.Process.Kill()
		}
	})
	if got := c.recv(t); got != "ready" {
		t.Fatalf("child %s: %s", name, got)
	}
	return c
}

// stopChildren closes every child's stdin at once (a race-enabled binary
// lingers a second at exit) and fails the test unless each exits cleanly.
func stopChildren(t *testing.T, children []*child) {
	t.Helper()
	for _, c := range children {
		c.stdin.Close()
	}
	for _, c := range children {
		if err := c.wait(t); err != nil {
			t.Errorf("child %s exited with %v\nstderr: %s", c.owner, err, c.stderr)
		}
	}
}

// wait returns the child's exit error once it has exited.
func (c *child) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-c.exited:
		c.exited <- err // for the cleanup
		return err
	case <-time.After(60 * time.Second): // a guard against a hung child
		t.Fatalf("child %s did not exit in 60s", c.owner)
	}
	return nil
}

func (c *child) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		t.Fatalf("child %s: writing %q: %v\nstderr: %s", c.owner, line, err, c.stderr)
	}
}

// recv returns the child's next answer, failing the test if none comes.
func (c *child) recv(t *testing.T) string {
	t.Helper()
	select {
	case line, ok := <-c.results:
		if !ok {
			t.Fatalf("child %s ended early: %v\nstderr: %s", c.owner, c.wait(t), c.stderr)
		}
		return line
	case <-time.After(60 * time.Second): // a guard against a hung child
		t.Fatalf("child %s did not answer in 60s", c.owner)
	}
	return ""
}

// TestProcessRace: 8 processes, each with its own store on one backend,
// race for one key over 6 rounds (R5). Exactly one wins each round;
// every loser's ErrHeld names the winner; epochs go 1, 2, 3, ... (R2).
// Odd rounds end with the winner releasing; even rounds end with the winner
// holding on, and the next round runs past its expiry, so that the next
// winner takes over (R4f, PreviousUnclean) unless it is the same process
// (R4d). The local store has no expiry: there every round ends in a
// release. The SQLite processes also create the file and its table at once.
func TestProcessRace(t *testing.T) {
	for _, b := range []struct {
		name    string
		url     func(dir string) string
		expires bool
	}{
		{"sqlite", func(dir string) string { return "sqlite:" + filepath.Join(dir, "leases.db") }, true},
		{"local", func(dir string) string { return "file:" + dir }, false},
	} {
		t.Run(b.name, func(t *testing.T) { processRace(t, b.url(t.TempDir()), b.expires) })
	}
}

func processRace(t *testing.T, url string, expires bool) {
	const procs, rounds = 8, 6
	children := make([]*child, procs)
	for i := range children {
		children[i] = startChild(t, url, fmt.Sprintf("proc-%d", i))
	}
	t0 := newFakeClock().Now()
	var prevWinner *child
	prevReleased := true
	for round := 1; round <= rounds; round++ {
		now := t0.Add(time.Duration(round) * 2 * testTTL) // past the previous round's expiry
		// Every child is blocked reading stdin: this line is the barrier.
		for _, c := range children {
			c.send(t, fmt.Sprintf("acquire %d", now.UnixMilli()))
		}
		var winner *child
		var epoch uint64
		var unclean bool
		held := map[string]string{}
		for _, c := range children {
			line := c.recv(t)
			f := strings.Fields(line)
			switch {
			case len(f) == 3 && f[0] == "ok":
				if winner != nil {
					t.Fatalf("round %d: both %s and %s won", round, winner.owner, c.owner)
				}
				winner, unclean = c, f[2] == "true"
				epoch, _ = strconv.ParseUint(f[1], 10, 64)
			case len(f) == 3 && f[0] == "held":
				held[c.owner] = f[1] + " " + f[2]
			default:
				t.Fatalf("round %d: child %s: %s", round, c.owner, line)
			}
		}
		if winner == nil {
			t.Fatalf("round %d: no winner; losers saw %v", round, held)
		}
		if epoch != uint64(round) {
			t.Fatalf("round %d: %s won epoch %d; want %d", round, winner.owner, epoch, round)
		}
		for loser, named := range held {
			if want := fmt.Sprintf("%s %d", winner.owner, epoch); named != want {
				t.Fatalf("round %d: %s was told %q holds; want %q", round, loser, named, want)
			}
		}
		if wantUnclean := !prevReleased && winner != prevWinner; unclean != wantUnclean {
			t.Fatalf("round %d: %s's PreviousUnclean = %v; want %v", round, winner.owner, unclean, wantUnclean)
		}
		prevWinner, prevReleased = winner, round%2 == 1 || !expires
		if prevReleased {
			winner.send(t, "release")
			if got := winner.recv(t); got != "released" {
				t.Fatalf("round %d: release: %s", round, got)
			}
		}
	}
	stopChildren(t, children)
}
