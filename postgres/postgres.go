// Package postgres is the PostgreSQL document driver of package lease: one
// row per key in a table, for processes on many hosts
// (github.com/jackc/pgx/v5). It imports no other database library.
//
// Importing it registers the "postgres://" and "postgresql://" schemes
// with lease.Open:
//
//	import _ "github.com/leasekit/lease/postgres"
//
//	s, err := lease.Open(ctx, "postgres://app@db1,db2/app?target_session_attrs=read-write&table=leases")
//
// Open returns a driver that owns its pool, of at most DefaultMaxConns
// (10) connections unless MaxConns or a "max_conns" URL parameter says
// otherwise; NewDriver makes one on a pool you already have (size it with
// (*sql.DB).SetMaxOpenConns: database/sql's default is unbounded). A
// connection the server refuses ("too many clients", SQLSTATE 53300, or
// a refused TCP connection) fails that one call with a *lease.StorageError,
// which Hold retries. Every write sets synchronous_commit for its own
// transaction, so a session changed after the driver's check cannot make
// a grant less durable. Durability checks and failover: docs/postgres.md
// in the repository. The rules it keeps (R1–R24, and the driver's part
// of sessions, R18–R24): docs/contract.md.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/redact"
	"github.com/leasekit/lease/internal/rules"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// DefaultTable is the table Open and NewDriver use
// unless Table names another.
const DefaultTable = "leases"

// postgresMaxBatch bounds how many writes one PutMany statement carries,
// so that one statement does not hold its rows locked for long: as many
// as Hold's keeper renews in one call, so that a renewal call is one
// statement (each statement costs the client a round trip and its
// buffers, whatever its size).
const postgresMaxBatch = 5000

// DefaultMaxConns bounds the connections of the pool Open makes unless
// MaxConns or the URL's "max_conns" says otherwise. The pool keeps as many
// idle, so that a burst of calls does not close and reopen connections.
const DefaultMaxConns = 10

// Option configures Open and NewDriver.
type Option func(*config)

type config struct {
	table    string
	maxConns int // 0: not set
}

// MaxConns bounds the connections of the pool Open makes (default
// DefaultMaxConns): calls beyond n wait for a free connection, or until
// their context ends. It wins over the URL's "max_conns". NewDriver
// refuses it: the caller's pool is the caller's to size.
func MaxConns(n int) Option {
	return func(c *config) { c.maxConns = n }
}

// Table makes the driver keep its records in the named table
// (default DefaultTable), found through the connection's
// search_path and created there if it does not exist, with its sessions
// table, name_sessions. The name must be a plain lower-case identifier: a
// letter or underscore, then letters, digits or underscores, at most 54
// bytes, so that the sessions table's name is at most PostgreSQL's 63.
func Table(name string) Option {
	return func(c *config) { c.table = name }
}

// checkPostgresTable refuses a table name that is not a plain identifier.
func checkPostgresTable(name string) error {
	ok := name != "" && len(name) <= maxTableName
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c == '_' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9'
	}
	if !ok {
		return fmt.Errorf("lease: postgres table name %q is not a plain identifier "+
			"(a lower-case letter or _, then lower-case letters, digits or _, at most %d bytes, "+
			"so that its sessions table %s_sessions is one of at most 63)", name, maxTableName, name)
	}
	return nil
}

// maxTableName is the longest table name: PostgreSQL's identifiers hold
// 63 bytes, and the sessions table's name adds "_sessions".
const maxTableName = 63 - len("_sessions")

// postgresDriver keeps one row per key in a PostgreSQL table. Every write
// is one statement in its own transaction at the server's default
// isolation: no advisory locks, no retries.
type postgresDriver struct {
	db        *sql.DB
	table     string // as given; quoted in the statements
	sessions  string // the sessions table's name, sessionsTable(table)
	commit    string // the synchronous_commit every write sets for its transaction
	ownsDB    bool   // made by Open: Close closes db
	closed    atomic.Bool
	get       string
	getMany   string
	insert    string
	update    string
	putMany   string
	putJoined string // putMany with its columns joined into text
	list      string // keys after $1, from prefix $2 on, at most $3
	listTo    string // the same, before $4 (the end of the prefix range)

	getSession     string
	insertSession  string
	updateSession  string
	removeSessions string
}

