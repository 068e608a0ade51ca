package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/fencing"

	"github.com/jackc/pgx/v5"
)

// Fence proves inside tx, a transaction on the lease table's database,
// that g is still the live grant of its key, and holds the key so that no
// takeover commits before tx ends; otherwise it returns an error matching
// lease.ErrLost (naming the key, the epoch and why), and the caller rolls
// tx back. A failure of the statement is a *lease.StorageError; roll back
// then too. Pass Table when the store uses another table than
// DefaultTable; Fence takes no other option.
//
// It is one statement, a primary-key SELECT … FOR SHARE of the key's row,
// whose lock conflicts with the UPDATE of every acquire, renewal and
// release of that key: a takeover that comes while tx is open waits for
// tx to end, then finds tx's writes as the previous holder's state
// (PreviousUnclean). A transaction that commits after a nil Fence thus
// committed while g was held, whatever the holder's clock or pauses did.
// (FOR KEY SHARE would not do: the driver's UPDATE changes no key column,
// and so does not wait for it.)
//
// Expiry is judged, as the store judges it without lease.WithClock, by
// the server's clock (clock_timestamp(), read by the same statement, R8):
// the record must be unreleased, name g's owner and epoch, and expire
// after the server's now (R6). The row's expiry is read, not g.ExpiresAt:
// a renewal since g was issued counts.
//
// A key attached to a session (R20) is live while its session is: the
// same statement joins the session's row, which must be live and expire
// after the server's now; the error says whether the session ended,
// expired or has no record. The session's row is read, not locked, so
// that its renewals never wait for tx: a takeover may end the session
// while tx is open (R21), but its write of the key still waits for tx.
//
// The lock also makes the holder's own renewal of the key, and a batched
// renewal that includes it, wait until tx ends. A Hold renews every third
// of the TTL and gives up at the TTL less its safety margin (a sixth), so
// a fenced transaction may delay the key's renewal by about half the TTL
// (15 s with the defaults) before the lease is lost: keep it short.
//
// Call Fence first in tx. At REPEATABLE READ or SERIALIZABLE, a renewal
// that committed after tx's snapshot makes the statement fail with a
// serialization error (a *lease.StorageError): retry the transaction.
func Fence(ctx context.Context, tx *sql.Tx, g lease.Grant, opts ...Option) error {
	if tx == nil {
		return fencing.ErrNotTx
	}
	query, table, err := fenceQuery(g, opts)
	if err != nil {
		return err
	}
	var f fencedRow
	err = tx.QueryRowContext(ctx, query, g.Key).Scan(f.dest()...)
	return f.verdict(g, table, errors.Is(err, sql.ErrNoRows), err)
}

// FencePgx is Fence for a transaction of pgx's own interface (a pgx.Conn's
// or a pgxpool.Pool's).
func FencePgx(ctx context.Context, tx pgx.Tx, g lease.Grant, opts ...Option) error {
	if tx == nil {
		return fencing.ErrNotTx
	}
	query, table, err := fenceQuery(g, opts)
	if err != nil {
		return err
	}
	var f fencedRow
	err = tx.QueryRow(ctx, query, g.Key).Scan(f.dest()...)
	return f.verdict(g, table, errors.Is(err, pgx.ErrNoRows), err)
}

// fenceQuery checks g and the options, and returns the fencing statement
// for the table they name.
func fenceQuery(g lease.Grant, opts []Option) (query, table string, err error) {
	if err := fencing.CheckGrant(g); err != nil {
		return "", "", err
	}
	cfg := config{table: DefaultTable}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxConns != 0 {
		return "", "", errors.New("lease: postgres.Fence given MaxConns: it takes only Table")
	}
	if err := checkPostgresTable(cfg.table); err != nil {
		return "", "", err
	}
	// Only the key's row is locked (OF l): the session's row stays free
	// for its renewals. The join finds no session for session ''.
	lock := " FOR SHARE OF l"
	switch mutant {
	case mutantFenceNoLock:
		lock = ""
	case mutantFenceKeyShare:
		lock = " FOR KEY SHARE OF l"
	}
	return `SELECT l.owner, l.epoch::text, l.released, l.expires, l.session, x.id IS NOT NULL, x.state, x.expires, clock_timestamp()
		FROM ` + pgx.Identifier{cfg.table}.Sanitize() + ` AS l
		LEFT JOIN ` + pgx.Identifier{sessionsTable(cfg.table)}.Sanitize() + ` AS x ON x.id = l.session
		WHERE l.key = $1` + lock, cfg.table, nil
}

