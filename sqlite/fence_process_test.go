//go:build unix

package sqlite

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/fencechild"
)

// TestSQLiteFenceChild is the fencing child's entry point (package
// fencechild); run directly it does nothing.
func TestSQLiteFenceChild(t *testing.T) {
	fencechild.Serve(t, func(storeURL string) (fencechild.Write, func(), error) {
		dsn := url.URL{Scheme: "file", Path: strings.TrimPrefix(storeURL, "sqlite:"), RawQuery: "_pragma=busy_timeout(5000)"}
		db, err := sql.Open("sqlite", dsn.String())
		if err != nil {
			return nil, nil, err
		}
		write := func(ctx context.Context, g lease.Grant) error { return sqliteFencedWrite(ctx, db, g) }
		return write, func() { db.Close() }, nil
	})
}

// sqliteFencedWrite records (key, epoch, owner) in the writes table in a
// deferred transaction fenced by g, stamped from the commit counter. A
// busy file is a *lease.StorageError, which the child counts as nothing.
func sqliteFencedWrite(ctx context.Context, db *sql.DB, g lease.Grant) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := Fence(ctx, tx, g); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE seq SET n = n + 1`)
	if err == nil {
		_, err = tx.ExecContext(ctx, `INSERT INTO writes SELECT ?, ?, ?, n FROM seq`, g.Key, int64(g.Epoch), g.Owner)
	}
	if err == nil {
		err = tx.Commit()
	}
	if isSQLiteBusy(err) {
		return &lease.StorageError{Op: "fenced write", Key: g.Key, Err: err}
	}
	return err
}

// TestSQLiteFenceProcessesWriteOnlyAsHolders (R5, R8): 8 processes (this
// test binary re-executed) on one lease file, their store clocks up to 35
// ms apart, take two keys with a 50 ms TTL that they never renew, and
// write rows for them, in the same file, in fenced transactions while
// others take the keys over (package fencechild). An independent check
// then finds that every row was committed while the lease record named
// its writer's owner and epoch.
//
// The check does not trust Fence: triggers on the leases table log every
// new holder of a record, stamped from a counter in the same transaction,
// and each fenced write takes a stamp from that counter. SQLite commits
// one writing transaction at a time, so stamps are in commit order, and
// the record at a write's commit is the last one logged with a smaller
// stamp.
func TestSQLiteFenceProcessesWriteOnlyAsHolders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	openSQLiteAt(t, path) // creates the file and its leases table
	db := rawSQLite(t, path)
	for _, stmt := range []string{
		`CREATE TABLE seq (n INTEGER NOT NULL)`,
		`INSERT INTO seq VALUES (0)`,
		`CREATE TABLE writes (key TEXT, epoch INTEGER, owner TEXT, stamp INTEGER)`,
		`CREATE TABLE history (key TEXT, epoch INTEGER, owner TEXT, stamp INTEGER)`,
		`CREATE TRIGGER log_insert AFTER INSERT ON leases BEGIN
			UPDATE seq SET n = n + 1;
			INSERT INTO history SELECT NEW.key, NEW.epoch, NEW.owner, n FROM seq;
		END`,
		`CREATE TRIGGER log_update AFTER UPDATE OF owner, epoch ON leases BEGIN
			UPDATE seq SET n = n + 1;
			INSERT INTO history SELECT NEW.key, NEW.epoch, NEW.owner, n FROM seq;
		END`,
	} {
		mustExec(t, db, stmt)
	}

	commits, losses := fencechild.Run(t, "TestSQLiteFenceChild", "sqlite:"+path)

	var written, writers, takeovers int
	err := db.QueryRow(`SELECT count(*), count(DISTINCT owner), (SELECT count(*) FROM history WHERE epoch > 1) FROM writes`).
		Scan(&written, &writers, &takeovers)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(`SELECT w.key || ' epoch ' || w.epoch || ' by ' || w.owner || ' committed (stamp ' || w.stamp ||
			') while the record named ' || coalesce(h.owner, 'nobody') || ' epoch ' || coalesce(h.epoch, 'none')
		FROM writes w LEFT JOIN history h ON h.key = w.key
			AND h.stamp = (SELECT max(stamp) FROM history WHERE key = w.key AND stamp < w.stamp)
		WHERE h.owner IS NOT w.owner OR h.epoch IS NOT w.epoch
		ORDER BY w.stamp`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		bad = append(bad, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	fencechild.Check(t, commits, losses, written, writers, takeovers, bad)
}