var (
	_ lease.BatchDriver = (*postgresDriver)(nil)
	_ lease.BatchReader = (*postgresDriver)(nil)
	_ lease.ListDriver  = (*postgresDriver)(nil)

	_ lease.SessionDriver = (*postgresDriver)(nil)
)

// Open connects to the PostgreSQL server that url names
// ("postgres://user:pass@host:5432/db?sslmode=verify-full", or a
// key=value connection string) through pgx, and returns a driver that owns
// the connection pool: Close closes it. Every connection the pool opens is
// checked as NewDriver checks its first one, so that a failover to
// a server that would not keep grants durable is refused.
//
// The pool opens at most DefaultMaxConns connections (10), and keeps as
// many idle; MaxConns, or a "max_conns" query parameter, sets another
// bound. Keep it below the server's max_connections, shared with every
// other client: a connection the server refuses ("too many clients")
// fails that call with a *lease.StorageError, which Hold retries.
//
// The pool pings a connection idle for over a second before it reuses it,
// as pgx does, except for a session's renewal: a store renews once a
// period, always on an idle connection, in one round trip instead of two.
// A renewal sent on a connection the server dropped fails, and its store
// settles it (R9) and tries again.
//
// The "table" and "max_conns" query parameters of a postgres:// or
// postgresql:// URL act as Table and MaxConns do (an option wins) and are
// not sent to the server.
//
// A multi-host URL with target_session_attrs=read-write
// ("postgres://a:5432,b:5432/db?target_session_attrs=read-write") follows
// a primary across a failover.
//
// Its errors show no part of a password: a URL whose user info holds an
// unescaped "/", "?" or "#", or a "%" that starts no %XX escape, is
// refused before pgx reads it (percent-encode them), and pgx's parse
// errors are retold without the connection string.
func Open(ctx context.Context, url string, opts ...Option) (lease.Driver, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	url, fromURL, err := splitPostgresURL(url)
	if err != nil {
		return nil, err
	}
	cfg := config{table: DefaultTable, maxConns: DefaultMaxConns}
	fromURL.apply(&cfg) // before opts: an option wins over the URL
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxConns < 1 {
		return nil, fmt.Errorf("lease: postgres: max_conns %d: want at least 1 connection", cfg.maxConns)
	}
	pcfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, parseConfigError(err)
	}
	db := openPool(pcfg, cfg.maxConns)
	d, err := newPostgresDriver(ctx, db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	d.ownsDB = true
	return d, nil
}

// openPool is the pool Open makes on pcfg: at most maxConns connections,
// as many kept idle, each checked as it opens (checkPostgresDurability),
// and each pinged before it is reused as pgx pings by default, unless the
// call is a session's renewal (shouldPing).
func openPool(pcfg *pgx.ConnConfig, maxConns int) *sql.DB {
	db := stdlib.OpenDB(*pcfg, stdlib.OptionAfterConnect(func(ctx context.Context, c *pgx.Conn) error {
		_, err := checkPostgresDurability(ctx, c)
		return err
	}), stdlib.OptionShouldPing(shouldPing))
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	return db
}

