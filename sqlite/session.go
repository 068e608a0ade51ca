package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/leasekit/lease"
)

// This file holds the SQLite driver's session records (lease.SessionDriver,
// R18–R24): the rows of lease_sessions, written with the compare-and-swap,
// versions and durability of the leases rows.

const (
	sqliteGetSession    = `SELECT owner, expires_ms, state, version FROM lease_sessions WHERE id = ?`
	sqliteInsertSession = `INSERT INTO lease_sessions (id, owner, expires_ms, state, version)
	VALUES (?, ?, ?, ?, 1) ON CONFLICT (id) DO NOTHING`
	// As the leases update, the session update requires the stored row to
	// be one that GetSession parses, so that a row corrupted behind its
	// store's back is not overwritten by a renewal (R10).
	sqliteUpdateSession = `UPDATE lease_sessions SET owner = ?1, expires_ms = ?2, state = ?3, version = ?4
	WHERE id = ?5 AND version = ?6 AND ` + sqliteSessionParses
	// sqliteRemoveSessions deletes, in one statement, so atomically per
	// session, up to ?2 sessions that expired before ?1 and that no key
	// names: a key that names one commits before or after the statement,
	// never between its check and its delete (R22). The check reads the
	// partial index leases_session, whose condition the subquery repeats
	// (SQLite uses a partial index only for a query that names its
	// condition). A row that does not parse is left as it is (R10).
	sqliteRemoveSessions = `DELETE FROM lease_sessions WHERE id IN (
	SELECT id FROM lease_sessions WHERE expires_ms < ?1 AND ` + sqliteSessionParses + `
	AND NOT EXISTS (SELECT 1 FROM leases WHERE session <> '' AND session = lease_sessions.id)
	LIMIT ?2)`
	// sqliteSessionParses is parseSQLiteSession's test of a lease_sessions
	// row in SQL: the kinds of its values, its owner (rules.CheckOwner),
	// state, version and id (lease.ValidateSessionID; GLOB is
	// case-sensitive).
	sqliteSessionParses = `typeof(version) = 'integer' AND version >= 1
	AND typeof(owner) = 'text' AND length(owner) BETWEEN 1 AND 256 AND owner NOT GLOB '*[^!-~]*'
	AND typeof(expires_ms) = 'integer' AND typeof(state) = 'integer' AND state IN (1, 2, 3)
	AND typeof(id) = 'text' AND length(id) = 32 AND id NOT GLOB '*[^0-9a-f]*'`
)

// GetSession reads session id's record from the read pool: ErrNotFound
// when there is none, and an error matching ErrCorrupt, naming the
// session, for a row this driver would not write (R10).
func (d *sqliteDriver) GetSession(ctx context.Context, id string) (lease.SessionRecord, uint64, error) {
	if d.closed.Load() {
		return lease.SessionRecord{}, 0, lease.ErrClosed
	}
	var cols [4]any
	err := d.getSess.QueryRowContext(ctx, id).Scan(&cols[0], &cols[1], &cols[2], &cols[3])
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return lease.SessionRecord{}, 0, lease.ErrNotFound
	case err != nil:
		return lease.SessionRecord{}, 0, d.failSession("get", id, err)
	}
	return parseSQLiteSession(id, cols)
}

// parseSQLiteSession turns the columns owner, expires_ms, state and
// version into a session record, refusing any value this driver would not
// write, and any record lease.CheckSessionRecord refuses.
func parseSQLiteSession(id string, cols [4]any) (lease.SessionRecord, uint64, error) {
	owner, ok := cols[0].(string)
	if !ok {
		return lease.SessionRecord{}, 0, corruptSessionColumn(id, "owner", cols[0], "text")
	}
	var ints [3]int64
	for i, name := range [3]string{"expires_ms", "state", "version"} {
		v, ok := cols[i+1].(int64)
		if !ok {
			return lease.SessionRecord{}, 0, corruptSessionColumn(id, name, cols[i+1], "an integer")
		}
		ints[i] = v
	}
	expiresMs, state, version := ints[0], ints[1], ints[2]
	if state < int64(lease.SessionLive) || state > int64(lease.SessionEndedUnclean) {
		return lease.SessionRecord{}, 0, corrupt("sqlite session %q: state is %d, want 1, 2 or 3", id, state)
	}
	if version < 1 {
		return lease.SessionRecord{}, 0, corrupt("sqlite session %q: version is %d, want at least 1", id, version)
	}
	rec := lease.SessionRecord{ID: id, Owner: owner, ExpiresAt: time.UnixMilli(expiresMs).UTC(), State: lease.SessionState(state)}
	if err := lease.CheckSessionRecord(rec); err != nil {
		return lease.SessionRecord{}, 0, err
	}
	return rec, uint64(version), nil
}

