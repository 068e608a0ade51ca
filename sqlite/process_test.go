//go:build unix

package sqlite

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

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/childproc"
	"github.com/leasekit/lease/internal/storechild"
	"github.com/leasekit/lease/internal/testclock"
	"github.com/leasekit/lease/internal/testkit"
)

// TestStoreChild is the store child's entry point (package childproc);
// run directly it does nothing.
func TestStoreChild(t *testing.T) { storechild.Serve(t) }

// TestSQLiteProcessRace_R5: 8 processes, each with its own store on one
// file, race for one key over 6 rounds, with takeovers after expiry
// (childproc.StoreRace); they also create the file and its table at once.
func TestSQLiteProcessRace_R5(t *testing.T) {
	childproc.StoreRace(t, "sqlite:"+filepath.Join(t.TempDir(), "leases.db"), true)
}

// TestSQLiteProcessCrash: a process acquires and is killed with SIGKILL,
// its write still in the WAL. Another process (this one, on a new handle)
// sees the grant, is refused until its expiry, then takes over with
// epoch+1 and PreviousUnclean (R2, R4e, R4f).
func TestSQLiteProcessCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	clock := testclock.New()
	{ // one clean grant first, so that the victim's epoch is 2
		d := openSQLiteAt(t, path)
		s := testkit.NewDocStore(t, d, clock, "parent")
		testkit.WantErr(t, "Release", s.Release(ctxBG, testkit.MustAcquire(t, s, childproc.StoreKey)), nil)
		testkit.WantErr(t, "Close", d.Close(), nil)
	}
	victim := childproc.StartStore(t, "sqlite:"+path, "victim")
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

	d := openSQLiteAt(t, path)
	s := testkit.NewDocStore(t, d, clock, "taker")
	expiry := clock.Now().Add(testkit.TTL)
	clock.Set(expiry.Add(-time.Millisecond))
	_, err := s.Acquire(ctxBG, childproc.StoreKey)
	var held *lease.HeldError
	if !errors.As(err, &held) || held.Owner != "victim" || held.Epoch != 2 || !held.ExpiresAt.Equal(expiry) {
		t.Fatalf("Acquire before expiry = %v; want the dead victim's grant named, epoch 2, until %v", err, expiry)
	}
	clock.Set(expiry)
	g := testkit.MustAcquire(t, s, childproc.StoreKey)
	if g.Epoch != 3 || !g.PreviousUnclean || g.Owner != "taker" {
		t.Fatalf("takeover = %+v; want taker at epoch 3 with PreviousUnclean", g)
	}
}

// sqliteOpenChildEnv selects TestSQLiteOpenChild in a child process.
const sqliteOpenChildEnv = "LEASE_TEST_SQLITE_OPEN_CHILD"

// TestSQLiteOpenChild is the child of TestSQLiteConcurrentFirstOpen; run
// directly it does nothing. For each line "open <path>" on stdin it opens
// the file with Open, writes one record of its own, and answers
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
	d, err := Open(path)
	if err != nil {
		return err
	}
	defer d.Close()
	_, err = d.Put(context.Background(), lease.Record{Key: name, Owner: name, Epoch: 1}, lease.Precondition{Absent: true})
	return err
}

// TestSQLiteConcurrentFirstOpen: 8 processes open a fresh SQLite file at
// the same instant (workers started together on a new host), 20 rounds.
// Every open succeeds and all of them share one schema (both tables and
// the index) of one version in WAL mode (R11: sqlite coordinates
// processes; issue 9 item 1).
func TestSQLiteConcurrentFirstOpen(t *testing.T) {
	const procs, rounds = 8, 20
	children := make([]*childproc.Child, procs)
	for i := range children {
		children[i] = startOpenChild(t, fmt.Sprintf("opener-%d", i))
	}
	dir := t.TempDir()
	for round := range rounds {
		path := filepath.Join(dir, fmt.Sprintf("round%d.db", round))
		// Every child is blocked reading stdin: these lines are the barrier.
		for _, c := range children {
			c.Send(t, "open "+path)
		}
		for _, c := range children {
			if got := c.Recv(t); got != "ok" {
				t.Errorf("round %d: %s: %s", round, c.Name, got)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		db := rawSQLite(t, path)
		var tables, version, rows int
		var mode string
		if err := db.QueryRow("SELECT count(*) FROM sqlite_master WHERE type IN ('table', 'index')").Scan(&tables); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow("SELECT count(*) FROM leases").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		db.QueryRow("PRAGMA user_version").Scan(&version)
		db.QueryRow("PRAGMA journal_mode").Scan(&mode)
		if tables != 3 || rows != procs || version != sqliteSchemaVersion || mode != "wal" {
			t.Fatalf("round %d: %d tables and indexes, %d rows, user_version %d, journal_mode %q; want 3 (leases, lease_sessions, leases_session), %d, %d, wal",
				round, tables, rows, version, mode, procs, sqliteSchemaVersion)
		}
		db.Close()
	}
	childproc.StopAll(t, children)
}

// startOpenChild runs the test binary as TestSQLiteOpenChild.
func startOpenChild(t *testing.T, name string) *childproc.Child {
	t.Helper()
	return childproc.Start(t, "TestSQLiteOpenChild", name, sqliteOpenChildEnv+"="+name)
}

// TestSQLiteNodesHoldEach: two processes start HoldEach over the same
// 2,000 keys on one file at the same instant; every key ends with one
// holder, none lost, none shared, and a ReleaseAll hands one node's keys
// to the other (storechild.NodesRace; issue 19).
func TestSQLiteNodesHoldEach(t *testing.T) {
	storechild.NodesRace(t, "sqlite:"+filepath.Join(t.TempDir(), "leases.db"))
}
