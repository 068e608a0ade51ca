package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/rules"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// This file holds the PostgreSQL driver's session records (SessionDriver,
// R18–R24): one row per session in the sessions table (see schema.go),
// written with the compare-and-swap, durability and server clock of the
// key rows.

// addSessionStatements makes the session statements; setCommit is the
// CTE s that sets synchronous_commit for a write's transaction (see
// newPostgresStatements). Like every statement of the driver, each also
// returns the server's clock_timestamp().
func (d *postgresDriver) addSessionStatements(setCommit string) {
	t := pgx.Identifier{d.table}.Sanitize()
	st := pgx.Identifier{d.sessions}.Sanitize()
	// parsable is what an UPDATE requires of the row besides its version:
	// that GetSession would parse it (R10).
	const parsable = `octet_length(x.owner) BETWEEN 1 AND 256 AND x.owner !~ '[^!-~]'
		AND isfinite(x.expires) AND x.state BETWEEN 1 AND 3`
	d.getSession = `SELECT c.now, x.id IS NOT NULL, x.owner, x.expires, x.state, x.version
		FROM (SELECT clock_timestamp() AS now) AS c LEFT JOIN ` + st + ` AS x ON x.id = $1`
	d.insertSession = `WITH ` + setCommit + `, ins AS (INSERT INTO ` + st + ` (id, owner, expires, state, version)
			SELECT $1::text, $2::text, $3::timestamptz, $4::smallint, 1 FROM s
			ON CONFLICT (id) DO NOTHING RETURNING 1)
		SELECT clock_timestamp(), count(*) FROM ins`
	d.updateSession = `WITH ` + setCommit + `, upd AS (UPDATE ` + st + ` AS x SET owner = $3, expires = $4, state = $5,
			version = $2 + 1
			FROM s WHERE x.id = $1 AND x.version = $2 AND ` + parsable + ` RETURNING 1)
		SELECT clock_timestamp(), count(*) FROM upd`
	// One statement: the sessions expired before $1 that no key row names
	// (found through the partial index on session, whose predicate the
	// subquery repeats so that the planner may use it), at most $2 of
	// them. FOR UPDATE makes a row renewed since the statement's snapshot
	// be judged again by its new expiry, and SKIP LOCKED passes over a
	// session being written at the moment: it is not dead.
	d.removeSessions = `WITH ` + setCommit + `, del AS (DELETE FROM ` + st + ` AS d USING s WHERE d.id IN (
			SELECT x.id FROM ` + st + ` AS x WHERE x.expires < $1
				AND NOT EXISTS (SELECT 1 FROM ` + t + ` AS l WHERE l.session = x.id AND l.session <> '')
			LIMIT $2 FOR UPDATE OF x SKIP LOCKED)
		RETURNING 1)
		SELECT clock_timestamp(), count(*) FROM del`
}

// GetSession reads session id's record. A row with a NULL or
// out-of-range column is an error matching ErrCorrupt naming the session,
// and is left as it is (R10). No record has an id of another form than
// the library's (ValidateSessionID): ErrNotFound.
func (d *postgresDriver) GetSession(ctx context.Context, id string) (lease.SessionRecord, uint64, error) {
	if err := d.usable(ctx); err != nil {
		return lease.SessionRecord{}, 0, err
	}
	if lease.ValidateSessionID(id) != nil {
		return lease.SessionRecord{}, 0, lease.ErrNotFound
	}
	var (
		cols  sessionColumns
		now   time.Time
		found bool
	)
	err := d.db.QueryRowContext(ctx, d.getSession, id).Scan(&now, &found, &cols[0], &cols[1], &cols[2], &cols[3])
	if err != nil {
		return lease.SessionRecord{}, 0, d.failSessions("get", err)
	}
	lease.ReportServerTime(ctx, now)
	if !found {
		return lease.SessionRecord{}, 0, lease.ErrNotFound
	}
	return parseSessionRow(id, cols)
}

// sessionColumns are a session row's columns as GetSession reads them:
// owner, expires, state and version.
type sessionColumns [4]any

// parseSessionRow turns session id's columns into a record, refusing any
// value this driver would not write.
func parseSessionRow(id string, cols sessionColumns) (lease.SessionRecord, uint64, error) {
	bad := func(i int, name, want string) error {
		return corrupt("postgres session %s: %s is %s, want %s", id, name, describeValue(cols[i]), want)
	}
	owner, ok := cols[0].(string)
	if !ok {
		return lease.SessionRecord{}, 0, bad(0, "owner", "a text")
	}
	expires, ok := cols[1].(time.Time)
	if !ok {
		return lease.SessionRecord{}, 0, bad(1, "expires", "a finite timestamptz")
	}
	state, ok := cols[2].(int64)
	if !ok || state < 1 || state > 3 {
		return lease.SessionRecord{}, 0, bad(2, "state", "1 (live), 2 (ended clean) or 3 (ended unclean)")
	}
	version, ok := cols[3].(int64)
	if !ok || version < 1 {
		return lease.SessionRecord{}, 0, bad(3, "version", "a bigint from 1 up")
	}
	rec := lease.SessionRecord{ID: id, Owner: owner, ExpiresAt: expires.UTC(), State: lease.SessionState(state)}
	if err := lease.CheckSessionRecord(rec); err != nil {
		return lease.SessionRecord{}, 0, err // an owner no store has (the table's CHECK dropped)
	}
	return rec, uint64(version), nil
}

