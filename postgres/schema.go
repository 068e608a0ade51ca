package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// This file holds the driver's tables: their layout, the check that
// existing tables have that layout (or the layout before sessions, which
// it upgrades), and the check that the server keeps a committed write
// durable (R2).

// The PostgreSQL layout is two tables that psql shows as they are
// (psql -c 'TABLE leases'). The lease table has one row per key:
//
//	key       text COLLATE "C"  the leased key (R1), the primary key; byte order
//	owner     text              the owner id of the last grant
//	epoch     numeric(20,0)     the fencing token: the whole uint64 range, as a number
//	expires   timestamptz       when the grant ends, by the store's clock (microseconds)
//	released  boolean           true once the holder released the key
//	version   bigint            the compare-and-swap version: 1 on insert, +1 on every write
//	session   text              the id of the session the key is attached to, or empty (R18)
//
// and the sessions table, named after it (leases_sessions), one row per
// session (R18):
//
//	id        text COLLATE "C"  the session id: 32 lowercase hex digits, the primary key
//	owner     text              the owner id of the store that made it
//	expires   timestamptz       when the session ends unless renewed
//	state     smallint          1 live, 2 ended clean, 3 ended unclean
//	version   bigint            the compare-and-swap version, as the lease table's
//
// A partial index of the lease table on session, of the rows that name
// one, finds the keys of a session, which RemoveSessions asks for.
//
// The tables' constraints refuse rows that no store writes (NULLs, epoch
// 0 or above 2^64-1, an infinite expiry, version below 1, a session id of
// another form, a state of none of the three). The driver does not rely
// on them: it parses every row it reads and refuses a bad one with
// ErrCorrupt (R10), and its UPDATEs match only rows it would parse, so
// that a row corrupted behind a holder's back is never overwritten.
const postgresCreateTable = `CREATE TABLE IF NOT EXISTS %[1]s (
	key      text COLLATE "C" PRIMARY KEY,
	owner    text COLLATE "C" NOT NULL CHECK (octet_length(owner) BETWEEN 1 AND 256 AND owner !~ '[^!-~]'),
	epoch    numeric(20,0) NOT NULL CHECK (epoch BETWEEN 1 AND 18446744073709551615),
	expires  timestamptz NOT NULL CHECK (isfinite(expires)),
	released boolean NOT NULL,
	version  bigint NOT NULL CHECK (version >= 1),
	` + postgresSessionColumn + `
)`

// postgresSessionColumn is the lease table's session column, as a new
// table has it and as the upgrade of a table made before sessions adds
// it: a constant default, so that adding it rewrites no row.
const postgresSessionColumn = `session  text COLLATE "C" NOT NULL DEFAULT '' CHECK (session = '' OR session ~ '^[0-9a-f]{32}$')`

// postgresAddSession upgrades a lease table made before sessions: its
// rows keep their values, with session "" (no session).
const postgresAddSession = `ALTER TABLE %[1]s ADD COLUMN IF NOT EXISTS ` + postgresSessionColumn

// postgresCreateSessions makes the sessions table.
const postgresCreateSessions = `CREATE TABLE IF NOT EXISTS %[1]s (
	id      text COLLATE "C" PRIMARY KEY CHECK (id ~ '^[0-9a-f]{32}$'),
	owner   text COLLATE "C" NOT NULL CHECK (octet_length(owner) BETWEEN 1 AND 256 AND owner !~ '[^!-~]'),
	expires timestamptz NOT NULL CHECK (isfinite(expires)),
	state   smallint NOT NULL CHECK (state BETWEEN 1 AND 3),
	version bigint NOT NULL CHECK (version >= 1)
)`

// postgresCreateSessionIndex makes the lease table's index on session,
// named by the server (leases_session_idx), which picks a free name.
const postgresCreateSessionIndex = `CREATE INDEX ON %[1]s (session) WHERE session <> ''`

// postgresColumns is the lease table's shape, in order: name, type as
// format_type spells it, and whether the column is the primary key. The
// key must also compare in byte order (collation "C"), so that List's
// ranges and order are R14's.
var postgresColumns = []postgresColumn{
	{"key", "text", true},
	{"owner", "text", false},
	{"epoch", "numeric(20,0)", false},
	{"expires", "timestamp with time zone", false},
	{"released", "boolean", false},
	{"version", "bigint", false},
	{"session", "text", false},
}

// postgresColumnsBeforeSessions is the lease table's shape before
// sessions, which the driver upgrades by adding the session column.
var postgresColumnsBeforeSessions = postgresColumns[:6]

// postgresSessionColumns is the sessions table's shape.
var postgresSessionColumns = []postgresColumn{
	{"id", "text", true},
	{"owner", "text", false},
	{"expires", "timestamp with time zone", false},
	{"state", "smallint", false},
	{"version", "bigint", false},
}

