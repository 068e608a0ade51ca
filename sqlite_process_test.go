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
	"syscall"
	"testing"
	"time"
)

// The tests in this file run real OS processes: the test binary runs itself
// again as a child, selected by the environment variable below, with its
// own handle on one SQLite file. A child reads commands on stdin and
// answers each with one "RESULT ..." line on stdout:
//
//	acquire <unix ms>   set the child's clock, Acquire("race")
//	                    → "RESULT ok <epoch> <previous unclean>"
//	                    | "RESULT held <owner> <epoch>" | "RESULT err <text>"
//	release             release the last grant → "RESULT released" | "RESULT err <text>"
//
// Stdin reaching EOF closes the store and ends the child.
const (
	childEnvDB    = "LEASE_SQLITE_CHILD_DB"
	childEnvOwner = "LEASE_SQLITE_CHILD_OWNER"
	raceKey       = "race"
)

// TestSQLiteChild is the child's entry point; run directly it does nothing.
func TestSQLiteChild(t *testing.T) {
	path := os.Getenv(childEnvDB)
	if path == "" {
		return // not a child: the parents are the tests below
	}
	if err := runSQLiteChild(path, os.Getenv(childEnvOwner), os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

func runSQLiteChild(path, owner string, in io.Reader, out io.Writer) error {
	clock := newFakeClock()
	s, err := Open(ctxBG, "sqlite:"+path, WithOwner(owner), WithClock(clock.Now), WithTTL(testTTL))
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
			ms, err := strconv.ParseInt(arg, 10, 64)
			if err != nil {
				return err
			}
			clock.Set(time.UnixMilli(ms).UTC())
			g, err := s.Acquire(ctxBG, raceKey)
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

// startChild runs the test binary as a child on the database at path.
func startChild(t *testing.T, path, owner string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSQLiteChild$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), childEnvDB+"="+path, childEnvOwner+"="+owner)
	c := &child{owner: owner, cmd: cmd, results: make(chan string, 16), exited: make(chan error, 1), stderr: new(bytes.Buffer)}
	cmd.Stderr = c.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting child %s: %v", owner, err)
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

// TestSQLiteProcessesRace: 8 processes, each with its own handle on one
// file, race for one key over 6 rounds (R5). Exactly one wins each round;
// every loser's ErrHeld names the winner; epochs go 1, 2, 3, ... (R2).
// Odd rounds end with the winner releasing; even rounds end with the winner
// holding on, and the next round runs past its expiry, so that the next
// winner takes over (R4f, PreviousUnclean) unless it is the same process
// (R4d). The processes also create the file and its table at once.
func TestSQLiteProcessesRace(t *testing.T) {
	const procs, rounds = 8, 6
	path := filepath.Join(t.TempDir(), "leases.db")
	children := make([]*child, procs)
	for i := range children {
		children[i] = startChild(t, path, fmt.Sprintf("proc-%d", i))
	}
	for _, c := range children {
		if got := c.recv(t); got != "ready" {
			t.Fatalf("child %s: %s", c.owner, got)
		}
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
		prevWinner, prevReleased = winner, round%2 == 1
		if prevReleased {
			winner.send(t, "release")
			if got := winner.recv(t); got != "released" {
				t.Fatalf("round %d: release: %s", round, got)
			}
		}
	}
	stopChildren(t, children)
	rec, _, err := openSQLiteAt(t, path).Get(ctxBG, raceKey)
	if err != nil || rec.Epoch != rounds || rec.Owner != prevWinner.owner {
		t.Fatalf("final row = %+v, %v; want %s at epoch %d", rec, err, prevWinner.owner, rounds)
	}
}

// TestSQLiteProcessCrash: a process acquires and is killed with SIGKILL,
// its write still in the WAL. Another process (this one, on a new handle)
// sees the grant, is refused until its expiry, then takes over with
// epoch+1 and PreviousUnclean (R2, R4e, R4f).
func TestSQLiteProcessCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	clock := newFakeClock()
	{ // one clean grant first, so that the victim's epoch is 2
		d := openSQLiteAt(t, path)
		s := newDocStore(t, d, clock, "parent")
		wantErr(t, "Release", s.Release(ctxBG, mustAcquire(t, s, raceKey)), nil)
		wantErr(t, "Close", d.Close(), nil)
	}
	victim := startChild(t, path, "victim")
	if got := victim.recv(t); got != "ready" {
		t.Fatalf("victim: %s", got)
	}
	victim.send(t, fmt.Sprintf("acquire %d", clock.Now().UnixMilli()))
	if got := victim.recv(t); got != "ok 2 false" {
		t.Fatalf("victim's acquire: %s; want ok 2 false", got)
	}
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := victim.wait(t); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("victim ended with %v; want killed by SIGKILL", err)
	}

	d := openSQLiteAt(t, path)
	s := newDocStore(t, d, clock, "taker")
	expiry := clock.Now().Add(testTTL)
	clock.Set(expiry.Add(-time.Millisecond))
	_, err := s.Acquire(ctxBG, raceKey)
	var held *HeldError
	if !errors.As(err, &held) || held.Owner != "victim" || held.Epoch != 2 || !held.ExpiresAt.Equal(expiry) {
		t.Fatalf("Acquire before expiry = %v; want the dead victim's grant named, epoch 2, until %v", err, expiry)
	}
	clock.Set(expiry)
	g := mustAcquire(t, s, raceKey)
	if g.Epoch != 3 || !g.PreviousUnclean || g.Owner != "taker" {
		t.Fatalf("takeover = %+v; want taker at epoch 3 with PreviousUnclean", g)
	}
}
