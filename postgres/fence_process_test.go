//go:build unix

package postgres

import (
	"context"
	"database/sql"
	"strconv"
	"testing"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/fencechild"
	"github.com/leasekit/lease/internal/pgserver"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// TestFenceChild is the fencing child's entry point (package fencechild);
// run directly it does nothing.
func TestFenceChild(t *testing.T) {
	fencechild.Serve(t, func(url string) (fencechild.Write, func(), error) {
		connURL, u, err := splitPostgresURL(url)
		if err != nil {
			return nil, nil, err
		}
		cfg, err := pgx.ParseConfig(connURL)
		if err != nil {
			return nil, nil, err
		}
		db := stdlib.OpenDB(*cfg)
		write := func(ctx context.Context, g lease.Grant) error { return fencedWrite(ctx, db, u.table, g) }
		return write, func() { db.Close() }, nil
	})
}

// fencedWrite records (key, epoch, owner) in the writes table in a
// transaction fenced by g. The row's stamp comes from the commit counter,
// whose row lock the transaction holds until it commits, so that stamps
// order commits (see TestFenceProcessesWriteOnlyAsHolders).
func fencedWrite(ctx context.Context, db *sql.DB, table string, g lease.Grant) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := Fence(ctx, tx, g, Table(table)); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `WITH s AS (UPDATE `+table+`_seq SET n = n + 1 RETURNING n)
		INSERT INTO `+table+`_writes SELECT $1, $2::numeric, $3, n FROM s`, g.Key, strconv.FormatUint(g.Epoch, 10), g.Owner)
	if err != nil {
		return err
	}
	return tx.Commit()
}

// TestFenceProcessesWriteOnlyAsHolders (R5, R8): 8 processes (this test
// binary re-executed), their store clocks up to 35 ms apart, take two keys
// with a 50 ms TTL that they never renew, and write rows for them in
// fenced transactions while others take the keys over (package
// fencechild). An independent check then finds that every row was
// committed while the lease record named its writer's owner and epoch.
//
// The check does not trust Fence: a deferred trigger on the lease table
// logs every write of a record at its commit, stamped from a counter row
// that the committing transaction holds locked until its commit is done;
// each fenced write takes a stamp from the same counter before it commits.
// Stamps are therefore in commit order, and the record at a write's commit
// is the last one logged with a smaller stamp.
func TestFenceProcessesWriteOnlyAsHolders(t *testing.T) {
	table := pgserver.FreshTable(t)
	d, err := NewDriver(ctxBG, pgserver.SharedDB(t), Table(table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	t.Cleanup(func() {
		pgserver.SharedDB(t).Exec(`DROP TABLE IF EXISTS ` + table + `_seq, ` + table + `_writes, ` + table + `_history`)
	})
	pgExec(t,
		`CREATE TABLE `+table+`_seq (n bigint NOT NULL)`,
		`INSERT INTO `+table+`_seq VALUES (0)`,
		`CREATE TABLE `+table+`_writes (key text, epoch numeric, owner text, stamp bigint)`,
		`CREATE TABLE `+table+`_history (key text, epoch numeric, owner text, stamp bigint)`,
		`CREATE FUNCTION `+table+`_log() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			WITH s AS (UPDATE `+table+`_seq SET n = n + 1 RETURNING n)
			INSERT INTO `+table+`_history SELECT NEW.key, NEW.epoch, NEW.owner, n FROM s;
			RETURN NULL;
		END $$`,
		`CREATE CONSTRAINT TRIGGER `+table+`_log AFTER INSERT OR UPDATE ON `+table+`
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION `+table+`_log()`)

	commits, losses := fencechild.Run(t, "TestFenceChild", postgresStoreURL(t, table))

	db := pgserver.SharedDB(t)
	var written, writers, takeovers int
	err = db.QueryRow(`SELECT count(*), count(DISTINCT owner), (SELECT count(*) FROM `+table+`_history WHERE epoch > 1)
		FROM `+table+`_writes`).Scan(&written, &writers, &takeovers)
	if err != nil {
		t.Fatal(err)
	}
	bad := pgRows(t, `SELECT format('%s epoch %s by %s committed (stamp %s) while the record named %L epoch %s',
			w.key, w.epoch, w.owner, w.stamp, h.owner, coalesce(h.epoch::text, 'none'))
		FROM `+table+`_writes w LEFT JOIN LATERAL (
			SELECT owner, epoch FROM `+table+`_history h WHERE h.key = w.key AND h.stamp < w.stamp
			ORDER BY h.stamp DESC LIMIT 1) h ON true
		WHERE h.owner IS DISTINCT FROM w.owner OR h.epoch IS DISTINCT FROM w.epoch
		ORDER BY w.stamp`)
	fencechild.Check(t, commits, losses, written, writers, takeovers, bad)
}

// pgRows runs query on the shared pool and returns its one text column.
func pgRows(t *testing.T, query string) []string {
	t.Helper()
	rows, err := pgserver.SharedDB(t).Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
