package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// This file holds the driver's table: its layout, the check that an
// existing table has that layout, and the check that the server keeps a
// committed write durable (R2).

// The PostgreSQL layout is one table, one row per key, that psql shows as
// it is (psql -c 'TABLE leases'):
//
//	key       text COLLATE "C"  the leased key (R1), the primary key; byte order
//	owner     text              the owner id of the last grant
//	epoch     numeric(20,0)     the fencing token: the whole uint64 range, as a number
//	expires   timestamptz       when the grant ends, by the store's clock (microseconds)
//	released  boolean           true once the holder released the key
//	version   bigint            the compare-and-swap version: 1 on insert, +1 on every write
//
// The table's constraints refuse rows that no store writes (NULLs, epoch
// 0 or above 2^64-1, an infinite expiry, version below 1). The driver does
// not rely on them: it parses every row it reads and refuses a bad one
// with ErrCorrupt (R10), and its UPDATE matches only rows it would parse,
// so that a row corrupted behind a holder's back is never overwritten.
const postgresCreateTable = `CREATE TABLE IF NOT EXISTS %[1]s (
	key      text COLLATE "C" PRIMARY KEY,
	owner    text COLLATE "C" NOT NULL CHECK (octet_length(owner) BETWEEN 1 AND 256 AND owner !~ '[^!-~]'),
	epoch    numeric(20,0) NOT NULL CHECK (epoch BETWEEN 1 AND 18446744073709551615),
	expires  timestamptz NOT NULL CHECK (isfinite(expires)),
	released boolean NOT NULL,
	version  bigint NOT NULL CHECK (version >= 1)
)`

// postgresColumns is the shape the driver accepts, in order: name, type as
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
}

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

// setupPostgresTable creates the table when it is missing and checks its
// shape. Several processes may do this at once on an empty database:
// CREATE TABLE IF NOT EXISTS can then fail on the catalog's unique index
// or on the table's row type, and a second look finds the table the
// winner made.
func setupPostgresTable(ctx context.Context, conn *sql.Conn, table string) error {
	for attempt := 0; ; attempt++ {
		cols, exists, err := postgresTableColumns(ctx, conn, table)
		if err != nil {
			return err
		}
		if exists {
			return checkPostgresColumns(cols)
		}
		_, err = conn.ExecContext(ctx, fmt.Sprintf(postgresCreateTable, pgx.Identifier{table}.Sanitize()))
		// unique_violation, duplicate_table, duplicate_object (its row type)
		if err != nil && attempt < 3 && isPostgresCode(err, "23505", "42P07", "42710") {
			continue // another process created it at the same instant
		}
		if err != nil {
			return fmt.Errorf("creating it: %w", err)
		}
	}
}

// postgresTableColumns reads table's columns, in order; exists is false
// when the search path has no relation of that name.
func postgresTableColumns(ctx context.Context, conn *sql.Conn, table string) (cols []postgresColumn, exists bool, err error) {
	var kind string
	err = conn.QueryRowContext(ctx, `SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)`,
		pgx.Identifier{table}.Sanitize()).Scan(&kind)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("looking it up: %w", err)
	case kind != "r" && kind != "p":
		return nil, true, fmt.Errorf("%q is not a table (pg_class.relkind %q); name another with Table", table, kind)
	}
	rows, err := conn.QueryContext(ctx, `SELECT a.attname::text, format_type(a.atttypid, a.atttypmod),
		COALESCE(i.indisprimary AND i.indnatts = 1, false), COALESCE(c.collname::text, '')
		FROM pg_attribute a
		LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary AND i.indkey[0] = a.attnum
		LEFT JOIN pg_collation c ON c.oid = a.attcollation
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, pgx.Identifier{table}.Sanitize())
	if err != nil {
		return nil, true, fmt.Errorf("reading its columns: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c postgresColumn
		var coll string
		if err := rows.Scan(&c.name, &c.typ, &c.pk, &coll); err != nil {
			return nil, true, fmt.Errorf("reading its columns: %w", err)
		}
		if c.name == "key" && coll != "C" {
			c.typ += fmt.Sprintf(" COLLATE %q", coll) // the shape check refuses it
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, true, fmt.Errorf("reading its columns: %w", err)
	}
	return cols, true, nil
}

// checkPostgresColumns refuses a table of another shape, naming both.
func checkPostgresColumns(cols []postgresColumn) error {
	ok := len(cols) == len(postgresColumns)
	for i := 0; ok && i < len(cols); i++ {
		ok = cols[i] == postgresColumns[i]
	}
	if ok {
		return nil
	}
	have := make([]string, len(cols))
	for i, c := range cols {
		have[i] = c.String()
	}
	want := make([]string, len(postgresColumns))
	for i, c := range postgresColumns {
		want[i] = c.String()
	}
	return fmt.Errorf("the table has columns (%s), want (%s) with key in COLLATE \"C\"; "+
		"it was not made by this library: name another with Table", strings.Join(have, ", "), strings.Join(want, ", "))
}
