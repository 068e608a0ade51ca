//go:build unix

package lease

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

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
		wantErr(t, "Release", s.Release(ctxBG, mustAcquire(t, s, procKey)), nil)
		wantErr(t, "Close", d.Close(), nil)
	}
	victim := startChild(t, "sqlite:"+path, "victim")
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
	_, err := s.Acquire(ctxBG, procKey)
	var held *HeldError
	if !errors.As(err, &held) || held.Owner != "victim" || held.Epoch != 2 || !held.ExpiresAt.Equal(expiry) {
		t.Fatalf("Acquire before expiry = %v; want the dead victim's grant named, epoch 2, until %v", err, expiry)
	}
	clock.Set(expiry)
	g := mustAcquire(t, s, procKey)
	if g.Epoch != 3 || !g.PreviousUnclean || g.Owner != "taker" {
		t.Fatalf("takeover = %+v; want taker at epoch 3 with PreviousUnclean", g)
	}
}
