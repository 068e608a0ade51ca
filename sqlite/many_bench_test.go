package sqlite

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/manybench"
)

// The many-keys benchmarks (package manybench) on a file database, beside
// the floor: one renewal period of n keys as the driver's own guarded
// UPDATEs, in one transaction on a connection of its own to the same file,
// on n rows of their own.
var manySQLite = manybench.Backend{Name: "sqlite", Sizes: manybench.Sizes, Open: openSQLiteMany}

// Each benchmark is package manybench's of the same name: see there for
// what it measures and reports.

func BenchmarkManyRenewal(b *testing.B)    { manybench.Renewal(b, manySQLite) }
func BenchmarkManyReleaseAll(b *testing.B) { manybench.ReleaseAll(b, manySQLite) }
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
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	update, err := db.Prepare(sqliteUpdate)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { update.Close() })
	version := int64(1)
	floor := func(b *testing.B) time.Duration {
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
	return manybench.Rig{Driver: d, TTL: lease.DefaultTTL, Floor: floor}
}