// corruptSessionColumn reports a session column holding the wrong kind of value.
func corruptSessionColumn(id, name string, v any, want string) error {
	return corrupt("sqlite session %q: %s is %s, want %s", id, name, describeValue(v), want)
}

// PutSession writes rec through the writer in one statement if pre holds:
// an INSERT that does nothing when the id exists (Absent: a session is
// created only where no record has its id, R18), or an UPDATE guarded by
// the version. No row changed means the precondition failed: ErrConflict.
// It returns once the write is durable (synchronous=FULL).
func (d *sqliteDriver) PutSession(ctx context.Context, rec lease.SessionRecord, pre lease.Precondition) (uint64, error) {
	if d.closed.Load() {
		return 0, lease.ErrClosed
	}
	next, err := d.putSession(ctx, rec, pre)
	if err != nil && !errors.Is(err, lease.ErrConflict) {
		return 0, d.failSession("put", rec.ID, err)
	}
	return next, err
}

// putSession runs PutSession's statement and returns ErrConflict when pre
// does not hold, and the database's error unwrapped.
func (d *sqliteDriver) putSession(ctx context.Context, rec lease.SessionRecord, pre lease.Precondition) (uint64, error) {
	expiresMs, state := rec.ExpiresAt.UnixMilli(), int64(rec.State)
	var res sql.Result
	var err error
	next := uint64(1)
	switch {
	case pre.Absent:
		res, err = d.putSess.ExecContext(ctx, rec.ID, rec.Owner, expiresMs, state)
	case pre.Version == 0 || pre.Version > math.MaxInt64:
		return 0, lease.ErrConflict // no stored row has such a version
	case pre.Version == math.MaxInt64:
		return 0, fmt.Errorf("version %d is the largest SQLite stores", pre.Version)
	case mutant == mutantSessionReadThenWrite:
		next = pre.Version + 1
		if _, v, gerr := d.GetSession(ctx, rec.ID); gerr != nil || v != pre.Version {
			return 0, lease.ErrConflict
		}
		res, err = d.db.ExecContext(ctx, `UPDATE lease_sessions SET owner = ?1, expires_ms = ?2, state = ?3, version = ?4 WHERE id = ?5`,
			rec.Owner, expiresMs, state, int64(next), rec.ID)
	default:
		next = pre.Version + 1
		res, err = d.updSess.ExecContext(ctx, rec.Owner, expiresMs, state, int64(next), rec.ID, int64(pre.Version))
	}
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, lease.ErrConflict
	}
	return next, nil
}

// RemoveSessions deletes, through the writer in one statement, at most
// limit sessions whose expiry is before before and that no key record
// names, and returns how many it deleted (R22).
func (d *sqliteDriver) RemoveSessions(ctx context.Context, before time.Time, limit int) (int, error) {
	if d.closed.Load() {
		return 0, lease.ErrClosed
	}
	if limit <= 0 {
		return 0, nil // SQLite reads LIMIT -1 as no limit
	}
	n, err := d.removeSessions(ctx, before, limit)
	if err != nil {
		if d.closed.Load() {
			return 0, lease.ErrClosed
		}
		return 0, fmt.Errorf("sqlite %s remove sessions expired before %s: %w", d.path, before.UTC().Format(time.RFC3339Nano), err)
	}
	return n, nil
}

// removeSessions runs RemoveSessions' statement.
func (d *sqliteDriver) removeSessions(ctx context.Context, before time.Time, limit int) (int, error) {
	res, err := d.rmSess.ExecContext(ctx, ceilMilli(before), limit)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// ceilMilli is t in Unix milliseconds rounded up, so that a stored expiry
// (whole milliseconds) is below it exactly when it is before t.
func ceilMilli(t time.Time) int64 {
	ms := t.UnixMilli() // rounded down: the nanoseconds are never negative
	if t.Nanosecond()%int(time.Millisecond) != 0 {
		ms++
	}
	return ms
}

// failSession wraps a database error about a session; after Close it is
// ErrClosed. A write error here leaves the outcome unknown (R9).
func (d *sqliteDriver) failSession(op, id string, err error) error {
	if d.closed.Load() {
		return lease.ErrClosed
	}
	return fmt.Errorf("sqlite %s %s session %q: %w", d.path, op, id, err)
}
