//go:build unix

package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/pgserver"
	"github.com/leasekit/lease/internal/testclock"
	"github.com/leasekit/lease/internal/testkit"

	"github.com/jackc/pgx/v5"
)

// fenceTx is a transaction that a test fences, through database/sql
// (Fence) or through pgx (FencePgx).
type fenceTx struct {
	fence    func(g lease.Grant, opts ...Option) error
	exec     func(query string, args ...any) error
	commit   func() error
	rollback func()
	pid      int // the server process running it
}

// fenceAPIs are the two ways to fence, each beginning a transaction on the
// shared server.
var fenceAPIs = []struct {
	name  string
	begin func(t *testing.T) *fenceTx
}{{"sql", beginSQLFenceTx}, {"pgx", beginPgxFenceTx}}

func beginSQLFenceTx(t *testing.T) *fenceTx {
	t.Helper()
	tx, err := pgserver.SharedDB(t).BeginTx(ctxBG, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	f := &fenceTx{
		fence:    func(g lease.Grant, opts ...Option) error { return Fence(ctxBG, tx, g, opts...) },
		exec:     func(q string, args ...any) error { _, err := tx.ExecContext(ctxBG, q, args...); return err },
		commit:   tx.Commit,
		rollback: func() { tx.Rollback() },
	}
	if err := tx.QueryRowContext(ctxBG, `SELECT pg_backend_pid()`).Scan(&f.pid); err != nil {
		t.Fatal(err)
	}
	return f
}

func beginPgxFenceTx(t *testing.T) *fenceTx {
	t.Helper()
	conn, err := pgx.Connect(ctxBG, pgserver.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctxBG) })
	tx, err := conn.Begin(ctxBG)
	if err != nil {
		t.Fatal(err)
	}
	f := &fenceTx{
		fence:    func(g lease.Grant, opts ...Option) error { return FencePgx(ctxBG, tx, g, opts...) },
		exec:     func(q string, args ...any) error { _, err := tx.Exec(ctxBG, q, args...); return err },
		commit:   func() error { return tx.Commit(ctxBG) },
		rollback: func() { tx.Rollback(ctxBG) },
	}
	if err := tx.QueryRow(ctxBG, `SELECT pg_backend_pid()`).Scan(&f.pid); err != nil {
		t.Fatal(err)
	}
	return f
}

// fenceRig is a lease table with a table of protected writes beside it,
// a holder store on this host's clock (as Fence judges it) and a taker
// store whose clock is two hours ahead: the holder's one-hour grant is
// live for the holder and expired for the taker, as for a holder paused
// or a host whose clock runs ahead.
type fenceRig struct {
	d             *postgresDriver
	writes        string // the protected table: key, epoch, note
	holder, taker *lease.DocumentStore
}

func newFenceRig(t *testing.T) *fenceRig {
	t.Helper()
	r := &fenceRig{d: newTestPostgresDriver(t)}
	r.writes = r.d.table + "_writes"
	pgExec(t, `CREATE TABLE `+r.writes+` (key text, epoch bigint, note text)`)
	t.Cleanup(func() { pgserver.SharedDB(t).Exec(`DROP TABLE IF EXISTS ` + r.writes) })
	var err error
	if r.holder, err = lease.NewDocumentStore(r.d, lease.WithOwner("holder"), lease.WithTTL(time.Hour)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.holder.Close() })
	ahead := testclock.New()
	ahead.Set(time.Now().Add(2 * time.Hour))
	if r.taker, err = lease.NewDocumentStore(r.d, lease.WithOwner("taker"), lease.WithClock(ahead.Now), lease.WithTTL(time.Hour)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.taker.Close() })
	return r
}

// write inserts a protected row in tx.
func (r *fenceRig) write(t *testing.T, tx *fenceTx, g lease.Grant, note string) {
	t.Helper()
	if err := tx.exec(`INSERT INTO `+r.writes+` VALUES ($1, $2, $3)`, g.Key, int64(g.Epoch), note); err != nil {
		t.Fatal(err)
	}
}