// NewDriver returns a driver that keeps leases in a table of the
// database that db (a pool of the caller's, for example from pgx's stdlib
// package) connects to. Close leaves db open: the caller owns it, and
// bounds its connections (db.SetMaxOpenConns); MaxConns is refused here.
//
// It checks, on one connection, that the server keeps a grant durable
// before it is returned (R2): fsync on, synchronous_commit not off, and,
// when the server has synchronous standbys (synchronous_standby_names),
// synchronous_commit on or remote_apply, so that a commit has reached a
// standby's disk. Every write then sets synchronous_commit for its own
// transaction (remote_apply if the check found it, else on), so that a
// pooled session changed later cannot weaken it. See docs/postgres.md.
// It then creates the table if it is missing, and refuses one of another
// shape without changing it.
func NewDriver(ctx context.Context, db *sql.DB, opts ...Option) (lease.Driver, error) {
	if db == nil {
		return nil, errors.New("lease: postgres.NewDriver given a nil *sql.DB")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg := config{table: DefaultTable}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxConns != 0 {
		return nil, errors.New("lease: postgres.NewDriver given MaxConns: the *sql.DB is yours to size (SetMaxOpenConns); " +
			"MaxConns sizes the pool postgres.Open makes")
	}
	return newPostgresDriver(ctx, db, cfg)
}

func newPostgresDriver(ctx context.Context, db *sql.DB, cfg config) (*postgresDriver, error) {
	if err := checkPostgresTable(cfg.table); err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		// pgx puts each host it tried on a line of its own.
		return nil, redact.Retold("lease: postgres: connecting: "+foldLines.Replace(err.Error()), err)
	}
	defer conn.Close()
	var accepted string
	err = conn.Raw(func(dc any) error {
		pc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("the *sql.DB's driver is %T, want pgx's stdlib (github.com/jackc/pgx/v5/stdlib)", dc)
		}
		accepted, err = checkPostgresDurability(ctx, pc.Conn())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lease: postgres: %w", err)
	}
	if err := setupPostgresTable(ctx, conn, cfg.table); err != nil {
		return nil, fmt.Errorf("lease: postgres table %q: %w", cfg.table, err)
	}
	return newPostgresStatements(db, cfg.table, durableCommit(accepted)), nil
}

// durableCommit is the synchronous_commit every write sets for its own
// transaction, given the value the connect-time check accepted: on, which
// waits for the local disk and for any synchronous standby's, or
// remote_apply when the check found that stronger level. A session set to
// off (or local) after the check thus cannot weaken a write (R2).
func durableCommit(accepted string) string {
	if accepted == "remote_apply" {
		return accepted
	}
	return "on"
}

