// Package sqlite is the SQLite document driver of package lease: a table
// of leases and one of sessions in one file, shared by every process of a
// host (modernc.org/sqlite, pure Go, no cgo). It imports no other database
// library.
//
// Importing it registers the "sqlite:" scheme with lease.Open:
//
//	import _ "github.com/leasekit/lease/sqlite"
//
//	s, err := lease.Open(ctx, "sqlite:/var/lib/app/leases.db")
//
// Open returns the driver itself, for a store built with
// lease.NewDocumentStore. The layout, durability and what it refuses:
// docs/sqlite.md in the repository. The rules it keeps (R1–R24):
// docs/contract.md.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/redact"

	"modernc.org/sqlite" // the "sqlite" database/sql driver: pure Go, no cgo
)

// The SQL of the driver's reads and writes. The layout of the tables they
// read and write, and how Open makes or migrates it: schema.go.
const (
	sqliteGet    = `SELECT owner, epoch, expires_ms, released, version, session FROM leases WHERE key = ?`
	sqliteRowsIn = `SELECT key, owner, epoch, expires_ms, released, version, session FROM leases WHERE key IN (%s)`
	// sqliteList is an index range on the primary key. The key column has
	// the BINARY collation (memcmp), so ORDER BY key is ascending byte
	// order and the range [prefix, successor(prefix)) is exactly the keys
	// that begin with prefix. ?2 is NULL when prefix has no successor.
	sqliteList = `SELECT key, owner, epoch, expires_ms, released, version, session FROM leases
	WHERE key >= ?1 AND (?2 IS NULL OR key < ?2) AND key > ?3 ORDER BY key LIMIT ?4`
	sqliteInsert = `INSERT INTO leases (key, owner, epoch, expires_ms, released, session, version)
	VALUES (?, ?, ?, ?, ?, ?, 1) ON CONFLICT (key) DO NOTHING`
	// The update also requires the row to be one that Get parses and the
	// store accepts, so that a row corrupted behind a holder's back is not
	// overwritten by its Renew or Release: the conflict makes the store
	// re-read and fail with ErrCorrupt (R10). A stored owner equal to the
	// one written (a renewal's) is valid text as that one is, which spares
	// a renewal the owner's pattern match; a stored session is '' or a
	// session id (sqliteSessionIDCheck).
	sqliteUpdate = `UPDATE leases SET owner = ?1, epoch = ?2, expires_ms = ?3, released = ?4, session = ?5, version = ?6
	WHERE key = ?7 AND version = ?8 AND typeof(version) = 'integer'
	AND (owner = ?1 OR typeof(owner) = 'text' AND length(owner) BETWEEN 1 AND 256 AND owner NOT GLOB '*[^!-~]*')
	AND typeof(epoch) = 'integer' AND epoch <> 0
	AND typeof(expires_ms) = 'integer' AND typeof(released) = 'integer' AND released IN (0, 1)
	AND typeof(session) = 'text' AND (session = '' OR ` + sqliteSessionIDCheck + `)`
	// sqliteSessionIDCheck is lease.ValidateSessionID in SQL, for a text
	// value: 32 bytes, each a lowercase hex digit (GLOB is case-sensitive).
	sqliteSessionIDCheck = `length(session) = 32 AND session NOT GLOB '*[^0-9a-f]*'`
)

// sqliteNotADB is SQLite's result code for a file that is not a database.
const sqliteNotADB = 26

// sqliteReadConns bounds the read-only connections of one driver: reads
// (Get, GetMany, List) run on them, beside the one writer connection, so
// that in WAL mode they read the last commit while a write holds the
// writer, instead of queueing behind it.
const sqliteReadConns = 4

// sqliteWriterCacheKiB bounds the writer's page cache (SQLite's default
// is 2 MiB). A renewal call updates rows all over the table when its keys
// do not lie together (Holds that came one by one); with the table's pages
// in the cache it reads none of them back. 16 MiB holds the table of about
// 200,000 leases; the cache grows only as pages are read.
const sqliteWriterCacheKiB = 16 << 10