// count is how many protected rows carry note.
func (r *fenceRig) count(t *testing.T, note string) int {
	t.Helper()
	var n int
	if err := pgserver.SharedDB(t).QueryRow(`SELECT count(*) FROM `+r.writes+` WHERE note = $1`, note).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// wantFenceLost fails the test unless err matches ErrLost, is no storage
// error, reads as one line with one "lease:" prefix, names the grant's
// key and epoch once, and says why (contains why).
func wantFenceLost(t *testing.T, err error, g lease.Grant, why string) {
	t.Helper()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	keyEpoch := `"` + g.Key + `" epoch ` + itoa(g.Epoch)
	if !errors.Is(err, lease.ErrLost) || errors.Is(err, lease.ErrStorage) || strings.Count(msg, "lease:") != 1 ||
		strings.Count(msg, keyEpoch) != 1 || strings.Contains(msg, "\n") || !strings.Contains(msg, why) {
		t.Fatalf("Fence = %v; want one line matching ErrLost, naming %s once, saying %q", err, keyEpoch, why)
	}
}

// TestFencePausedHolderWritesNothing (R6, R8): a holder whose renewals
// stopped (a bare Acquire, never renewed) while another store took its key
// fences a transaction when it wakes: Fence fails with ErrLost naming the
// new holder, and the rolled-back transaction leaves nothing. Before the
// takeover the same holder's fenced write commits.
func TestFencePausedHolderWritesNothing(t *testing.T) {
	for _, api := range fenceAPIs {
		t.Run(api.name, func(t *testing.T) {
			r := newFenceRig(t)
			g := testkit.MustAcquire(t, r.holder, "profile/1")
			tx := api.begin(t)
			if err := tx.fence(g, Table(r.d.table)); err != nil {
				t.Fatalf("Fence of a live grant = %v", err)
			}
			r.write(t, tx, g, "live")
			if err := tx.commit(); err != nil {
				t.Fatal(err)
			}

			g2 := testkit.MustAcquire(t, r.taker, "profile/1")
			if g2.Epoch != g.Epoch+1 || !g2.PreviousUnclean {
				t.Fatalf("takeover = %+v; want epoch %d with PreviousUnclean", g2, g.Epoch+1)
			}
			late := api.begin(t)
			r.write(t, late, g, "late")
			wantFenceLost(t, late.fence(g, Table(r.d.table)), g, `names "taker" at epoch 2`)
			late.rollback()
			if n, m := r.count(t, "live"), r.count(t, "late"); n != 1 || m != 0 {
				t.Fatalf("%d live and %d late rows committed; want 1 and 0", n, m)
			}
		})
	}
}

// TestFenceRefuses: Fence fails with ErrLost for a grant that is expired
// by this host's clock though nobody took it (R6), released (R7), or of a
// key with no record; with a *lease.StorageError when the statement fails
// (no such table); and with a plain error for bad input (no transaction, a
// zero grant, a table name that is no identifier, MaxConns), touching
// nothing.
func TestFenceRefuses(t *testing.T) {
	r := newFenceRig(t)
	past := testclock.New()
	past.Set(time.Now().Add(-2 * time.Hour))
	stale, err := lease.NewDocumentStore(r.d, lease.WithOwner("stale"), lease.WithClock(past.Now), lease.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	expired := testkit.MustAcquire(t, stale, "expired")
	released := testkit.MustAcquire(t, r.holder, "released")
	testkit.WantErr(t, "Release", r.holder.Release(ctxBG, released), nil)
	live := testkit.MustAcquire(t, r.holder, "live")

	for _, api := range fenceAPIs {
		t.Run(api.name, func(t *testing.T) {
			fence := func(g lease.Grant, opts ...Option) error {
				tx := api.begin(t)
				defer tx.rollback()
				return tx.fence(g, opts...)
			}
			table := Table(r.d.table)
			wantFenceLost(t, fence(expired, table), expired, "expired at")
			wantFenceLost(t, fence(released, table), released, "released")
			nobody := lease.Grant{Key: "nobody", Owner: "holder", Epoch: 1}
			wantFenceLost(t, fence(nobody, table), nobody, "no record")
			testkit.WantStorageErr(t, "Fence on a missing table", fence(live, Table(r.d.table+"_missing")))
			for name, err := range map[string]error{
				"zero grant": fence(lease.Grant{}, table),
				"no owner":   fence(lease.Grant{Key: "live", Epoch: 1}, table),
				"bad table":  fence(live, Table("Leases; DROP")),
				"MaxConns":   fence(live, table, MaxConns(2)),
			} {
				if err == nil || errors.Is(err, lease.ErrLost) || errors.Is(err, lease.ErrStorage) || strings.Count(err.Error(), "lease:") != 1 {
					t.Errorf("Fence with %s = %v; want a one-line error of its own", name, err)
				}
			}
			if err := fence(live, table); err != nil {
				t.Fatalf("Fence of the live grant = %v", err)
			}
		})
	}
	if err := Fence(ctxBG, nil, live); err == nil {
		t.Error("Fence with a nil *sql.Tx succeeded")
	}
	if err := FencePgx(ctxBG, nil, live); err == nil {
		t.Error("FencePgx with a nil pgx.Tx succeeded")
	}
}

// takeover is the outcome of an acquire run in a goroutine.
type takeover struct {
	g   lease.Grant
	err error
}

// TestFenceHoldsOffTakeover (R4f, R5): while a fenced transaction is open,
// a store whose clock says the grant expired tries to take the key: its
// write waits on the fenced transaction (the server shows the takeover's
// backend blocked by the fenced one) and has not returned; once the fenced
// transaction commits, the takeover lands with epoch + 1 and
// PreviousUnclean, and the protected write is there for the new holder.
// Two fenced transactions of one grant do not wait for each other (FOR
// SHARE is a shared lock).
func TestFenceHoldsOffTakeover(t *testing.T) {
	for _, api := range fenceAPIs {
		t.Run(api.name, func(t *testing.T) {
			r := newFenceRig(t)
			g := testkit.MustAcquire(t, r.holder, "profile/7")
			tx := api.begin(t)
			if err := tx.fence(g, Table(r.d.table)); err != nil {
				t.Fatalf("Fence = %v", err)
			}
			r.write(t, tx, g, "fenced")
			other := api.begin(t)
			if err := other.fence(g, Table(r.d.table)); err != nil {
				t.Fatalf("a second fenced transaction of the grant: Fence = %v", err)
			}
			other.rollback()

			done := make(chan takeover, 1)
			go func() {
				g, err := r.taker.Acquire(ctxBG, "profile/7")
				done <- takeover{g, err}
			}()
			waitBlockedBy(t, tx.pid, done)
			if err := tx.commit(); err != nil {
				t.Fatal(err)
			}
			got := <-done
			if got.err != nil || got.g.Epoch != g.Epoch+1 || !got.g.PreviousUnclean || got.g.Owner != "taker" {
				t.Fatalf("takeover after the commit = %+v, %v; want taker at epoch %d with PreviousUnclean", got.g, got.err, g.Epoch+1)
			}
			if n := r.count(t, "fenced"); n != 1 {
				t.Fatalf("the new holder sees %d fenced writes; want 1", n)
			}
		})
	}
}

// waitBlockedBy waits until the server shows a backend waiting for a lock
// that backend pid holds, failing the test if the takeover returns first.
// Each look is a round trip: no sleep paces it.
func waitBlockedBy(t *testing.T, pid int, done <-chan takeover) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxBG, time.Minute) // a guard against a hang, not a wait
	defer cancel()
	for {
		select {
		case got := <-done:
			t.Fatalf("the takeover returned (%+v, %v) while the fenced transaction was open; want it to wait", got.g, got.err)
		default:
		}
		var n int
		err := pgserver.SharedDB(t).QueryRowContext(ctx,
			`SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, pid).Scan(&n)
		if err != nil {
			t.Fatalf("looking for the blocked takeover: %v", err)
		}
		if n > 0 {
			return
		}
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