// fencedRow is the key's row as the fencing statement read and locked it,
// with its session's state and expiry (NULL when the key names no session
// or the session has no row).
type fencedRow struct {
	owner, epoch   string
	released       bool
	expires        time.Time
	session        sql.NullString
	sessionFound   bool // the session has a row
	sessionState   sql.NullInt16
	sessionExpires sql.NullTime
	now            time.Time // the server's clock_timestamp()
}

// dest is where Scan puts the statement's columns.
func (f *fencedRow) dest() []any {
	return []any{&f.owner, &f.epoch, &f.released, &f.expires, &f.session, &f.sessionFound, &f.sessionState, &f.sessionExpires, &f.now}
}

// verdict turns the statement's outcome into Fence's answer: err is the
// scan's error, absent whether that error says the key has no row.
func (f fencedRow) verdict(g lease.Grant, table string, absent bool, err error) error {
	if err != nil && !absent {
		return fencing.Failed(g.Key, "postgres table "+table, err)
	}
	rec := lease.Record{Key: g.Key, Owner: f.owner, Released: f.released, ExpiresAt: f.expires}
	if !absent {
		if rec.Epoch, err = strconv.ParseUint(f.epoch, 10, 64); err != nil {
			return fencing.Failed(g.Key, "postgres table "+table,
				corrupt("postgres row %q: epoch is %q, want a whole number from 1 to 18446744073709551615", g.Key, f.epoch))
		}
	}
	if mutant == mutantFenceNoExpiry {
		rec.ExpiresAt = f.now.Add(time.Hour)
		f.sessionExpires.Time = f.now.Add(time.Hour)
	}
	if err := fencing.Verdict(g, rec, !absent, f.now, "the server's clock"); err != nil || absent || f.session.String == "" && f.session.Valid {
		return err
	}
	if mutant == mutantFenceNoSession {
		return nil
	}
	return f.sessionVerdict(g, table)
}

// sessionVerdict judges the session of a key row that names g's grant
// (R20): nil while the session is live and the server's now is before its
// expiry, else an error matching lease.ErrLost that says why. A session
// value or row that GetSession would refuse is a *lease.StorageError
// matching lease.ErrCorrupt (R10).
func (f fencedRow) sessionVerdict(g lease.Grant, table string) error {
	id := f.session.String
	if !f.session.Valid || lease.ValidateSessionID(id) != nil {
		var v any
		if f.session.Valid {
			v = id
		}
		return fencing.Failed(g.Key, "postgres table "+table, corrupt(
			"postgres row %q: session is %s, want '' or a session id (32 lowercase hex digits)", g.Key, describeValue(v)))
	}
	st := lease.SessionState(f.sessionState.Int16)
	var why string
	switch {
	case !f.sessionFound:
		why = fmt.Sprintf("its session %s has no record", id)
	case !f.sessionState.Valid || !st.Valid() || int16(st) != f.sessionState.Int16 || !f.sessionExpires.Valid:
		return fencing.Failed(g.Key, "postgres table "+sessionsTable(table), corrupt(
			"postgres session %s: state %s, expires %s", id, nullText(f.sessionState.Valid, f.sessionState.Int16),
			nullText(f.sessionExpires.Valid, f.sessionExpires.Time)))
	case st != lease.SessionLive:
		why = fmt.Sprintf("its session %s ended (%s)", id, st)
	case !f.now.Before(f.sessionExpires.Time):
		why = fmt.Sprintf("its session %s expired at %s (now %s by the server's clock)", id,
			f.sessionExpires.Time.UTC().Format(time.RFC3339Nano), f.now.UTC().Format(time.RFC3339Nano))
	default:
		return nil
	}
	return fmt.Errorf("%w: %q epoch %d: %s", lease.ErrLost, g.Key, g.Epoch, why)
}

// nullText describes a nullable column's value for an error message.
func nullText(valid bool, v any) string {
	if !valid {
		return "NULL"
	}
	return describeValue(v)
}
