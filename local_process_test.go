//go:build unix

package lease

import (
	"context"
	"errors"
	"testing"
)

// TestLocalProcessKilled: a holder killed with SIGKILL frees the key at
// once; the next process gets epoch+1 with PreviousUnclean (R4f).
func TestLocalProcessKilled(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	c := startChild(t, "file:"+root, "doomed")
	c.send(t, "acquire")
	if r := c.recv(t); r != "ok 1 false" {
		t.Fatalf("child: %q; want ok 1 false", r)
	}
	s := newLocal(t, root, WithOwner("next"))
	_, err := s.Acquire(ctx, procKey)
	wantHeld(t, err, "doomed", 1)
	if rec, err := s.Holder(ctx, procKey); err != nil || rec.Owner != "doomed" {
		t.Fatalf("Holder while the child lives = %+v, %v", rec, err)
	}

	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	c.wait(t)
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
	c.send(t, "acquire") // the child is alive and sees b as the holder
	if r := c.recv(t); r != "held next 2" {
		t.Fatalf("child: %q; want held next 2", r)
	}
}
