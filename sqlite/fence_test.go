package sqlite

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testclock"
	"github.com/leasekit/lease/internal/testkit"
)

// sqliteFenceRig is a lease file with a table of protected writes in it,
// a holder store on this host's clock (as Fence judges it), a taker store
// whose clock is two hours ahead (the holder's one-hour grant is live for
// the holder and expired for the taker, as for a holder paused), and a
// pool of the application's own on the file.
type sqliteFenceRig struct {
	path          string
	app           *sql.DB
	holder, taker *lease.DocumentStore
}

func newSQLiteFenceRig(t *testing.T, takerBusy time.Duration) *sqliteFenceRig {
	t.Helper()
	r := &sqliteFenceRig{path: filepath.Join(t.TempDir(), "leases.db")}
	d := openSQLiteAt(t, r.path)
	r.app = rawSQLite(t, r.path)
	mustExec(t, r.app, `CREATE TABLE writes (key TEXT, epoch INTEGER, note TEXT)`)
	var err error
	if r.holder, err = lease.NewDocumentStore(d, lease.WithOwner("holder"), lease.WithTTL(time.Hour)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.holder.Close() })
	td, err := openSQLite(r.path, takerBusy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { td.Close() })
	ahead := testclock.New()
	ahead.Set(time.Now().Add(2 * time.Hour))
	if r.taker, err = lease.NewDocumentStore(td, lease.WithOwner("taker"), lease.WithClock(ahead.Now), lease.WithTTL(time.Hour)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.taker.Close() })
	return r
}

func (r *sqliteFenceRig) begin(t *testing.T) *sql.Tx {
	t.Helper()
	tx, err := r.app.Begin() // deferred: Fence makes it a writer
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	return tx
}

func (r *sqliteFenceRig) write(t *testing.T, tx *sql.Tx, g lease.Grant, note string) {
	t.Helper()
	if _, err := tx.Exec(`INSERT INTO writes VALUES (?, ?, ?)`, g.Key, int64(g.Epoch), note); err != nil {
		t.Fatal(err)
	}
}

