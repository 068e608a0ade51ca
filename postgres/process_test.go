//go:build unix

package postgres

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/childproc"
	"github.com/leasekit/lease/internal/pgserver"
	"github.com/leasekit/lease/internal/storechild"
	"github.com/leasekit/lease/internal/testclock"
	"github.com/leasekit/lease/internal/testkit"
)

// TestPostgresProcessRace_R5 runs the shared cross-process race on
// PostgreSQL: 8 separate OS processes (this test binary re-executed, each
// opening its store with Open and its own pool) create the table at once,
// then race for one key over 6 rounds, with takeovers after expiry:
// exactly one wins each round, the others get ErrHeld naming it, and
// epochs go 1, 2, 3... without repeats (R2).
func TestPostgresProcessRace_R5(t *testing.T) {
	childproc.StoreRace(t, postgresStoreURL(t, pgserver.FreshTable(t)), true)
}

// TestPostgresProcessCrash: a process acquires and is killed with
// SIGKILL. Another store sees its grant, is refused until its expiry,
// then takes over with epoch+1 and PreviousUnclean (R2, R4e, R4f).
func TestPostgresProcessCrash(t *testing.T) {
	table := pgserver.FreshTable(t)
	d, err := NewDriver(ctxBG, pgserver.SharedDB(t), Table(table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	clock := testclock.New()
	parent := testkit.NewDocStore(t, d, clock, "parent")
	testkit.WantErr(t, "Release", parent.Release(ctxBG, testkit.MustAcquire(t, parent, childproc.StoreKey)), nil)

	victim := childproc.StartStore(t, postgresStoreURL(t, table), "victim")
	victim.Send(t, fmt.Sprintf("acquire %d", clock.Now().UnixMilli()))
	if got := victim.Recv(t); got != "ok 2 false" {
		t.Fatalf("victim's acquire: %s; want ok 2 false", got)
	}
	if err := victim.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := victim.Wait(t); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("victim ended with %v; want killed by SIGKILL", err)
	}

	taker := testkit.NewDocStore(t, d, clock, "taker")
	expiry := clock.Now().Add(testkit.TTL)
	clock.Set(expiry.Add(-time.Millisecond))
	_, err = taker.Acquire(ctxBG, childproc.StoreKey)
	var held *lease.HeldError
	if !errors.As(err, &held) || held.Owner != "victim" || held.Epoch != 2 || !held.ExpiresAt.Equal(expiry) {
		t.Fatalf("Acquire before expiry = %v; want the dead victim's grant named, epoch 2, until %v", err, expiry)
	}
	clock.Set(expiry)
	g := testkit.MustAcquire(t, taker, childproc.StoreKey)
	if g.Epoch != 3 || !g.PreviousUnclean || g.Owner != "taker" {
		t.Fatalf("takeover = %+v; want taker at epoch 3 with PreviousUnclean", g)
	}
}

// TestPostgresNodesHoldEach: two processes, each with its own pool, start
// HoldEach over the same 2,000 keys on one table at the same instant;
// every key ends with one holder, none lost, none shared, and a
// ReleaseAll hands one node's keys to the other (storechild.NodesRace;
// issue 19).
func TestPostgresNodesHoldEach(t *testing.T) {
	storechild.NodesRace(t, postgresStoreURL(t, pgserver.FreshTable(t)))
}
