package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// The SQLite layout is two tables that the sqlite3 shell reads directly.
// leases holds one row per key:
//
//	key         TEXT     the leased key (R1), the primary key
//	owner       TEXT     the owner id of the last grant
//	epoch       INTEGER  the fencing token (see below)
//	expires_ms  INTEGER  when the grant ends, in Unix milliseconds of the store's clock
//	released    INTEGER  1 once the holder released the key, else 0
//	version     INTEGER  the compare-and-swap version: 1 on insert, +1 on every write
//	session     TEXT     the id of the session the key is attached to (R20), '' for none
//
// A session-attached key's expires_ms is lease.SessionKeyExpiry (year 9999):
// its real expiry is its session's. lease_sessions holds one row per session
// (R18):
//
//	id          TEXT     the session id (32 lowercase hex digits), the primary key
//	owner       TEXT     the owner of the store that made it
//	expires_ms  INTEGER  when the session ends unless renewed, in Unix milliseconds
//	state       INTEGER  1 live, 2 ended clean, 3 ended unclean (lease.SessionState)
//	version     INTEGER  the compare-and-swap version, as in leases
//
// The partial index leases_session holds the keys that name a session, so
// that RemoveSessions finds whether a key names one without reading the
// table, and costs nothing for keys kept per key.
//
// SQLite integers are signed 64-bit, epochs are uint64: an epoch is stored
// as the int64 with the same bits. Every epoch below 2^63 reads as itself;
// the top half reads as epoch - 2^64 (math.MaxUint64 is -1). Nothing
// compares epochs in SQL, so the full range round-trips (R2).
//
// PRAGMA user_version holds the schema version (sqliteSchemaVersion), so
// that a release can tell which layout a file has and migrate it. Version 1
// (before sessions) is the leases table without its session column; Open
// migrates it to version 2 in one transaction.
//
//	sqlite3 leases.db "SELECT key, owner, epoch, datetime(expires_ms/1000, 'unixepoch'), released, session FROM leases"
const (
	sqliteSchemaVersion = 2
	sqliteCreateTable   = `CREATE TABLE leases (
	key        TEXT    NOT NULL PRIMARY KEY,
	owner      TEXT    NOT NULL,
	epoch      INTEGER NOT NULL,
	expires_ms INTEGER NOT NULL,
	released   INTEGER NOT NULL,
	version    INTEGER NOT NULL,
	session    TEXT    NOT NULL DEFAULT ''
) WITHOUT ROWID`
	sqliteCreateSessions = `CREATE TABLE lease_sessions (
	id         TEXT    NOT NULL PRIMARY KEY,
	owner      TEXT    NOT NULL,
	expires_ms INTEGER NOT NULL,
	state      INTEGER NOT NULL,
	version    INTEGER NOT NULL
) WITHOUT ROWID`
	sqliteCreateSessionIndex = `CREATE INDEX leases_session ON leases (session) WHERE session <> ''`
	// sqliteAddSession makes a version-1 leases table a version-2 one: every
	// existing row gets session '', kept per key, as it was.
	sqliteAddSession = `ALTER TABLE leases ADD COLUMN session TEXT NOT NULL DEFAULT ''`
)

// sqliteColumnsV1 is the leases table of schema version 1, which Open
// migrates; sqliteColumns and sqliteSessionColumns are version 2's tables.
var (
	sqliteColumnsV1 = []sqliteColumn{
		{"key", "TEXT", true},
		{"owner", "TEXT", false},
		{"epoch", "INTEGER", false},
		{"expires_ms", "INTEGER", false},
		{"released", "INTEGER", false},
		{"version", "INTEGER", false},
	}
	sqliteColumns        = append(sqliteColumnsV1[:len(sqliteColumnsV1):len(sqliteColumnsV1)], sqliteColumn{"session", "TEXT", false})
	sqliteSessionColumns = []sqliteColumn{
		{"id", "TEXT", true},
		{"owner", "TEXT", false},
		{"expires_ms", "INTEGER", false},
		{"state", "INTEGER", false},
		{"version", "INTEGER", false},
	}
)

// sqliteColumn is a column as Open checks it: its name, declared type and
// whether it is the primary key.
type sqliteColumn struct {
	name, typ string
	pk        bool
}

func (c sqliteColumn) String() string {
	if c.pk {
		return c.name + " " + c.typ + " PRIMARY KEY"
	}
	return c.name + " " + c.typ
}

// schemaAction is what a file's schema needs before the driver can use it.
type schemaAction int

const (
	schemaReady   schemaAction = iota // version 2, both tables in shape
	schemaCreate                      // a new file: no tables, user_version 0
	schemaMigrate                     // version 1: add sessions
)