func (r *sqliteFenceRig) count(t *testing.T, note string) int {
	t.Helper()
	var n int
	if err := r.app.QueryRow(`SELECT count(*) FROM writes WHERE note = ?`, note).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// wantSQLiteFenceLost fails the test unless err matches ErrLost, is no
// storage error, reads as one line with one "lease:" prefix, names the
// grant's key and epoch once, and contains why.
func wantSQLiteFenceLost(t *testing.T, err error, g lease.Grant, why string) {
	t.Helper()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	keyEpoch := `"` + g.Key + `" epoch ` + strconv.FormatUint(g.Epoch, 10)
	if !errors.Is(err, lease.ErrLost) || errors.Is(err, lease.ErrStorage) || strings.Count(msg, "lease:") != 1 ||
		strings.Count(msg, keyEpoch) != 1 || strings.Contains(msg, "\n") || !strings.Contains(msg, why) {
		t.Fatalf("Fence = %v; want one line matching ErrLost, naming %s once, saying %q", err, keyEpoch, why)
	}
}

// TestSQLiteFencePausedHolderWritesNothing (R6, R8): a holder whose
// renewals stopped while another store took its key fences a transaction
// when it wakes: Fence fails with ErrLost naming the new holder, and the
// rolled-back transaction leaves nothing. Before the takeover, the same
// holder's fenced write commits.
func TestSQLiteFencePausedHolderWritesNothing(t *testing.T) {
	r := newSQLiteFenceRig(t, sqliteBusyTimeout)
	g := testkit.MustAcquire(t, r.holder, "profile/1")
	tx := r.begin(t)
	if err := Fence(ctxBG, tx, g); err != nil {
		t.Fatalf("Fence of a live grant = %v", err)
	}
	r.write(t, tx, g, "live")
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	g2 := testkit.MustAcquire(t, r.taker, "profile/1")
	if g2.Epoch != g.Epoch+1 || !g2.PreviousUnclean {
		t.Fatalf("takeover = %+v; want epoch %d with PreviousUnclean", g2, g.Epoch+1)
	}
	late := r.begin(t)
	r.write(t, late, g, "late")
	wantSQLiteFenceLost(t, Fence(ctxBG, late, g), g, `names "taker" at epoch 2`)
	late.Rollback()
	if n, m := r.count(t, "live"), r.count(t, "late"); n != 1 || m != 0 {
		t.Fatalf("%d live and %d late rows committed; want 1 and 0", n, m)
	}
}

// TestSQLiteFenceRefuses: Fence fails with ErrLost for a grant expired by
// this host's clock though nobody took it (R6), released (R7), or of a key
// with no record, and with a plain one-line error for bad input.
func TestSQLiteFenceRefuses(t *testing.T) {
	r := newSQLiteFenceRig(t, sqliteBusyTimeout)
	past := testclock.New()
	past.Set(time.Now().Add(-2 * time.Hour))
	d := openSQLiteAt(t, r.path)
	stale, err := lease.NewDocumentStore(d, lease.WithOwner("stale"), lease.WithClock(past.Now), lease.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	expired := testkit.MustAcquire(t, stale, "expired")
	released := testkit.MustAcquire(t, r.holder, "released")
	testkit.WantErr(t, "Release", r.holder.Release(ctxBG, released), nil)
	live := testkit.MustAcquire(t, r.holder, "live")

	fence := func(g lease.Grant) error {
		tx := r.begin(t)
		defer tx.Rollback()
		return Fence(ctxBG, tx, g)
	}
	wantSQLiteFenceLost(t, fence(expired), expired, "expired at")
	wantSQLiteFenceLost(t, fence(released), released, "released")
	nobody := lease.Grant{Key: "nobody", Owner: "holder", Epoch: 1}
	wantSQLiteFenceLost(t, fence(nobody), nobody, "no record")
	for name, err := range map[string]error{
		"zero grant": fence(lease.Grant{}),
		"no owner":   fence(lease.Grant{Key: "live", Epoch: 1}),
		"nil tx":     Fence(ctxBG, nil, live),
	} {
		if err == nil || errors.Is(err, lease.ErrLost) || errors.Is(err, lease.ErrStorage) || strings.Count(err.Error(), "lease:") != 1 {
			t.Errorf("Fence with %s = %v; want a one-line error of its own", name, err)
		}
	}
	if err := fence(live); err != nil {
		t.Fatalf("Fence of the live grant = %v", err)
	}
}

// TestSQLiteFenceHoldsOffTakeover (R4f, R5): right after Fence, before the
// transaction writes anything of its own, a store whose clock says the
// grant expired cannot take the key: its write finds the file busy (its
// busy timeout is zero, so it answers at once instead of waiting) and
// Acquire fails with a *StorageError. Once the fenced transaction commits,
// the takeover lands with epoch + 1 and PreviousUnclean, and the protected
// write is there for the new holder.
func TestSQLiteFenceHoldsOffTakeover(t *testing.T) {
	r := newSQLiteFenceRig(t, 0)
	g := testkit.MustAcquire(t, r.holder, "profile/7")
	tx := r.begin(t)
	if err := Fence(ctxBG, tx, g); err != nil {
		t.Fatalf("Fence = %v", err)
	}
	_, err := r.taker.Acquire(ctxBG, "profile/7")
	testkit.WantStorageErr(t, "a takeover while the fenced transaction is open", err)
	r.write(t, tx, g, "fenced")
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	g2, err := r.taker.Acquire(ctxBG, "profile/7")
	if err != nil || g2.Epoch != g.Epoch+1 || !g2.PreviousUnclean || g2.Owner != "taker" {
		t.Fatalf("takeover after the commit = %+v, %v; want taker at epoch %d with PreviousUnclean", g2, err, g.Epoch+1)
	}
	if n := r.count(t, "fenced"); n != 1 {
		t.Fatalf("the new holder sees %d fenced writes; want 1", n)
	}
}

// TestSQLiteFenceSessionGrant_R20: the grant of a session-attached key (a
// Held's) is live while its record names it, unreleased, and its session
// is live with an expiry after now by this host's clock, whatever the
// key's own far-future expiry (R20). Fence proves it and holds off the
// session's kill (R21) until the transaction ends; otherwise it fails with
// ErrLost saying the session ended, expired or has no record, and a
// session row that cannot be read fails closed (R10).
func TestSQLiteFenceSessionGrant_R20(t *testing.T) {
	r := newSQLiteFenceRig(t, sqliteBusyTimeout)
	d := openSQLiteAt(t, r.path).(*sqliteDriver)
	now := time.Now()
	attach := func(key string, n int, sess *lease.SessionRecord, released bool) lease.Grant {
		t.Helper()
		if sess != nil {
			sess.ID, sess.Owner = sessID(n), "holder"
			mustPutSession(t, d, *sess, lease.Precondition{Absent: true})
		}
		rec := lease.Record{Key: key, Owner: "holder", Epoch: 4, ExpiresAt: lease.SessionKeyExpiry, Session: sessID(n), Released: released}
		if _, err := d.Put(ctxBG, rec, lease.Precondition{Absent: true}); err != nil {
			t.Fatal(err)
		}
		return lease.Grant{Key: key, Owner: "holder", Epoch: 4, ExpiresAt: now.Add(time.Hour)}
	}
	session := func(exp time.Time, st lease.SessionState) *lease.SessionRecord {
		return &lease.SessionRecord{ExpiresAt: exp, State: st}
	}
	liveSess := session(now.Add(time.Hour), lease.SessionLive)
	live := attach("live", 1, liveSess, false)
	clean := attach("clean", 2, session(now.Add(time.Hour), lease.SessionEndedClean), false)
	unclean := attach("unclean", 3, session(now.Add(time.Hour), lease.SessionEndedUnclean), false)
	expired := attach("expired", 4, session(now.Add(-time.Second), lease.SessionLive), false)
	missing := attach("missing", 5, nil, false)
	released := attach("released", 6, session(now.Add(time.Hour), lease.SessionLive), true)
	corrupt := attach("corrupt", 7, session(now.Add(time.Hour), lease.SessionLive), false)
	mustExec(t, r.app, "UPDATE lease_sessions SET state = 9 WHERE id = ?", sessID(7))

	fence := func(g lease.Grant) error {
		tx := r.begin(t)
		defer tx.Rollback()
		return Fence(ctxBG, tx, g)
	}
	wantSQLiteFenceLost(t, fence(clean), clean, "its session "+sessID(2)+" ended (ended-clean)")
	wantSQLiteFenceLost(t, fence(unclean), unclean, "its session "+sessID(3)+" ended (ended-unclean)")
	wantSQLiteFenceLost(t, fence(expired), expired, "its session "+sessID(4)+" expired at")
	wantSQLiteFenceLost(t, fence(missing), missing, "its session "+sessID(5)+" has no record")
	wantSQLiteFenceLost(t, fence(released), released, "released")
	err := fence(corrupt)
	testkit.WantStorageErr(t, "Fence with an unreadable session", err)
	testkit.WantErr(t, "Fence with an unreadable session", err, lease.ErrCorrupt)

	// The live grant: Fence holds the write lock, so a taker's kill of the
	// session (its busy timeout zero: it answers at once) finds the file
	// busy until the fenced write commits; then the grant is lost.
	taker, err := openSQLite(r.path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer taker.Close()
	kill := *liveSess
	kill.State = lease.SessionEndedUnclean
	tx := r.begin(t)
	if err := Fence(ctxBG, tx, live); err != nil {
		t.Fatalf("Fence of a live session's grant = %v", err)
	}
	_, err = taker.(lease.SessionDriver).PutSession(ctxBG, kill, lease.Precondition{Version: 1})
	wantSQLiteBusy(t, "the session's kill while the fenced transaction is open", err)
	r.write(t, tx, live, "fenced")
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := taker.(lease.SessionDriver).PutSession(ctxBG, kill, lease.Precondition{Version: 1}); err != nil {
		t.Fatalf("the kill after the commit = %v", err)
	}
	wantSQLiteFenceLost(t, fence(live), live, "its session "+sessID(1)+" ended (ended-unclean)")
	if n := r.count(t, "fenced"); n != 1 {
		t.Fatalf("%d fenced writes committed; want 1", n)
	}
}