// newPostgresStatements makes the driver's statements for table. Every
// statement also returns the server's clock_timestamp(), which the driver
// reports to the store (lease.ReportServerTime, R8): a read joins the rows
// it finds to that one value, so that it answers even when it finds none,
// and a write counts the rows it wrote beside it. Every write carries a CTE s that sets synchronous_commit to commit for its
// own transaction (set_config's is_local): the statement is its
// transaction, and the setting still holds when it commits, so the write is
// durable whatever its pooled session says, at no extra round trip. Each
// written row is joined with s, so s has run before any row is written.
func newPostgresStatements(db *sql.DB, table, commit string) *postgresDriver {
	t := pgx.Identifier{table}.Sanitize()
	// commit is "on" or "remote_apply" (durableCommit): safe as a literal.
	setCommit := `s AS (SELECT set_config('synchronous_commit', '` + commit + `', true) AS sc)`
	const cols = `owner, epoch, expires, released, session, version`
	const lcols = `l.owner, l.epoch, l.expires, l.released, l.version, l.session`
	// clock is the one-row relation every read joins its rows to.
	const clock = `(SELECT clock_timestamp() AS now) AS c`
	// parsable is what the UPDATE requires of the row besides its version:
	// that Get would parse it and the store accept it (R10). It is one
	// CASE so that the planner, before the table has statistics, does not
	// multiply the guesses of its range tests into "one row of the
	// table" and loop over the whole batch for each row
	// (TestPostgresPutManyPlanStaysLinear).
	const parsable = `CASE WHEN octet_length(l.owner) BETWEEN 1 AND 256 AND l.owner !~ '[^!-~]'
		AND l.epoch BETWEEN 1 AND 18446744073709551615
		AND isfinite(l.expires) AND l.released IS NOT NULL
		AND octet_length(l.session) IN (0, 32) AND l.session !~ '[^0-9a-f]' THEN true ELSE false END`
	// putWrites writes a batch w: the inserts and the guarded updates.
	putWrites := setCommit + `,
		ins AS (
			INSERT INTO ` + t + ` (key, ` + cols + `)
			SELECT w.key, w.owner, w.epoch, w.expires, w.released, w.session, 1 FROM w, s WHERE w.version = 0
			ON CONFLICT (key) DO NOTHING RETURNING key),
		upd AS (
			UPDATE ` + t + ` AS l SET owner = w.owner, epoch = w.epoch, expires = w.expires, released = w.released,
				session = w.session, version = w.version + 1
			FROM w, s WHERE w.version > 0 AND l.key = w.key AND l.version = w.version AND ` + parsable + `
			RETURNING l.key)`
	d := &postgresDriver{
		db:       db,
		table:    table,
		sessions: sessionsTable(table),
		commit:   commit,
		get:      `SELECT c.now, l.key IS NOT NULL, ` + lcols + ` FROM ` + clock + ` LEFT JOIN ` + t + ` AS l ON l.key = $1`,
		getMany:  `SELECT c.now, l.key, ` + lcols + ` FROM ` + clock + ` LEFT JOIN ` + t + ` AS l ON l.key = ANY($1)`,
		insert: `WITH ` + setCommit + `, ins AS (INSERT INTO ` + t + ` (key, ` + cols + `)
			SELECT $1::text, $2::text, $3::numeric, $4::timestamptz, $5::boolean, $6::text, 1 FROM s
			ON CONFLICT (key) DO NOTHING RETURNING 1)
			SELECT clock_timestamp(), count(*) FROM ins`,
		update: `WITH ` + setCommit + `, upd AS (UPDATE ` + t + ` AS l SET owner = $3, epoch = $4, expires = $5, released = $6, session = $7,
			version = $2 + 1
			FROM s WHERE l.key = $1 AND l.version = $2 AND ` + parsable + ` RETURNING 1)
			SELECT clock_timestamp(), count(*) FROM upd`,
		// One statement for a whole batch: the inserts and the guarded
		// updates of every write, each row its own compare-and-swap, in
		// one transaction. It returns the key of every write that landed
		// (a batch names each key once): RETURNING a key, not joining the
		// inserted rows back to w, keeps it linear in the batch.
		putMany: `WITH w AS (
			SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::numeric[], $5::timestamptz[], $6::bool[], $7::text[])
				AS w(key, version, owner, epoch, expires, released, session)),
		` + putWrites + `
		SELECT c.now, k.key FROM ` + clock + ` LEFT JOIN (SELECT key FROM ins UNION ALL SELECT key FROM upd) AS k ON true`,
		// The same batch with its columns joined into text, which the
		// server splits: keys by newlines, numbers and flags by commas,
		// and each owner, expiry and session an index into the batch's
		// runs of them (a renewal's are one each). Encoding it
		// costs the client a few appends per write instead of a binary
		// array element per column, and sends each owner once. It
		// answers how many writes landed and, only when not all did,
		// their keys.
		putJoined: `WITH w AS (
			SELECT key, version, ($3::text[])[o] AS owner, epoch, ($6::timestamptz[])[e] AS expires, released,
				($10::text[])[ss] AS session
			FROM unnest(string_to_array($1, E'\n'), string_to_array($2, ',')::bigint[],
				string_to_array($4, ',')::int[], string_to_array($5, ',')::numeric[],
				string_to_array($7, ',')::int[], string_to_array($8, ',')::bool[], string_to_array($11, ',')::int[])
				AS r(key, version, o, epoch, e, released, ss)),
		` + putWrites + `
		SELECT clock_timestamp(), count(*), CASE WHEN count(*) < $9 THEN string_agg(key, E'\n') END
		FROM (SELECT key FROM ins UNION ALL SELECT key FROM upd) AS landed`,
		list: `SELECT c.now, l.key, ` + lcols + ` FROM ` + clock + ` LEFT JOIN LATERAL (SELECT * FROM ` + t + `
			WHERE key > $1 AND key >= $2 ORDER BY key LIMIT $3) AS l ON true ORDER BY l.key`,
		listTo: `SELECT c.now, l.key, ` + lcols + ` FROM ` + clock + ` LEFT JOIN LATERAL (SELECT * FROM ` + t + `
			WHERE key > $1 AND key >= $2 AND key < $4 ORDER BY key LIMIT $3) AS l ON true ORDER BY l.key`,
	}
	d.addSessionStatements(setCommit)
	return d
}

// isPostgresCode reports whether err is a server error with one of codes.
func isPostgresCode(err error, codes ...string) bool {
	var pe interface{ SQLState() string }
	if !errors.As(err, &pe) {
		return false
	}
	for _, c := range codes {
		if pe.SQLState() == c {
			return true
		}
	}
	return false
}

// Name returns "postgres".
func (d *postgresDriver) Name() string { return "postgres" }

