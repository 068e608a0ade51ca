package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/fencing"
)

// sqliteFence proves a grant and takes the file's write lock in one
// statement: an UPDATE that changes nothing (version = version, so that
// the store's compare-and-swap is not disturbed) of the key's row, guarded
// by owner, epoch, not released and expiry (?4 is now in Unix
// milliseconds, as expires_ms): the row's own for a key kept per key, its
// session's for a session-attached key, whose session must also be live
// (R20). An UPDATE takes the write lock whether or not a row matches, and
// keeps it until the transaction ends.
const sqliteFence = `UPDATE leases SET version = version
	WHERE key = ?1 AND owner = ?2 AND epoch = ?3 AND released = 0
	AND (session = '' AND expires_ms > ?4 OR session <> '' AND EXISTS (SELECT 1 FROM lease_sessions AS s
		WHERE s.id = leases.session AND s.state = 1 AND s.expires_ms > ?4))`

// Fence proves inside tx, a transaction on the lease file (a *sql.DB of
// your own on the same path, through modernc.org/sqlite), that g is still
// the live grant of its key, and holds the file's write lock so that no
// takeover commits before tx ends; otherwise it returns an error matching
// lease.ErrLost (naming the key, the epoch and why), and the caller rolls
// tx back. A failure of the statement (SQLITE_BUSY after the connection's
// busy timeout, for one) is a *lease.StorageError; roll back then too.
//
// It is one statement: an UPDATE of the key's row that changes nothing,
// guarded by g's owner and epoch, not released, and an expiry after now
// by this host's clock (time.Now, which every process of the host shares;
// R6): for a key attached to a session (a grant of a Held), its session's
// expiry, and the session must be live (R20). The UPDATE makes tx a
// writer: every other write to the file, every store's acquire, renewal
// and release of any key and every session's renewal or kill included,
// waits until tx ends (for up to its busy timeout, five seconds for this
// driver's, then fails and is retried by Hold). Keep a fenced transaction
// short.
//
// Call Fence first in tx, or begin tx IMMEDIATE (the "_txlock=immediate"
// DSN parameter): a deferred transaction that read before another process
// wrote cannot become a writer, and Fence then fails with SQLITE_BUSY.
func Fence(ctx context.Context, tx *sql.Tx, g lease.Grant) error {
	if tx == nil {
		return fencing.ErrNotTx
	}
	if err := fencing.CheckGrant(g); err != nil {
		return err
	}
	now := time.Now()
	n, err := fenceRows(ctx, tx, g, fenceNowMs(now))
	switch {
	case err != nil:
		return fencing.Failed(g.Key, "sqlite", err)
	case n == 1:
		return nil
	}
	return explainFence(ctx, tx, g, now)
}

// fenceRows runs the fencing statement and returns how many rows it matched.
func fenceRows(ctx context.Context, tx *sql.Tx, g lease.Grant, nowMs int64) (int64, error) {
	args := []any{g.Key, g.Owner, int64(g.Epoch), nowMs}
	if mutant == mutantFenceNoLock { // the same guard, read without the write lock
		var n int64
		err := tx.QueryRowContext(ctx, "SELECT count(*) FROM leases "+sqliteFence[strings.Index(sqliteFence, "WHERE"):], args...).Scan(&n)
		return n, err
	}
	res, err := tx.ExecContext(ctx, sqliteFence, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// fenceNowMs is now as the fencing statement compares it with expires_ms.
func fenceNowMs(now time.Time) int64 {
	if mutant == mutantFenceNoExpiry {
		return 0
	}
	return now.UnixMilli()
}

// explainFence reads the key's record in tx, and the session it names if
// any, to say why Fence failed.
func explainFence(ctx context.Context, tx *sql.Tx, g lease.Grant, now time.Time) error {
	var cols [6]any
	err := tx.QueryRowContext(ctx, sqliteGet, g.Key).Scan(&cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5])
	if errors.Is(err, sql.ErrNoRows) {
		return fencing.Verdict(g, lease.Record{}, false, now, hostClock)
	}
	if err != nil {
		return fencing.Failed(g.Key, "sqlite", err)
	}
	rec, _, err := parseSQLiteRow(g.Key, cols)
	if err != nil {
		return fencing.Failed(g.Key, "sqlite", err)
	}
	if err := fencing.Verdict(g, rec, true, now, hostClock); err != nil {
		return err
	}
	if rec.Session != "" {
		if err := explainFenceSession(ctx, tx, g, rec.Session, now); err != nil {
			return err
		}
	}
	return fencing.Failed(g.Key, "sqlite", errors.New("the record is live but the fencing update matched no row"))
}

// hostClock names the clock SQLite's expiries are judged by (R8).
const hostClock = "this host's clock"

// explainFenceSession reads session id in tx and judges it for g: an
// error matching ErrLost if it is missing, ended or expired.
func explainFenceSession(ctx context.Context, tx *sql.Tx, g lease.Grant, id string, now time.Time) error {
	var cols [4]any
	err := tx.QueryRowContext(ctx, sqliteGetSession, id).Scan(&cols[0], &cols[1], &cols[2], &cols[3])
	if errors.Is(err, sql.ErrNoRows) {
		return fencing.SessionVerdict(g, id, lease.SessionRecord{}, false, now, hostClock)
	}
	if err != nil {
		return fencing.Failed(g.Key, "sqlite", err)
	}
	sess, _, err := parseSQLiteSession(id, cols)
	if err != nil {
		return fencing.Failed(g.Key, "sqlite", err)
	}
	return fencing.SessionVerdict(g, id, sess, true, now, hostClock)
}
