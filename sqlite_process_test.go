//go:build unix

package lease

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// sqliteOpenChildEnv selects TestSQLiteOpenChild in a child process.
const sqliteOpenChildEnv = "LEASE_TEST_SQLITE_OPEN_CHILD"

// TestSQLiteOpenChild is the child of TestSQLiteConcurrentFirstOpen; run
// directly it does nothing. For each line "open <path>" on stdin it opens
// the file with OpenSQLite, writes one record of its own, and answers
// "RESULT ok" or "RESULT err <text>".
func TestSQLiteOpenChild(t *testing.T) {
	name := os.Getenv(sqliteOpenChildEnv)
	if name == "" {
		return
	}
	fmt.Println("RESULT ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		path, ok := strings.CutPrefix(sc.Text(), "open ")
		if !ok {
			t.Fatalf("unknown command %q", sc.Text())
		}
		if err := openAndWrite(path, name); err != nil {
			fmt.Printf("RESULT err %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		fmt.Println("RESULT ok")
	}
}

// openAndWrite opens path and inserts a record under the child's name.
func openAndWrite(path, name string) error {
	d, err := OpenSQLite(path)
	if err != nil {
		return err
	}
	defer d.Close()
	_, err = d.Put(context.Background(), Record{Key: name, Owner: name, Epoch: 1}, Precondition{Absent: true})
	return err
}

// TestSQLiteConcurrentFirstOpen: 8 processes open a fresh SQLite file at
// the same instant (workers started together on a new host), 20 rounds.
// Every open succeeds and all of them share one table with one schema
// version in WAL mode (R11: sqlite coordinates processes; issue 9 item 1).
func TestSQLiteConcurrentFirstOpen(t *testing.T) {
	const procs, rounds = 8, 20
	children := make([]*child, procs)
	for i := range children {
		children[i] = startOpenChild(t, fmt.Sprintf("opener-%d", i))
	}
	dir := t.TempDir()
	for round := range rounds {
		path := filepath.Join(dir, fmt.Sprintf("round%d.db", round))
		// Every child is blocked reading stdin: these lines are the barrier.
		for _, c := range children {
			c.send(t, "open "+path)
		}
		for _, c := range children {
			if got := c.recv(t); got != "ok" {
				t.Errorf("round %d: %s: %s", round, c.owner, got)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		db := rawSQLite(t, path)
		var tables, version, rows int
		var mode string
		if err := db.QueryRow("SELECT count(*) FROM sqlite_master WHERE type = 'table'").Scan(&tables); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow("SELECT count(*) FROM leases").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		db.QueryRow("PRAGMA user_version").Scan(&version)
		db.QueryRow("PRAGMA journal_mode").Scan(&mode)
		if tables != 1 || rows != procs || version != sqliteSchemaVersion || mode != "wal" {
			t.Fatalf("round %d: %d tables, %d rows, user_version %d, journal_mode %q; want 1, %d, %d, wal",
				round, tables, rows, version, mode, procs, sqliteSchemaVersion)
		}
		db.Close()
	}
	stopChildren(t, children)
}

// startOpenChild runs the test binary as TestSQLiteOpenChild.
func startOpenChild(t *testing.T, name string) *child {
	t.Helper()
	return startTestChild(t, "TestSQLiteOpenChild", name, sqliteOpenChildEnv+"="+name)
}
