//go:build unix

package postgres

import (
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekit/lease"

	"github.com/jackc/pgx/v5"
)

// BenchmarkPostgresServerClock measures what judging expiry by the
// server's clock costs (R8): the acquire and renewal of a store that
// judges by it, beside the statements the driver sent for them before it
// read the clock (without clock_timestamp(), kept here as they were),
// issued raw through the same pool. Its ratio is to be read beside
// BenchmarkPostgres's, whose floor is today's statements: before the
// server clock, the store's ratio to those statements was what
// BenchmarkPostgres showed for the same operations.
func BenchmarkPostgresServerClock(b *testing.B) {
	db, d, table, trips := countedDriver(b)
	if !lease.DriverCapabilities(d).ServerClock {
		b.Fatal("the driver does not state ServerClock")
	}
	old := statementsBeforeServerClock(table, d.(*postgresDriver).commit)
	var seq atomic.Int64
	setup := func(b *testing.B) (*lease.DocumentStore, *pgFloor) {
		s, err := lease.NewDocumentStore(d, lease.WithOwner("bench"), lease.WithTTL(time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		f := &pgFloor{d: old, db: db, key: fmt.Sprintf("floor/%d", seq.Add(1))}
		if _, err := db.ExecContext(ctxBG, old.insert, f.key, "bench", uint64(1), time.Now().Add(time.Minute).Truncate(time.Microsecond), false); err != nil {
			b.Fatal(err)
		}
		f.version, f.epoch = 1, 1
		return s, f
	}
	prefix := func() string { return fmt.Sprintf("k%d/", seq.Add(1)) }

	b.Run("acquire", func(b *testing.B) { // a new key: select, insert
		s, _ := setup(b)
		p := prefix()
		benchPairCounted(b, trips.n.Load,
			func(i int) error { _, err := s.Acquire(ctxBG, fmt.Sprintf("%s%d", p, i)); return err },
			func(i int) error {
				key := fmt.Sprintf("%sfloor/%d", p, i)
				var cols [5]any
				err := db.QueryRowContext(ctxBG, old.get, key).Scan(&cols[0], &cols[1], &cols[2], &cols[3], &cols[4])
				if err != sql.ErrNoRows {
					return fmt.Errorf("floor get of a new key: %v", err)
				}
				_, err = db.ExecContext(ctxBG, old.insert, key, "bench", uint64(1), time.Now().Add(time.Minute).Truncate(time.Microsecond), false)
				return err
			}, nil)
	})

	b.Run("renew", func(b *testing.B) { // one guarded update
		s, f := setup(b)
		g, err := s.Acquire(ctxBG, prefix()+"k")
		if err != nil {
			b.Fatal(err)
		}
		benchPairCounted(b, trips.n.Load,
			func(int) error { g, err = s.Renew(ctxBG, g); return err },
			func(int) error {
				f.epoch++
				res, err := db.ExecContext(ctxBG, old.update, f.key, f.version, "bench", f.epoch,
					time.Now().Add(time.Minute).Truncate(time.Microsecond), false)
				if err != nil {
					return err
				}
				if n, _ := res.RowsAffected(); n != 1 {
					return fmt.Errorf("floor update of %s at version %d changed %d rows", f.key, f.version, n)
				}
				f.version++
				return nil
			}, nil)
	})
}

// statementsBeforeServerClock returns the driver's get, insert and
// update as they were before they read the server's clock.
func statementsBeforeServerClock(table, commit string) *postgresDriver {
	t := pgx.Identifier{table}.Sanitize()
	setCommit := `s AS (SELECT set_config('synchronous_commit', '` + commit + `', true) AS sc)`
	const cols = `owner, epoch, expires, released, version`
	const parsable = `CASE WHEN octet_length(l.owner) BETWEEN 1 AND 256 AND l.owner !~ '[^!-~]'
		AND l.epoch BETWEEN 1 AND 18446744073709551615
		AND isfinite(l.expires) AND l.released IS NOT NULL THEN true ELSE false END`
	return &postgresDriver{
		get: `SELECT ` + cols + ` FROM ` + t + ` WHERE key = $1`,
		insert: `WITH ` + setCommit + ` INSERT INTO ` + t + ` (key, ` + cols + `)
			SELECT $1::text, $2::text, $3::numeric, $4::timestamptz, $5::boolean, 1 FROM s
			ON CONFLICT (key) DO NOTHING`,
		update: `WITH ` + setCommit + ` UPDATE ` + t + ` AS l SET owner = $3, epoch = $4, expires = $5, released = $6, version = $2 + 1
			FROM s WHERE l.key = $1 AND l.version = $2 AND ` + parsable,
	}
}
