package sqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/manybench"
)

// The many-keys benchmarks (package manybench) on a file database, beside
// the floors, written on a connection of their own to the same file, on
// rows of their own: one renewal period of n keys kept per key as the
// driver's own guarded UPDATEs in one transaction, and one renewal of a
// session as the driver's own guarded UPDATE of one lease_sessions row.
var manySQLite = manybench.Backend{Name: "sqlite", Sizes: manybench.Sizes, Open: openSQLiteMany}

// Each benchmark is package manybench's of the same name: see there for
// what it measures and reports.

func BenchmarkManyRenewal(b *testing.B)    { manybench.Renewal(b, manySQLite) }
func BenchmarkManyReleaseAll(b *testing.B) { manybench.ReleaseAll(b, manySQLite) }
func BenchmarkManyTakeover(b *testing.B)   { manybench.Takeover(b, manySQLite) }
func BenchmarkManyWaiting(b *testing.B)    { manybench.Waiting(b, manySQLite) }
func BenchmarkStartup(b *testing.B)        { manybench.Startup(b, manySQLite) }
func BenchmarkHeldSteady(b *testing.B)     { manybench.HeldSteady(b, manySQLite) }

func openSQLiteMany(b *testing.B, n int) manybench.Rig {
	path := filepath.Join(b.TempDir(), "leases.db")
	d := openSQLiteAt(b, path)
	db, err := sql.Open("sqlite", sqliteDSN(path, sqliteBusyTimeout, false))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	tx, err := db.Begin()
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		if _, err := tx.Exec("INSERT INTO leases VALUES (?, 'floor', 1, 0, 0, 1, '')", manybench.FloorKey(i)); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := tx.Exec(sqliteInsertSession, manybench.FloorSession, "floor", time.Now().Add(time.Minute).UnixMilli(), int64(lease.SessionLive)); err != nil {
		b.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	settle := func() error {
		_, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
		return err
	}
	return manybench.Rig{Driver: d, TTL: lease.DefaultTTL, Floor: sqliteKeysFloor(b, db, n), SessionFloor: sqliteSessionFloor(b, db), Settle: settle}
}

// sqliteKeysFloor renews the n floor rows, each by the driver's guarded
// UPDATE, in one transaction.
func sqliteKeysFloor(b *testing.B, db *sql.DB, n int) func(*testing.B) time.Duration {
	update, err := db.Prepare(sqliteUpdate)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { update.Close() })
	version := int64(1)
	return func(b *testing.B) time.Duration {
		start := time.Now()
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		stmt := tx.Stmt(update)
		ms := time.Now().UnixMilli()
		for i := range n {
			if _, err := stmt.Exec("floor", 1, ms, 0, "", version+1, manybench.FloorKey(i), version); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		version++
		return time.Since(start)
	}
}

// sqliteSessionFloor renews the floor's session row by the driver's
// guarded UPDATE, a transaction of its own.
func sqliteSessionFloor(b *testing.B, db *sql.DB) func(*testing.B) time.Duration {
	update, err := db.Prepare(sqliteUpdateSession)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { update.Close() })
	version := int64(1)
	return func(b *testing.B) time.Duration {
		start := time.Now()
		res, err := update.Exec("floor", time.Now().Add(lease.DefaultTTL).UnixMilli(), int64(lease.SessionLive), version+1, manybench.FloorSession, version)
		if err == nil {
			err = wantOneRow(res)
		}
		if err != nil {
			b.Fatalf("the session floor's update at version %d: %v", version, err)
		}
		version++
		return time.Since(start)
	}
}

// wantOneRow fails unless res changed exactly one row.
func wantOneRow(res sql.Result) error {
	n, err := res.RowsAffected()
	if err == nil && n != 1 {
		err = fmt.Errorf("%d rows changed, want 1", n)
	}
	return err
}