// checkSQLiteSchema reads the schema version and the tables' shapes and
// says what the file needs, or why it is refused: not what this library
// writes.
func checkSQLiteSchema(ctx context.Context, conn *sql.Conn) (schemaAction, error) {
	var version int64
	if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return 0, fmt.Errorf("reading the schema version: %w", err)
	}
	leases, err := sqliteTableColumns(ctx, conn, "leases")
	if err != nil {
		return 0, err
	}
	sessions, err := sqliteTableColumns(ctx, conn, "lease_sessions")
	if err != nil {
		return 0, err
	}
	switch {
	case len(leases) == 0 && len(sessions) == 0 && version == 0:
		return schemaCreate, nil
	case len(leases) == 0 && version == 0:
		return 0, fmt.Errorf("a lease_sessions table exists, but no leases table and user_version is 0: it was not made by this library")
	case len(leases) == 0:
		return 0, fmt.Errorf("user_version is %d but there is no leases table: the file belongs to another program; "+
			"use a database file of its own for leases", version)
	case version == 0:
		return 0, fmt.Errorf("a leases table exists, but user_version is 0: it was not made by this library")
	case version > sqliteSchemaVersion:
		return 0, fmt.Errorf("schema version %d (user_version) is newer than this library's %d: upgrade the library",
			version, sqliteSchemaVersion)
	case version == 1 && len(sessions) != 0:
		return 0, fmt.Errorf("schema version 1 has no lease_sessions table, but the file has one: it was not made by this library")
	case version == 1:
		return schemaMigrate, checkSQLiteColumns("leases", leases, sqliteColumnsV1)
	case version != sqliteSchemaVersion:
		return 0, fmt.Errorf("user_version %d is not a lease schema version", version)
	case len(sessions) == 0:
		return 0, fmt.Errorf("schema version %d, but there is no lease_sessions table: it was not made by this library", version)
	}
	if err := checkSQLiteColumns("leases", leases, sqliteColumns); err != nil {
		return 0, err
	}
	return schemaReady, checkSQLiteColumns("lease_sessions", sessions, sqliteSessionColumns)
}

// sqliteTableColumns lists a table's columns; none if it is absent.
func sqliteTableColumns(ctx context.Context, conn *sql.Conn, table string) ([]sqliteColumn, error) {
	rows, err := conn.QueryContext(ctx, "SELECT name, type, pk FROM pragma_table_info(?)", table)
	if err != nil {
		return nil, fmt.Errorf("reading the %s table: %w", table, err)
	}
	defer rows.Close()
	var cols []sqliteColumn
	for rows.Next() {
		var c sqliteColumn
		var pk int64
		if err := rows.Scan(&c.name, &c.typ, &pk); err != nil {
			return nil, fmt.Errorf("reading the %s table: %w", table, err)
		}
		c.pk = pk != 0
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the %s table: %w", table, err)
	}
	return cols, nil
}

// checkSQLiteColumns refuses a table of another shape than want.
func checkSQLiteColumns(table string, cols, want []sqliteColumn) error {
	ok := len(cols) == len(want)
	for i := 0; ok && i < len(cols); i++ {
		ok = cols[i].name == want[i].name && strings.EqualFold(cols[i].typ, want[i].typ) && cols[i].pk == want[i].pk
	}
	if ok {
		return nil
	}
	return fmt.Errorf("the %s table has columns (%s), want (%s)", table, joinColumns(cols), joinColumns(want))
}

func joinColumns(cols []sqliteColumn) string {
	s := make([]string, len(cols))
	for i, c := range cols {
		s[i] = c.String()
	}
	return strings.Join(s, ", ")
}

// ensureSQLiteSchema checks the schema version and the tables' shapes
// and, on a new file, creates them, or on a version-1 file migrates them,
// all in one transaction under the write lock: another process creating
// or migrating them at the same instant is either wholly before or wholly
// after, and the later one finds the work done. A refused file is rolled
// back untouched.
func ensureSQLiteSchema(ctx context.Context, conn *sql.Conn) (err error) {
	// Most opens find the schema in place: check it in a read transaction
	// (one snapshot), which a writer holding the write lock does not block.
	action, err := checkSQLiteSchemaRead(ctx, conn)
	if err != nil || action == schemaReady {
		return err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		}
	}()
	if action, err = checkSQLiteSchema(ctx, conn); err != nil {
		return err
	}
	setVersion := fmt.Sprintf("PRAGMA user_version = %d", sqliteSchemaVersion)
	stmts, what := []string{"COMMIT"}, "checking the schema"
	switch action {
	case schemaCreate:
		stmts = []string{sqliteCreateTable, sqliteCreateSessions, sqliteCreateSessionIndex, setVersion, "COMMIT"}
		what = "creating the tables"
	case schemaMigrate:
		stmts = []string{sqliteAddSession, sqliteCreateSessions, sqliteCreateSessionIndex, setVersion, "COMMIT"}
		what = fmt.Sprintf("migrating schema version 1 to %d", sqliteSchemaVersion)
	}
	for _, stmt := range stmts {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// checkSQLiteSchemaRead is checkSQLiteSchema in a read transaction of its own.
func checkSQLiteSchemaRead(ctx context.Context, conn *sql.Conn) (schemaAction, error) {
	if _, err := conn.ExecContext(ctx, "BEGIN DEFERRED"); err != nil {
		return 0, err
	}
	defer func() { _, _ = conn.ExecContext(context.Background(), "ROLLBACK") }()
	return checkSQLiteSchema(ctx, conn)
}
