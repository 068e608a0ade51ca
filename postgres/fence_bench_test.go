//go:build unix

package postgres

import (
	"database/sql"
	"testing"
	"time"

	"github.com/leasekit/lease"

	"github.com/jackc/pgx/v5"
)

// BenchmarkPostgresFence runs Fence beside its floor, a plain primary-key
// SELECT … FOR SHARE of the same row, each inside a transaction of its own
// on the same pool and table; only the statement is timed (BEGIN and
// ROLLBACK are not), so that the ratio is the statement's. Round trips
// are the statements each sent.
func BenchmarkPostgresFence(b *testing.B) {
	db, d, table, trips := countedDriver(b)
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(2)
	s, err := lease.NewDocumentStore(d, lease.WithOwner("bench"), lease.WithTTL(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	g, err := s.Acquire(ctxBG, "fenced")
	if err != nil {
		b.Fatal(err)
	}
	floor := `SELECT owner FROM ` + pgx.Identifier{table}.Sanitize() + ` WHERE key = $1 FOR SHARE`
	var storeTx, floorTx *sql.Tx
	benchPairCounted(b, trips.n.Load,
		func(int) error { return Fence(ctxBG, storeTx, g, Table(table)) },
		func(int) error { var owner string; return floorTx.QueryRowContext(ctxBG, floor, g.Key).Scan(&owner) },
		func() error {
			for _, tx := range []*sql.Tx{storeTx, floorTx} {
				if tx != nil {
					tx.Rollback()
				}
			}
			if storeTx, err = db.BeginTx(ctxBG, nil); err == nil {
				floorTx, err = db.BeginTx(ctxBG, nil)
			}
			return err
		})
	storeTx.Rollback()
	floorTx.Rollback()
}