// sessionsTable is the name of the sessions table of lease table table.
func sessionsTable(table string) string { return table + "_sessions" }

type postgresColumn struct {
	name, typ string
	pk        bool
}

func (c postgresColumn) String() string {
	if c.pk {
		return c.name + " " + c.typ + " PRIMARY KEY"
	}
	return c.name + " " + c.typ
}

// checkPostgresDurability refuses a session whose commits could return
// before they are durable (R2), reading the settings on c. It returns the
// session's synchronous_commit, which it accepted.
func checkPostgresDurability(ctx context.Context, c *pgx.Conn) (syncCommit string, err error) {
	var standbys, fsync string
	var inRecovery bool
	err = c.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
		current_setting('fsync'), pg_is_in_recovery()`).Scan(&syncCommit, &standbys, &fsync, &inRecovery)
	if err != nil {
		return "", fmt.Errorf("reading the durability settings: %w", err)
	}
	return syncCommit, postgresDurable(syncCommit, standbys, fsync, inRecovery)
}

// postgresDurable judges the settings that decide whether a committed
// write survives a crash of the server, and a failover to a synchronous
// standby, before the commit returns (R2).
func postgresDurable(syncCommit, standbys, fsync string, inRecovery bool) error {
	switch {
	case inRecovery:
		return errors.New("the server is a standby in recovery, which cannot take writes; " +
			"connect to the primary (a multi-host URL with target_session_attrs=read-write finds it)")
	case fsync != "on":
		return fmt.Errorf("fsync is %s: a grant would not survive a crash of the server (R2)", fsync)
	case syncCommit == "off":
		return errors.New("synchronous_commit is off: a grant could be returned before it is on disk (R2); " +
			"set it to on for the lease role or database")
	case strings.TrimSpace(standbys) != "" && syncCommit != "on" && syncCommit != "remote_apply":
		return fmt.Errorf("synchronous_commit is %s while synchronous_standby_names is %q: a grant could be "+
			"returned before a synchronous standby has it on disk, and a failover would lose it (R2); "+
			"set synchronous_commit to on or remote_apply", syncCommit, standbys)
	}
	return nil
}

// postgresSchema is what the database holds of the driver's relations,
// as read through the connection's search_path.
type postgresSchema struct {
	leases, sessions []postgresColumn // nil: no such table
	indexed          bool             // the lease table has an index led by session
}

// ready reports whether the schema is the one the driver writes.
func (s postgresSchema) ready() bool {
	return sameColumns(s.leases, postgresColumns) && sameColumns(s.sessions, postgresSessionColumns) && s.indexed
}

// refusal is the error for a table that the driver neither writes nor
// upgrades, nil when every relation is right, missing, or (the lease
// table) of the shape before sessions.
func (s postgresSchema) refusal(table string) error {
	if s.leases != nil && !sameColumns(s.leases, postgresColumns) && !sameColumns(s.leases, postgresColumnsBeforeSessions) {
		return columnsError("the table", s.leases, postgresColumns, ` with key in COLLATE "C"`, "name another with Table")
	}
	if s.sessions != nil && !sameColumns(s.sessions, postgresSessionColumns) {
		return columnsError(fmt.Sprintf("its sessions table %q", sessionsTable(table)), s.sessions, postgresSessionColumns, "",
			"drop it if nothing else uses it, or name another lease table with Table")
	}
	return nil
}

// setupPostgresTable makes the driver's schema ready for table: it
// creates what is missing (the lease table, its sessions table, the index
// on session) and upgrades a lease table made before sessions, refusing
// relations of another shape without changing anything. When everything
// is there, as on every start but the first, it only reads the catalog.
//
// Changes are made in one transaction under an advisory lock on the
// table's name, so that processes starting at once change the schema one
// after the other, each finding the last one's work (a CREATE TABLE IF
// NOT EXISTS racing another fails on the catalog's unique index). A
// failure on such an index is still taken as another process's work, and
// looked at again: a release before sessions creates the lease table
// without the lock.
func setupPostgresTable(ctx context.Context, conn *sql.Conn, table string) error {
	s, err := readPostgresSchema(ctx, conn, table)
	if err != nil {
		return err
	}
	if s.ready() {
		return nil
	}
	if err := s.refusal(table); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		err := changePostgresSchema(ctx, conn, table)
		// unique_violation, duplicate_table, duplicate_object (a row type)
		if err != nil && attempt < 3 && isPostgresCode(err, "23505", "42P07", "42710") {
			continue // another process created it at the same instant
		}
		return err
	}
}

// changePostgresSchema creates and upgrades, in one transaction holding
// the table's advisory lock, what the schema lacks.
func changePostgresSchema(ctx context.Context, conn *sql.Conn, table string) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning the schema change: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLockKey(table)); err != nil {
		return fmt.Errorf("waiting for the schema lock: %w", err)
	}
	s, err := readPostgresSchema(ctx, tx, table) // what others did before the lock was ours
	if err != nil {
		return err
	}
	if err := s.refusal(table); err != nil {
		return err
	}
	t := pgx.Identifier{table}.Sanitize()
	type step struct{ what, sql string }
	var steps []step
	switch {
	case s.leases == nil:
		steps = append(steps, step{"creating it", fmt.Sprintf(postgresCreateTable, t)})
	case !sameColumns(s.leases, postgresColumns):
		steps = append(steps, step{"adding its session column", fmt.Sprintf(postgresAddSession, t)})
	}
	if s.sessions == nil {
		steps = append(steps, step{"creating its sessions table",
			fmt.Sprintf(postgresCreateSessions, pgx.Identifier{sessionsTable(table)}.Sanitize())})
	}
	if !s.indexed {
		steps = append(steps, step{"indexing its session column", fmt.Sprintf(postgresCreateSessionIndex, t)})
	}
	for _, st := range steps {
		if _, err := tx.ExecContext(ctx, st.sql); err != nil {
			return fmt.Errorf("%s: %w", st.what, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing the schema change: %w", err)
	}
	return nil
}

// schemaLockKey is the advisory lock that serializes schema changes of
// table: a hash of the library's name and the table's.
func schemaLockKey(table string) int64 {
	h := fnv.New64a()
	h.Write([]byte("github.com/leasekit/lease schema of " + table))
	return int64(h.Sum64())
}

// catalogReader is a *sql.Conn or a *sql.Tx.
type catalogReader interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// readPostgresSchema reads the lease table, its sessions table and
// whether the lease table has an index on session: one query per table.
func readPostgresSchema(ctx context.Context, q catalogReader, table string) (s postgresSchema, err error) {
	if s.leases, s.indexed, err = postgresTableColumns(ctx, q, table); err != nil {
		return s, err
	}
	if s.sessions, _, err = postgresTableColumns(ctx, q, sessionsTable(table)); err != nil {
		return s, fmt.Errorf("its sessions table: %w", err)
	}
	return s, nil
}

// postgresTableColumns reads table's columns, in order: nil when the
// search path has no relation of that name. indexed says whether the
// table has a valid index led by a column named session, which
// RemoveSessions can use (the driver's is partial: rows naming a session).
func postgresTableColumns(ctx context.Context, q catalogReader, table string) (cols []postgresColumn, indexed bool, err error) {
	rows, err := q.QueryContext(ctx, `SELECT c.relkind::text, a.attname::text, format_type(a.atttypid, a.atttypmod),
		COALESCE(i.indisprimary AND i.indnatts = 1, false), COALESCE(co.collname::text, ''),
		EXISTS (SELECT 1 FROM pg_index si JOIN pg_attribute sa ON sa.attrelid = si.indrelid AND sa.attnum = si.indkey[0]
			WHERE si.indrelid = c.oid AND si.indisvalid AND sa.attname = 'session')
		FROM pg_class c
		LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary AND i.indkey[0] = a.attnum
		LEFT JOIN pg_collation co ON co.oid = a.attcollation
		WHERE c.oid = to_regclass($1)
		ORDER BY a.attnum`, pgx.Identifier{table}.Sanitize())
	if err != nil {
		return nil, false, fmt.Errorf("reading its columns: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			kind      string
			name, typ sql.NullString // NULL: a relation without columns
			c         postgresColumn
			coll      string
		)
		if err := rows.Scan(&kind, &name, &typ, &c.pk, &coll, &indexed); err != nil {
			return nil, false, fmt.Errorf("reading its columns: %w", err)
		}
		if kind != "r" && kind != "p" {
			return nil, false, fmt.Errorf("%q is not a table (pg_class.relkind %q); name another with Table", table, kind)
		}
		if cols == nil {
			cols = []postgresColumn{} // not nil: the table exists
		}
		if !name.Valid {
			continue
		}
		c.name, c.typ = name.String, typ.String
		if c.name == "key" && coll != "C" {
			c.typ += fmt.Sprintf(" COLLATE %q", coll) // the shape check refuses it
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("reading its columns: %w", err)
	}
	return cols, indexed, nil
}

// sameColumns reports whether have is the shape want.
func sameColumns(have, want []postgresColumn) bool {
	return slices.Equal(have, want)
}

// columnsError refuses a table of another shape, naming both.
func columnsError(what string, have, want []postgresColumn, also, advice string) error {
	list := func(cols []postgresColumn) string {
		s := make([]string, len(cols))
		for i, c := range cols {
			s[i] = c.String()
		}
		return strings.Join(s, ", ")
	}
	return fmt.Errorf("%s has columns (%s), want (%s)%s; it was not made by this library: %s",
		what, list(have), list(want), also, advice)
}
