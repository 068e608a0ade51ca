//go:build unix

package lease

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/leasekit/lease/internal/childproc"
)

// TestLocalProcessKilled: a holder killed with SIGKILL frees the key at
// once; the next process gets epoch+1 with PreviousUnclean (R4f).
func TestLocalProcessKilled(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	c := startChild(t, "file:"+root, "doomed")
	c.Send(t, "acquire")
	if r := c.Recv(t); r != "ok 1 false" {
		t.Fatalf("child: %q; want ok 1 false", r)
	}
	s := newLocal(t, root, WithOwner("next"))
	_, err := s.Acquire(ctx, procKey)
	wantHeld(t, err, "doomed", 1)
	if rec, err := s.Holder(ctx, procKey); err != nil || rec.Owner != "doomed" {
		t.Fatalf("Holder while the child lives = %+v, %v", rec, err)
	}

	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	c.Wait(t)
	if _, err := s.Holder(ctx, procKey); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Holder after SIGKILL = %v; want ErrNotFound", err)
	}
	g := mustAcquire(t, s, procKey)
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
	mustAcquire(t, a, procKey)
	c := startChild(t, "file:"+root, "bystander") // idles, holding whatever it inherited
	a.Close()                                     // the parent's holder "crashes"
	b := newLocal(t, root, WithOwner("next"))
	g := mustAcquire(t, b, procKey)
	if g.Epoch != 2 || !g.PreviousUnclean {
		t.Fatalf("%+v; want epoch 2 unclean", g)
	}
	c.Send(t, "acquire") // the child is alive and sees b as the holder
	if r := c.Recv(t); r != "held next 2" {
		t.Fatalf("child: %q; want held next 2", r)
	}
}

// A local child is the test binary run again as a plain process for the
// tests below, which need what the store child (package childproc) cannot do:
// open a store only when told (so that many processes open at once), or
// run with a low descriptor limit. It reads commands on stdin and answers
// each with one "RESULT ..." line:
//
//	open ROOT        NewLocalStore(ROOT) and Close → "RESULT ok" | "RESULT err <text>"
//	emfile ROOT      lower the descriptor limit, then acquire keys on ROOT
//	                 until one fails → "RESULT err <emfile?> <text>"
//	readonly ROOT    open a store on ROOT, lose the right to write there,
//	                 then Acquire and Hold a new key → "RESULT <acquire's
//	                 error>\t<Hold's error>" (see acquireInReadOnlyRoot)
const childEnvLocal = "LEASE_TEST_LOCAL_CHILD"

// TestLocalChild is the local child's entry point; run directly it does nothing.
func TestLocalChild(t *testing.T) {
	if os.Getenv(childEnvLocal) == "" {
		return
	}
	fmt.Println("RESULT ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "open":
			s, err := NewLocalStore(arg, WithOwner(os.Getenv(childEnvLocal)))
			if err == nil {
				err = s.Close()
			}
			if err != nil {
				fmt.Printf("RESULT err %v\n", err)
			} else {
				fmt.Println("RESULT ok")
			}
		case "emfile":
			fmt.Printf("RESULT %s\n", acquireUntilNoDescriptors(arg))
		case "readonly":
			fmt.Printf("RESULT %s\n", acquireInReadOnlyRoot(arg))
		default:
			t.Fatalf("unknown command %q", sc.Text())
		}
	}
}

// acquireUntilNoDescriptors lowers this process's descriptor limit a
// little above what it has open, then acquires keys until one fails, and
// says how the failure reads.
func acquireUntilNoDescriptors(root string) string {
	s, err := NewLocalStore(root, WithOwner("hoarder"))
	if err != nil {
		return "err " + err.Error()
	}
	defer s.Close()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return "err " + err.Error()
	}
	lim := syscall.Rlimit{Cur: uint64(len(ents) + 16), Max: uint64(len(ents) + 16)}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		return "err " + err.Error()
	}
	lim.Max = old.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return "err " + err.Error()
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	for i := range 1000 {
		if _, err := s.Acquire(ctxBG, fmt.Sprintf("k%d", i)); err != nil {
			return fmt.Sprintf("err %v %v", errors.Is(err, syscall.EMFILE), err)
		}
	}
	return "ok: 1000 keys held under a limit of " + strconv.FormatUint(lim.Cur, 10)
}

// startLocalChild runs a local child named name.
func startLocalChild(t *testing.T, name string) *child {
	t.Helper()
	return childproc.Start(t, "TestLocalChild", name, childEnvLocal+"="+name)
}

// TestLocalProcessesOpenFreshRoot: 8 processes opening stores at the same
// instant on a root that does not exist yet all succeed, 20 rounds over.
func TestLocalProcessesOpenFreshRoot(t *testing.T) {
	children := make([]*child, 8)
	for i := range children {
		children[i] = startLocalChild(t, fmt.Sprintf("opener-%d", i))
	}
	dir := t.TempDir()
	for round := range 20 {
		root := filepath.Join(dir, fmt.Sprintf("fresh-%d", round))
		for _, c := range children { // each child is blocked reading stdin: this is the barrier
			c.Send(t, "open "+root)
		}
		for _, c := range children {
			if got := c.Recv(t); got != "ok" {
				t.Fatalf("round %d: %s: %s; want every open to succeed", round, c.Name, got)
			}
		}
	}
	childproc.StopAll(t, children)
}

// TestLocalOutOfDescriptors: running out of descriptors while acquiring
// (each held key keeps one open) is an error that says so, names the key
// and matches syscall.EMFILE, so that Hold does not retry it as a passing
// storage failure.
func TestLocalOutOfDescriptors(t *testing.T) {
	c := startLocalChild(t, "hoarder")
	c.Send(t, "emfile "+t.TempDir())
	got := c.Recv(t)
	if !strings.HasPrefix(got, "err true ") || !strings.Contains(got, "too many open files: raise the descriptor limit") ||
		!strings.Contains(got, `acquire "k`) {
		t.Fatalf("acquiring past the descriptor limit: %s; want an error matching EMFILE that names the key and says to raise the limit", got)
	}
	childproc.StopAll(t, []*child{c})
}