// Capabilities: PostgreSQL coordinates every process and host that reaches
// the server, timestamptz keeps microseconds, every answer carries the
// server's clock_timestamp(), which judges expiry (R8), and the driver
// keeps sessions in a table of their own and each row's session (R24).
func (d *postgresDriver) Capabilities() lease.Capabilities {
	return lease.Capabilities{CrossProcess: true, ExpiryResolution: time.Microsecond, ServerClock: true, Sessions: true}
}

// Get reads key's record. A row with a NULL or out-of-range column is an
// error matching ErrCorrupt, and is left as it is (R10).
func (d *postgresDriver) Get(ctx context.Context, key string) (lease.Record, uint64, error) {
	if err := d.usable(ctx); err != nil {
		return lease.Record{}, 0, err
	}
	var (
		cols  rowColumns
		now   time.Time
		found bool
	)
	err := d.db.QueryRowContext(ctx, d.get, key).Scan(&now, &found, &cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5])
	if err != nil {
		return lease.Record{}, 0, d.fail("get", err)
	}
	lease.ReportServerTime(ctx, now)
	if !found {
		return lease.Record{}, 0, lease.ErrNotFound
	}
	return parsePostgresRow(key, cols)
}

// rowColumns are a lease row's columns as a read returns them: owner,
// epoch, expires, released, version and session.
type rowColumns [6]any

// parsePostgresRow turns a row's columns into a record, refusing any
// value this driver would not write.
func parsePostgresRow(key string, cols rowColumns) (lease.Record, uint64, error) {
	bad := func(name string, want string) error {
		return corrupt("postgres row %q: %s is %s, want %s", key, name, postgresValue(cols, name), want)
	}
	owner, ok := cols[0].(string)
	if !ok || rules.CheckOwner(owner) != nil {
		return lease.Record{}, 0, bad("owner", "1 to 256 bytes of printable ASCII without spaces")
	}
	epochText, _ := cols[1].(string)
	epoch, err := strconv.ParseUint(epochText, 10, 64)
	if err != nil || epoch == 0 {
		return lease.Record{}, 0, bad("epoch", "a whole number from 1 to 18446744073709551615")
	}
	expires, ok := cols[2].(time.Time)
	if !ok {
		return lease.Record{}, 0, bad("expires", "a finite timestamptz")
	}
	released, ok := cols[3].(bool)
	if !ok {
		return lease.Record{}, 0, bad("released", "a boolean")
	}
	version, ok := cols[4].(int64)
	if !ok || version < 1 {
		return lease.Record{}, 0, bad("version", "a bigint from 1 up")
	}
	session, ok := cols[5].(string)
	if !ok || session != "" && lease.ValidateSessionID(session) != nil {
		return lease.Record{}, 0, bad("session", "'' or a session id (32 lowercase hex digits)")
	}
	rec := lease.Record{Key: key, Owner: owner, Epoch: epoch, ExpiresAt: expires.UTC(), Released: released, Session: session}
	return rec, uint64(version), nil
}

// postgresValue describes column name's value for an error message.
func postgresValue(cols rowColumns, name string) string {
	i := map[string]int{"owner": 0, "epoch": 1, "expires": 2, "released": 3, "version": 4, "session": 5}[name]
	return describeValue(cols[i])
}

// describeValue describes a column's value for an error message.
func describeValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "NULL"
	case string:
		return strconv.Quote(v)
	default:
		return fmt.Sprint(v)
	}
}

// Put writes rec in one statement if pre holds: an INSERT that does
// nothing when the key exists (Absent), or an UPDATE guarded by the
// version. No row written means the precondition failed: ErrConflict. It
// returns once the commit is durable (see NewDriver).
func (d *postgresDriver) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	if err := d.usable(ctx); err != nil {
		return 0, err
	}
	if err := checkPostgresWrite(rec, pre); err != nil {
		return 0, d.fail("put", err)
	}
	var row *sql.Row
	switch {
	case pre.Absent:
		row = d.db.QueryRowContext(ctx, d.insert, rec.Key, rec.Owner, rec.Epoch, rec.ExpiresAt, rec.Released, rec.Session)
	case pre.Version == 0 || pre.Version >= math.MaxInt64:
		return 0, lease.ErrConflict // no stored row has such a version (checkPostgresWrite refused MaxInt64)
	default:
		row = d.db.QueryRowContext(ctx, d.update, rec.Key, int64(pre.Version), rec.Owner, rec.Epoch, rec.ExpiresAt, rec.Released, rec.Session)
	}
	var (
		now time.Time
		n   int64
	)
	if err := row.Scan(&now, &n); err != nil {
		return 0, d.fail("put", err)
	}
	lease.ReportServerTime(ctx, now)
	if n == 0 {
		return 0, lease.ErrConflict
	}
	return nextVersion(pre), nil
}