// sqliteBusyTimeout is how long a write waits for another connection or
// process to finish its write before failing with SQLITE_BUSY.
const sqliteBusyTimeout = 5 * time.Second

// Open opens the SQLite database file at path as a Driver (a
// lease.SessionDriver), creating the file and its tables if they do not
// exist. Several processes on one host may open the same file; their
// stores then lease from each other. A file of schema version 1 (before
// sessions) is migrated in one transaction; a library of that version
// then refuses the file as newer than itself.
//
// Every write is durable before it returns (WAL with synchronous=FULL): a
// grant survives a crash or power loss (R2). Writes go through one
// connection; reads through up to four read-only ones beside it, so that
// Holder, Holders and the first read of an acquire do not wait for a
// write in progress (WAL lets them read the last commit). A write that finds another
// process writing waits up to five seconds for it, then fails with an error
// that the store reports as a *StorageError.
//
// Open refuses, without changing anything, a path in a missing
// directory, a directory, a file that is not an SQLite database, and a
// database whose tables or schema version this library did not write.
// Use a file of its own for leases. Do not open the file with other code in
// the same process (os.Open and Close would drop SQLite's POSIX locks).
func Open(path string) (lease.Driver, error) {
	return openSQLite(path, sqliteBusyTimeout)
}

// openSQLite is Open with a chosen busy timeout, for tests.
func openSQLite(path string, busy time.Duration) (lease.Driver, error) {
	abs, err := checkSQLitePath(path)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", sqliteDSN(abs, busy, false))
	if err != nil {
		return nil, fmt.Errorf("lease: sqlite %s: %w", abs, err)
	}
	rdb, err := sql.Open("sqlite", sqliteDSN(abs, busy, true))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("lease: sqlite %s: %w", abs, err)
	}
	// One connection: this process's writers queue in database/sql, which
	// hands over at once, instead of in SQLite's busy handler, which polls
	// with sleeps of up to 100 ms. Writes serialise on the file's write
	// lock anyway, and a read costs microseconds.
	db.SetMaxOpenConns(1)
	// Reads need no write lock: in WAL mode a read-only connection reads
	// the last commit while the writer's transaction is in progress.
	rdb.SetMaxOpenConns(sqliteReadConns)
	rdb.SetMaxIdleConns(sqliteReadConns)
	d := &sqliteDriver{db: db, rdb: rdb, path: abs}
	// The open's deadline: as long as a write may wait for the lock.
	ctx, cancel := context.WithTimeout(context.Background(), max(busy, time.Second))
	defer cancel()
	if err := d.setup(ctx); err != nil {
		d.closeAll()
		var se *sqlite.Error
		if errors.As(err, &se) && se.Code()&0xff == sqliteNotADB {
			return nil, fmt.Errorf("lease: sqlite %s is not an SQLite database: %w", abs, err)
		}
		return nil, fmt.Errorf("lease: sqlite %s: %w", abs, err)
	}
	return d, nil
}

// checkSQLitePath turns the bad paths SQLite would report vaguely ("unable
// to open database file") into clear errors, using only stat so that no
// descriptor on the database is opened and closed behind SQLite's back.
func checkSQLitePath(path string) (string, error) {
	if path == "" {
		return "", errors.New("lease: sqlite: empty database path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("lease: sqlite %s: %w", path, err)
	}
	dir := filepath.Dir(abs)
	switch fi, err := os.Stat(dir); {
	case err != nil:
		return "", fmt.Errorf("lease: sqlite %s: directory %s: %w", abs, dir, err)
	case !fi.IsDir():
		return "", fmt.Errorf("lease: sqlite %s: %s is not a directory", abs, dir)
	}
	switch fi, err := os.Stat(abs); {
	case errors.Is(err, os.ErrNotExist):
		return abs, nil // SQLite creates it
	case err != nil:
		return "", fmt.Errorf("lease: sqlite %s: %w", abs, err)
	case fi.IsDir():
		return "", fmt.Errorf("lease: sqlite %s is a directory, want a database file", abs)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("lease: sqlite %s is not a regular file (mode %s)", abs, fi.Mode())
	}
	return abs, nil
}

// sqliteDSN names the file as a URI, so that any byte of the path is
// escaped, with the per-connection pragmas that every pooled connection
// runs when it opens, and BEGIN IMMEDIATE for transactions (PutMany), so
// that a batch waits for the write lock at its start under the busy
// timeout instead of failing when it upgrades a read. journal_mode is not
// among the pragmas: it is a persistent change to the file, made by setup
// only after the file has been checked. A reader's connections are
// query_only: the read pool can never write.
func sqliteDSN(abs string, busy time.Duration, reader bool) string {
	q := url.Values{"_pragma": {
		fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()),
		"synchronous(FULL)",
		fmt.Sprintf("cache_size(%d)", -sqliteWriterCacheKiB),
	}, "_txlock": {"immediate"}} // a batch takes the write lock at BEGIN, waiting as a write does
	if reader {
		q = url.Values{"_pragma": {fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()), "query_only(1)"}}
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: q.Encode()}).String()
}

