package lease

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Cross-process tests: the test binary re-executes itself as a child that
// runs TestLocalChild with these variables set, and takes commands, one a
// line, on its standard input:
//
//	acquire → "won <epoch> <unclean>" | "held <owner> <epoch>" | "err <text>"
//	release → "released" | "err <text>"
//
// It exits when its standard input closes.
const (
	envChildRoot  = "LEASE_LOCAL_CHILD_ROOT"
	envChildOwner = "LEASE_LOCAL_CHILD_OWNER"
	childKey      = "shared/job"
	childTimeout  = 60 * time.Second // a guard against a hung child, not a wait
)

// TestLocalChild is the child's side; in a normal run it does nothing.
func TestLocalChild(t *testing.T) {
	root := os.Getenv(envChildRoot)
	if root == "" {
		return // not a child: the parent tests below start children
	}
	ctx := context.Background()
	s, err := NewLocalStore(root, WithOwner(os.Getenv(envChildOwner)))
	if err != nil {
		fmt.Printf("err %v\n", err)
		os.Exit(1)
	}
	var g Grant
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "acquire":
			var err error
			g, err = s.Acquire(ctx, childKey)
			var he *HeldError
			switch {
			case errors.As(err, &he):
				fmt.Printf("held %s %d\n", he.Owner, he.Epoch)
			case err != nil:
				fmt.Printf("err %v\n", err)
			default:
				fmt.Printf("won %d %t\n", g.Epoch, g.PreviousUnclean)
			}
		case "release":
			if err := s.Release(ctx, g); err != nil {
				fmt.Printf("err %v\n", err)
			} else {
				fmt.Println("released")
			}
		}
	}
	os.Exit(0) // skip the test framework's own output on stdout
}

// child is a running child process.
type child struct {
	owner string
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   chan string
}

// startChild starts a child that leases in root as owner.
func startChild(t *testing.T, root, owner string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLocalChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChildRoot+"="+root, envChildOwner+"="+owner)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting child: %v", err)
	}
	c := &child{owner: owner, cmd: cmd, in: in, out: make(chan string, 16)}
	go func() {
		defer close(c.out)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.out <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		c.in.Close()
		c.cmd.Process.Kill()
		c.cmd.Wait()
	})
	return c
}

func (c *child) send(t *testing.T, cmd string) {
	t.Helper()
	if _, err := fmt.Fprintln(c.in, cmd); err != nil {
		t.Fatalf("child %s: %v", c.owner, err)
	}
}

func (c *child) reply(t *testing.T) string {
	t.Helper()
	select {
	case line, ok := <-c.out:
		if !ok {
			t.Fatalf("child %s exited", c.owner)
		}
		return line
	case <-time.After(childTimeout):
		t.Fatalf("child %s did not answer in %v", c.owner, childTimeout)
	}
	return ""
}

// TestLocalProcessRace: 8 processes race on one key for 5 rounds; each
// round exactly one wins, with the next epoch, and every loser's ErrHeld
// names the winner (R2, R5).
func TestLocalProcessRace(t *testing.T) {
	root := t.TempDir()
	var kids []*child
	for i := range 8 {
		kids = append(kids, startChild(t, root, fmt.Sprintf("proc-%d", i)))
	}
	for round := 1; round <= 5; round++ {
		for _, c := range kids {
			c.send(t, "acquire")
		}
		var winner *child
		replies := map[*child]string{}
		for _, c := range kids {
			r := c.reply(t)
			replies[c] = r
			if strings.HasPrefix(r, "won ") {
				if winner != nil {
					t.Fatalf("round %d: %s and %s both won", round, winner.owner, c.owner)
				}
				winner = c
			}
		}
		if winner == nil {
			t.Fatalf("round %d: nobody won: %v", round, replies)
		}
		if want := fmt.Sprintf("won %d false", round); replies[winner] != want {
			t.Fatalf("round %d: winner said %q; want %q", round, replies[winner], want)
		}
		wantHeld := fmt.Sprintf("held %s %d", winner.owner, round)
		for c, r := range replies {
			if c != winner && r != wantHeld {
				t.Fatalf("round %d: loser %s said %q; want %q", round, c.owner, r, wantHeld)
			}
		}
		winner.send(t, "release")
		if r := winner.reply(t); r != "released" {
			t.Fatalf("round %d: release: %q", round, r)
		}
	}
}

// TestLocalProcessKilled: a holder killed with SIGKILL frees the key at
// once; the next process gets epoch+1 with PreviousUnclean (R4f).
func TestLocalProcessKilled(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	c := startChild(t, root, "doomed")
	c.send(t, "acquire")
	if r := c.reply(t); r != "won 1 false" {
		t.Fatalf("child: %q; want won 1 false", r)
	}
	s := newLocal(t, root, WithOwner("next"))
	_, err := s.Acquire(ctx, childKey)
	wantHeld(t, err, "doomed", 1)
	if rec, err := s.Holder(ctx, childKey); err != nil || rec.Owner != "doomed" {
		t.Fatalf("Holder while the child lives = %+v, %v", rec, err)
	}

	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	c.cmd.Wait()
	if _, err := s.Holder(ctx, childKey); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Holder after SIGKILL = %v; want ErrNotFound", err)
	}
	g := mustAcquire(t, s, childKey)
	if g.Epoch != 2 || !g.PreviousUnclean {
		t.Fatalf("after SIGKILL: %+v; want epoch 2 with PreviousUnclean", g)
	}
}

// TestLocalNotInherited (R4f, R5): a child process started while a key is
// held does not inherit the lock's descriptors, so the key is free once
// its holder is gone even while the child lives.
func TestLocalNotInherited(t *testing.T) {
	root := t.TempDir()
	a := newLocal(t, root, WithOwner("parent"))
	mustAcquire(t, a, childKey)
	c := startChild(t, root, "bystander") // idles, holding whatever it inherited
	a.Close()                             // the parent's holder "crashes"
	b := newLocal(t, root, WithOwner("next"))
	g := mustAcquire(t, b, childKey)
	if g.Epoch != 2 || !g.PreviousUnclean {
		t.Fatalf("%+v; want epoch 2 unclean", g)
	}
	c.send(t, "acquire") // the child is alive and sees b as the holder
	if r := c.reply(t); r != "held next 2" {
		t.Fatalf("child: %q; want held next 2", r)
	}
}