// checkPostgresWrite refuses, before the server sees it, a record the
// table could not hold: the error names the field instead of failing a
// whole batch on the server.
func checkPostgresWrite(rec lease.Record, pre lease.Precondition) error {
	switch {
	case rec.Key == "" || strings.IndexByte(rec.Key, 0) >= 0:
		return fmt.Errorf("key %q cannot be stored", rec.Key)
	case rules.CheckOwner(rec.Owner) != nil:
		return fmt.Errorf("owner %q cannot be stored", rec.Owner)
	case rec.Epoch == 0:
		return errors.New("epoch 0 cannot be stored")
	case rec.ExpiresAt.Year() < 1 || rec.ExpiresAt.Year() > 294275:
		return fmt.Errorf("expiry %v is outside PostgreSQL's timestamptz range", rec.ExpiresAt)
	case rec.Session != "" && lease.ValidateSessionID(rec.Session) != nil:
		return fmt.Errorf("session %q cannot be stored: want '' or 32 lowercase hex digits", rec.Session)
	case !pre.Absent && pre.Version == math.MaxInt64:
		return fmt.Errorf("version %d is the largest a bigint holds", pre.Version)
	}
	return nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// usable checks ctx and whether the driver was closed.
func (d *postgresDriver) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d.closed.Load() {
		return lease.ErrClosed
	}
	return nil
}

// fail wraps a database error; after Close it is ErrClosed. A write error
// leaves the outcome unknown, and the store re-reads (R9). The store's
// error names the key, so this one does not.
func (d *postgresDriver) fail(op string, err error) error {
	if d.closed.Load() {
		return lease.ErrClosed
	}
	return fmt.Errorf("postgres table %s: %s: %w", d.table, op, err)
}

// Close makes later calls fail with ErrClosed, and closes the pool if
// Open made it.
func (d *postgresDriver) Close() error {
	if d.closed.Swap(true) || !d.ownsDB {
		return nil
	}
	return d.db.Close()
}

// urlOptions are the driver's own query parameters of a URL.
type urlOptions struct {
	table    string // "" when the URL has none
	maxConns int    // 0 when the URL has none
}

// apply sets what the URL named in c.
func (u urlOptions) apply(c *config) {
	if u.table != "" {
		c.table = u.table
	}
	if u.maxConns != 0 {
		c.maxConns = u.maxConns
	}
}

// splitPostgresURL takes the driver's own query parameters ("table" and
// "max_conns") out of a postgres:// or postgresql:// URL, so that they are
// not sent to the server as run-time parameters, which it would refuse.
// A key=value connection string comes back as it is. A URL that cannot be
// read one way only (a password with "/", "?" or "#" unescaped, see
// redact.Check) is refused, with an error that quotes nothing of it.
func splitPostgresURL(rawURL string) (connURL string, opts urlOptions, err error) {
	scheme, _, isURL := strings.Cut(rawURL, ":")
	if !isURL || scheme != "postgres" && scheme != "postgresql" {
		return rawURL, opts, nil
	}
	if err := redact.Check(rawURL); err != nil {
		return "", opts, fmt.Errorf("lease: cannot parse the %s URL: %w", scheme, err)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", opts, fmt.Errorf("lease: cannot parse the %s URL: %s", scheme, urlParseProblem(err))
	}
	q := u.Query()
	_, hasTable := q["table"]
	_, hasMax := q["max_conns"]
	if !hasTable && !hasMax {
		return rawURL, opts, nil
	}
	if hasTable {
		if opts.table, err = takeOne(q, "table"); err != nil {
			return "", urlOptions{}, err
		}
	}
	if hasMax {
		v, err := takeOne(q, "max_conns")
		if err != nil {
			return "", urlOptions{}, err
		}
		if opts.maxConns, err = strconv.Atoi(v); err != nil || opts.maxConns < 1 {
			return "", urlOptions{}, fmt.Errorf("lease: postgres URL: max_conns %q: want a whole number of connections from 1", v)
		}
	}
	u.RawQuery = q.Encode()
	return u.String(), opts, nil
}