// sqliteDriver is a Driver over one SQLite file. It is safe for concurrent
// use: database/sql serialises the writes on its one writer connection,
// and reads run beside them on the read pool.
type sqliteDriver struct {
	db      *sql.DB // the writer: one connection
	rdb     *sql.DB // the readers: up to sqliteReadConns query_only connections
	path    string
	get     *sql.Stmt
	getOne  *sql.Stmt // GetMany of one key (sqliteRowsIn with one key): a lone Hold's look
	insert  *sql.Stmt
	update  *sql.Stmt
	list    *sql.Stmt
	getSess *sql.Stmt // the session statements: session.go
	putSess *sql.Stmt
	updSess *sql.Stmt
	rmSess  *sql.Stmt
	closed  atomic.Bool
	commits atomic.Int64 // PutMany's transactions, for the benchmarks' round-trip counts
}

var (
	_ lease.BatchDriver   = (*sqliteDriver)(nil)
	_ lease.BatchReader   = (*sqliteDriver)(nil)
	_ lease.ListDriver    = (*sqliteDriver)(nil)
	_ lease.SessionDriver = (*sqliteDriver)(nil)
)

// setup checks the file and its schema, creates the tables when the file
// is new or migrates them when they are of schema version 1, switches the
// file to WAL and prepares the statements. It writes nothing to a file it
// refuses.
func (d *sqliteDriver) setup(ctx context.Context) error {
	if err := d.setupFile(ctx); err != nil {
		return err
	}
	var err error
	for _, p := range []struct {
		stmt  **sql.Stmt
		query string
		db    *sql.DB
	}{
		{&d.get, sqliteGet, d.rdb}, {&d.getOne, fmt.Sprintf(sqliteRowsIn, "?"), d.rdb}, {&d.insert, sqliteInsert, d.db}, {&d.update, sqliteUpdate, d.db}, {&d.list, sqliteList, d.rdb},
		{&d.getSess, sqliteGetSession, d.rdb}, {&d.putSess, sqliteInsertSession, d.db}, {&d.updSess, sqliteUpdateSession, d.db},
		{&d.rmSess, sqliteRemoveSessions, d.db},
	} {
		if *p.stmt, err = p.db.PrepareContext(ctx, p.query); err != nil {
			return err
		}
	}
	return nil
}

// setupFile does setup's checks and changes on one connection, which it
// gives back to the pool (of one) when done. Several processes may open a
// new or a version-1 file at the same instant: the check and the creation
// or migration are one transaction under the write lock, so each opener
// sees either the old schema or the whole new one, and the switch to WAL
// is retried while another opener holds the lock it needs.
func (d *sqliteDriver) setupFile(ctx context.Context) error {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ensureSQLiteSchema(ctx, conn); err != nil {
		return err
	}
	return switchToWAL(ctx, conn)
}

