package childproc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

const envEcho = "CHILDPROC_TEST_ECHO"

// TestEchoChild is the child: it answers every line with "RESULT echo
// LINE" until stdin ends. Run directly it does nothing.
func TestEchoChild(t *testing.T) {
	if os.Getenv(envEcho) == "" {
		return
	}
	fmt.Println("RESULT ready")
	fmt.Println("a line without the prefix, which the parent ignores")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		fmt.Printf("RESULT echo %s\n", sc.Text())
	}
	fmt.Fprintln(os.Stderr, "child done")
}

// TestStartSendRecvStop: a real child process answers in order, only its
// RESULT lines reach the parent, and it exits cleanly when stdin closes.
func TestStartSendRecvStop(t *testing.T) {
	a := Start(t, "TestEchoChild", "a", envEcho+"=1")
	b := Start(t, "TestEchoChild", "b", envEcho+"=1")
	a.Send(t, "one")
	a.Send(t, "two")
	b.Send(t, "three")
	for _, want := range []struct {
		c    *Child
		line string
	}{{a, "echo one"}, {a, "echo two"}, {b, "echo three"}} {
		if got := want.c.Recv(t); got != want.line {
			t.Fatalf("child %s answered %q; want %q", want.c.Name, got, want.line)
		}
	}
	StopAll(t, []*Child{a, b})
	// A run of a test binary prints its own lines to stderr too (e.g. the race
	// detector's); the child's own must be among them.
	if got := a.Stderr(); !strings.Contains(got, "child done") {
		t.Fatalf("stderr %q; want the child's own line", got)
	}
}

// TestKill: a killed child's Wait reports SIGKILL.
func TestKill(t *testing.T) {
	c := Start(t, "TestEchoChild", "victim", envEcho+"=1")
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := c.Wait(t); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("Wait after Kill = %v; want killed by SIGKILL", err)
	}
}
