//go:build unix

package lease

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestPostgresProcessRace_R5 runs the shared cross-process race on
// PostgreSQL: 8 separate OS processes (this test binary re-executed, each
// opening its store with Open and its own pool) create the table at once,
// then race for one key over 6 rounds, with takeovers after expiry:
// exactly one wins each round, the others get ErrHeld naming it, and
// epochs go 1, 2, 3... without repeats (R2).
func TestPostgresProcessRace_R5(t *testing.T) {
	processRace(t, postgresStoreURL(t, testPostgresTable(t)), true)
}

// TestPostgresProcessCrash: a process acquires and is killed with
// SIGKILL. Another store sees its grant, is refused until its expiry,
// then takes over with epoch+1 and PreviousUnclean (R2, R4e, R4f).
func TestPostgresProcessCrash(t *testing.T) {
	table := testPostgresTable(t)
	d, err := NewPostgresDriver(ctxBG, testPostgresDB(t), PostgresTable(table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	clock := newFakeClock()
	parent := newDocStore(t, d, clock, "parent")
	wantErr(t, "Release", parent.Release(ctxBG, mustAcquire(t, parent, procKey)), nil)

	victim := startChild(t, postgresStoreURL(t, table), "victim")
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

	taker := newDocStore(t, d, clock, "taker")
	expiry := clock.Now().Add(testTTL)
	clock.Set(expiry.Add(-time.Millisecond))
	_, err = taker.Acquire(ctxBG, procKey)
	var held *HeldError
	if !errors.As(err, &held) || held.Owner != "victim" || held.Epoch != 2 || !held.ExpiresAt.Equal(expiry) {
		t.Fatalf("Acquire before expiry = %v; want the dead victim's grant named, epoch 2, until %v", err, expiry)
	}
	clock.Set(expiry)
	g := mustAcquire(t, taker, procKey)
	if g.Epoch != 3 || !g.PreviousUnclean || g.Owner != "taker" {
		t.Fatalf("takeover = %+v; want taker at epoch 3 with PreviousUnclean", g)
	}
}