// switchToWAL makes the file's journal WAL, a persistent change. The
// change needs the file to itself, and SQLite does not run the busy
// handler for it, so a SQLITE_BUSY (another opener reading or writing) is
// retried with short pauses until ctx ends.
func switchToWAL(ctx context.Context, conn *sql.Conn) error {
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err == nil && strings.EqualFold(mode, "wal") {
		return nil // already WAL: nothing to switch, no lock needed
	}
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		var mode string
		err := conn.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode)
		switch {
		case err == nil && !strings.EqualFold(mode, "wal"):
			return fmt.Errorf("journal mode is %q after switching to WAL; is the file on a network file system?", mode)
		case err == nil:
			return nil
		case !isSQLiteBusy(err):
			return fmt.Errorf("switching to WAL: %w", err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("switching to WAL: %w (still busy when the open's deadline passed: %w)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// isSQLiteBusy reports SQLITE_BUSY or SQLITE_LOCKED, with extended codes.
func isSQLiteBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code()&0xff == 5 || se.Code()&0xff == 6)
}

// Name returns "sqlite".
func (d *sqliteDriver) Name() string { return "sqlite" }

// Capabilities: the database file's locks exclude other processes; rows
// keep ExpiresAt in milliseconds; sessions are kept in lease_sessions,
// and each key's session in its row (R24).
func (*sqliteDriver) Capabilities() lease.Capabilities {
	return lease.Capabilities{CrossProcess: true, ExpiryResolution: time.Millisecond, Sessions: true}
}

// Get reads key's record. A row with a NULL, non-integer or out-of-range
// column is an error matching ErrCorrupt; the row is left as it is (R10).
func (d *sqliteDriver) Get(ctx context.Context, key string) (lease.Record, uint64, error) {
	if d.closed.Load() {
		return lease.Record{}, 0, lease.ErrClosed
	}
	var cols [6]any
	err := d.get.QueryRowContext(ctx, key).Scan(&cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5])
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return lease.Record{}, 0, lease.ErrNotFound
	case err != nil:
		return lease.Record{}, 0, d.fail("get", key, err)
	}
	return parseSQLiteRow(key, cols)
}

// parseSQLiteRow turns the columns owner, epoch, expires_ms, released,
// version and session into a record, refusing any value this driver would
// not write.
func parseSQLiteRow(key string, cols [6]any) (lease.Record, uint64, error) {
	owner, ok := cols[0].(string)
	if !ok {
		return lease.Record{}, 0, corruptColumn(key, "owner", cols[0], "text")
	}
	var ints [4]int64
	for i, name := range [4]string{"epoch", "expires_ms", "released", "version"} {
		v, ok := cols[i+1].(int64)
		if !ok {
			return lease.Record{}, 0, corruptColumn(key, name, cols[i+1], "an integer")
		}
		ints[i] = v
	}
	epoch, expiresMs, released, version := ints[0], ints[1], ints[2], ints[3]
	if released != 0 && released != 1 {
		return lease.Record{}, 0, corrupt("sqlite row %q: released is %d, want 0 or 1", key, released)
	}
	if version < 1 {
		return lease.Record{}, 0, corrupt("sqlite row %q: version is %d, want at least 1", key, version)
	}
	session, ok := cols[5].(string)
	if !ok {
		return lease.Record{}, 0, corruptColumn(key, "session", cols[5], "text")
	}
	if session != "" && lease.ValidateSessionID(session) != nil {
		return lease.Record{}, 0, corrupt("sqlite row %q: session is %q, want '' or a session id of 32 lowercase hex digits", key, session)
	}
	rec := lease.Record{
		Key:       key,
		Owner:     owner,
		Epoch:     uint64(epoch), // the stored bits are the uint64's bits
		ExpiresAt: time.UnixMilli(expiresMs).UTC(),
		Released:  released == 1,
		Session:   session,
	}
	return rec, uint64(version), nil
}

// corruptColumn reports a column holding the wrong kind of value.
func corruptColumn(key, name string, v any, want string) error {
	return corrupt("sqlite row %q: %s is %s, want %s", key, name, describeValue(v), want)
}