// PutSession writes rec in one statement if pre holds: an INSERT that
// does nothing when the id exists (Absent: never an upsert, R18), or an
// UPDATE guarded by the version. No row written means the precondition
// failed: ErrConflict. It returns once the commit is durable (see
// NewDriver).
func (d *postgresDriver) PutSession(ctx context.Context, rec lease.SessionRecord, pre lease.Precondition) (uint64, error) {
	if err := d.usable(ctx); err != nil {
		return 0, err
	}
	if err := checkSessionWrite(rec, pre); err != nil {
		return 0, d.failSessions("put", err)
	}
	var row *sql.Row
	switch {
	case pre.Absent:
		row = d.db.QueryRowContext(ctx, d.insertSession, rec.ID, rec.Owner, rec.ExpiresAt, int16(rec.State))
	case pre.Version == 0 || pre.Version >= math.MaxInt64:
		return 0, lease.ErrConflict // no stored row has such a version (checkSessionWrite refused MaxInt64)
	case mutant == mutantSessionReadThenWrite:
		if _, v, err := d.GetSession(ctx, rec.ID); err != nil || v != pre.Version {
			return 0, lease.ErrConflict
		}
		unguarded := strings.Replace(d.updateSession, "AND x.version = $2 ", "", 1)
		row = d.db.QueryRowContext(ctx, unguarded, rec.ID, int64(pre.Version), rec.Owner, rec.ExpiresAt, int16(rec.State))
	default:
		if rec.State == lease.SessionLive {
			ctx = context.WithValue(ctx, renewalKey{}, true) // a renewal: see shouldPing
		}
		row = d.db.QueryRowContext(ctx, d.updateSession, rec.ID, int64(pre.Version), rec.Owner, rec.ExpiresAt, int16(rec.State))
	}
	var (
		now time.Time
		n   int64
	)
	if err := row.Scan(&now, &n); err != nil {
		return 0, d.failSessions("put", err)
	}
	lease.ReportServerTime(ctx, now)
	if n == 0 {
		return 0, lease.ErrConflict
	}
	return nextVersion(pre), nil
}

// renewalKey marks the context of a session's renewal (PutSession of a
// live session over its version), for shouldPing.
type renewalKey struct{}

// shouldPing decides, for the pool Open makes, whether pgx pings a
// connection before it reuses it: when it was idle for over a second, as
// pgx does by default, unless the call is a session's renewal. A store
// renews its session once a period, a third of its TTL, so every renewal
// finds its connection idle (10 s at the default TTL) and would cost two
// round trips where its statement needs one. A renewal sent on a
// connection that the server has dropped (a restart, a failover) fails
// before it is sent, and database/sql tries another connection, or fails
// with its outcome unknown, which the store settles by reading the
// session back (R9) and retries before the session's deadline.
func shouldPing(ctx context.Context, p stdlib.ShouldPingParams) bool {
	return p.IdleDuration > time.Second && ctx.Value(renewalKey{}) == nil
}

// checkSessionWrite refuses, before the server sees it, a session record
// the table could not hold, naming the field.
func checkSessionWrite(rec lease.SessionRecord, pre lease.Precondition) error {
	switch {
	case lease.ValidateSessionID(rec.ID) != nil:
		return fmt.Errorf("session id %q cannot be stored: want 32 lowercase hex digits", rec.ID)
	case rules.CheckOwner(rec.Owner) != nil:
		return fmt.Errorf("session %s: owner %q cannot be stored", rec.ID, rec.Owner)
	case !rec.State.Valid():
		return fmt.Errorf("session %s: state %d cannot be stored", rec.ID, uint8(rec.State))
	case rec.ExpiresAt.Year() < 1 || rec.ExpiresAt.Year() > 294275:
		return fmt.Errorf("session %s: expiry %v is outside PostgreSQL's timestamptz range", rec.ID, rec.ExpiresAt)
	case !pre.Absent && pre.Version == math.MaxInt64:
		return fmt.Errorf("session %s: version %d is the largest a bigint holds", rec.ID, pre.Version)
	}
	return nil
}

// RemoveSessions deletes, in one statement, at most limit sessions that
// expired before before and that no key row names, and returns how many
// it deleted (R22). Each deletion is atomic with its check of the key
// rows, as of the statement's snapshot: a key row naming the session that
// commits after that snapshot is the store's to prevent, by never naming
// a session so long expired.
func (d *postgresDriver) RemoveSessions(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := d.usable(ctx); err != nil {
		return 0, err
	}
	if limit <= 0 {
		return 0, nil
	}
	if before.Year() < 1 || before.Year() > 294275 {
		return 0, d.failSessions("remove", errors.New("the time before which to remove is outside PostgreSQL's timestamptz range"))
	}
	var (
		now time.Time
		n   int64
	)
	if err := d.db.QueryRowContext(ctx, d.removeSessions, before, int64(limit)).Scan(&now, &n); err != nil {
		return 0, d.failSessions(fmt.Sprintf("remove of up to %d", limit), err)
	}
	lease.ReportServerTime(ctx, now)
	return int(n), nil
}

// failSessions is fail for the sessions table.
func (d *postgresDriver) failSessions(op string, err error) error {
	if d.closed.Load() {
		return lease.ErrClosed
	}
	return fmt.Errorf("postgres table %s: %s: %w", d.sessions, op, err)
}