// takeOne takes the driver's parameter name out of q, refusing it unless
// it is given once, with a value. Like every error about the URL's query,
// the error names the parameter and quotes nothing of the URL: its other
// parameters may carry a password (password=, sslpassword=).
func takeOne(q url.Values, name string) (string, error) {
	vs := q[name]
	q.Del(name)
	switch {
	case len(vs) != 1:
		return "", fmt.Errorf("lease: postgres URL: want one %s parameter with a value, got %d", name, len(vs))
	case vs[0] == "":
		return "", fmt.Errorf("lease: postgres URL: want one %s parameter with a value, got one without", name)
	}
	return vs[0], nil
}

// urlParseProblem says what net/url found wrong, in general terms: its
// errors quote the URL, or the part (a port, an escape) they refused.
func urlParseProblem(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := err.Error()
	for _, general := range []string{"invalid port", "invalid character", "invalid URL escape", "invalid userinfo", "invalid control character", "missing ']'"} {
		if strings.Contains(msg, general) {
			return general
		}
	}
	return "net/url cannot read it"
}

// parseConfigError makes pgx's refusal of a connection string one line
// that quotes none of it (pgx's own text quotes the string, hiding the
// password only where its patterns find one, and quotes values of it in
// some of its causes). It keeps what pgx found wrong and pgx's cause,
// less any value they quote (pgxCause); errors.As still finds pgx's
// *pgconn.ParseConfigError.
func parseConfigError(err error) error {
	msg := "lease: postgres: cannot parse the connection string"
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return redact.Retold(msg, err)
	}
	// pgx's text without the string: "cannot parse ``: what (cause)".
	bare := *pe
	bare.ConnString = ""
	what := strings.TrimPrefix(bare.Error(), "cannot parse ``: ")
	cause := errors.Unwrap(pe)
	if cause != nil {
		what = strings.TrimSuffix(what, " ("+cause.Error()+")")
	}
	// What pgx found wrong is its own words, but for a value it may add
	// after them ("unknown target_session_attrs value: ...").
	what, _, _ = strings.Cut(what, ": ")
	msg += ": " + what
	if cause != nil {
		msg += " (" + pgxCause(what, cause) + ")"
	}
	return redact.Retold(msg, pe)
}

// pgxCause is the text of the cause of a pgx refusal, less what it
// quotes of the connection string: a number it could not read, a part of
// a URL, a file's path (sslcert, sslkey, sslrootcert), a service name, a
// host. Any of them may be a piece of a password pasted unescaped.
func pgxCause(what string, cause error) string {
	var ne *strconv.NumError
	var pe *fs.PathError
	switch {
	case errors.As(cause, &ne):
		return ne.Err.Error()
	case strings.HasSuffix(what, "as URL"): // net/url's errors quote the URL's parts
		return urlParseProblem(cause)
	case strings.HasPrefix(what, "failed to read service"): // its causes end with the file or service
		text, _, _ := strings.Cut(cause.Error(), ":")
		return text
	case errors.As(cause, &pe): // "unable to read cert: open PATH: no such file or directory"
		return redact.Unquoted(cause, nil)
	}
	text := cause.Error()
	if i := strings.IndexAny(text, "'\"`"); i >= 0 { // "failed to split host:port in '...'"
		text = strings.TrimSuffix(strings.TrimRight(text[:i], " :,"), " in")
	}
	return text
}

// foldLines makes a pgx error of many lines one.
var foldLines = strings.NewReplacer(":\n\t", ": ", "\n\t", "; ", "\n", "; ")

func init() {
	lease.RegisterScheme("postgres", openURL)
	lease.RegisterScheme("postgresql", openURL)
}

// openURL serves lease.Open for postgres:// and postgresql:// URLs.
func openURL(ctx context.Context, url string) (lease.Driver, error) {
	return Open(ctx, url)
}

// corrupt makes an error matching lease.ErrCorrupt (R10).
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{lease.ErrCorrupt}, args...)...)
}
