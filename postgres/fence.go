package postgres

import (
	"context"
	"database/sql"
	"errors"
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
	err = tx.QueryRowContext(ctx, query, g.Key).Scan(&f.owner, &f.epoch, &f.released, &f.expires, &f.now)
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
	err = tx.QueryRow(ctx, query, g.Key).Scan(&f.owner, &f.epoch, &f.released, &f.expires, &f.now)
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
	lock := " FOR SHARE"
	switch mutant {
	case mutantFenceNoLock:
		lock = ""
	case mutantFenceKeyShare:
		lock = " FOR KEY SHARE"
	}
	return `SELECT owner, epoch::text, released, expires, clock_timestamp() FROM ` + pgx.Identifier{cfg.table}.Sanitize() +
		` WHERE key = $1` + lock, cfg.table, nil
}

// fencedRow is the key's row as the fencing statement read and locked it.
type fencedRow struct {
	owner, epoch string
	released     bool
	expires      time.Time
	now          time.Time // the server's clock_timestamp()
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
	}
	return fencing.Verdict(g, rec, !absent, f.now, "the server's clock")
}