// describeValue names an SQLite value and its kind, for an error.
func describeValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "NULL"
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case float64:
		return fmt.Sprintf("the real %v", v)
	case string:
		return fmt.Sprintf("the text %q", v)
	case []byte:
		return fmt.Sprintf("a %d-byte blob", len(v))
	}
	return fmt.Sprintf("%T", v)
}

// Put writes rec in one statement if pre holds: an INSERT that does nothing
// when the key exists (Absent), or an UPDATE guarded by the version. No
// row changed means the precondition failed: ErrConflict. It returns once
// the write is durable (synchronous=FULL).
func (d *sqliteDriver) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	if d.closed.Load() {
		return 0, lease.ErrClosed
	}
	next, err := d.putWith(ctx, d.insert, d.update, rec, pre)
	if err != nil && !errors.Is(err, lease.ErrConflict) {
		return 0, d.fail("put", rec.Key, err)
	}
	return next, err
}

// putWith runs Put's statement: insert or update, which may be bound to a
// transaction. It returns ErrConflict when pre does not hold, and the
// database's error unwrapped.
func (d *sqliteDriver) putWith(ctx context.Context, insert, update *sql.Stmt, rec lease.Record, pre lease.Precondition) (uint64, error) {
	epoch, expiresMs, released := sqliteValues(rec)
	var res sql.Result
	var err error
	next := uint64(1)
	switch {
	case pre.Absent:
		res, err = insert.ExecContext(ctx, rec.Key, rec.Owner, epoch, expiresMs, released, rec.Session)
	case pre.Version == 0 || pre.Version > math.MaxInt64:
		return 0, lease.ErrConflict // no stored row has such a version
	case pre.Version == math.MaxInt64:
		return 0, fmt.Errorf("version %d is the largest SQLite stores", pre.Version)
	default:
		next = pre.Version + 1
		res, err = update.ExecContext(ctx, rec.Owner, epoch, expiresMs, released, rec.Session, int64(next), rec.Key, int64(pre.Version))
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

// sqliteValues are rec's epoch, expires_ms and released columns as Put
// writes them: the epoch's uint64 bits, Unix milliseconds, 0 or 1.
func sqliteValues(rec lease.Record) (epoch, expiresMs, released int64) {
	if rec.Released {
		released = 1
	}
	return int64(rec.Epoch), rec.ExpiresAt.UnixMilli(), released
}

// fail wraps a database error; after Close it is ErrClosed. A write error
// here leaves the outcome unknown, and the store re-reads (R9).
func (d *sqliteDriver) fail(op, key string, err error) error {
	if d.closed.Load() {
		return lease.ErrClosed
	}
	return fmt.Errorf("sqlite %s %s %q: %w", d.path, op, key, err)
}

// Close closes the database. Later calls fail with ErrClosed.
func (d *sqliteDriver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	return d.closeAll()
}

// closeAll closes the statements and both pools.
func (d *sqliteDriver) closeAll() error {
	var errs []error
	for _, s := range []*sql.Stmt{d.get, d.getOne, d.insert, d.update, d.list, d.getSess, d.putSess, d.updSess, d.rmSess} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	errs = append(errs, d.rdb.Close(), d.db.Close())
	return errors.Join(errs...)
}

func init() {
	lease.RegisterScheme("sqlite", openURL)
}

// openURL serves lease.Open for sqlite:PATH URLs (sqlite:/path/leases.db,
// or sqlite:///path/leases.db). A URL that names a host is refused, and
// not shown: what would be its user info may hold a password. So is one
// with a query: the errors would show it as part of the path.
func openURL(_ context.Context, url string) (lease.Driver, error) {
	path := strings.TrimPrefix(url, "sqlite:")
	if strings.HasPrefix(path, "//") && !strings.HasPrefix(path, "///") {
		return nil, errors.New("lease: sqlite: URL names a host (sqlite://HOST/...); want sqlite:/path/leases.db")
	}
	if err := redact.NoQuery("sqlite", url, "sqlite:/path/leases.db"); err != nil {
		return nil, err
	}
	return Open(path)
}

// corrupt makes an error matching lease.ErrCorrupt (R10).
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{lease.ErrCorrupt}, args...)...)
}
