//go:build unix

package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/pgserver"
	"github.com/leasekit/lease/internal/testkit"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// pgTripCounter counts the statements a pool sends: each is one round
// trip to the server (and so is the one-time preparation of a statement
// on a connection, counted too).
type pgTripCounter struct{ n atomic.Int64 }

func (c *pgTripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *pgTripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *pgTripCounter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *pgTripCounter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// countedDriver opens a pool on the shared server that counts the
// statements it sends, and a driver over it on a fresh table, for a
// benchmark that runs a store beside the raw statements of its floor.
func countedDriver(b *testing.B) (db *sql.DB, d lease.Driver, table string, trips *pgTripCounter) {
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(b))
	if err != nil {
		b.Fatal(err)
	}
	trips = &pgTripCounter{}
	cfg.Tracer = trips
	db = stdlib.OpenDB(*cfg)
	b.Cleanup(func() { db.Close() })
	table = pgserver.FreshTable(b)
	if d, err = NewDriver(ctxBG, db, Table(table)); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return db, d, table, trips
}

// BenchmarkPostgres runs each store operation beside its floor: the same
// statements (the driver's own SQL, with the same arguments) issued raw
// through the same pool, on the same table. Each iteration runs the
// store's operation, then the floor's, so that the server's drift hits
// both alike; ns/op is the store's, floor-ns/op the floor's, ratio their
// quotient, and round trips are the statements each sent.
func BenchmarkPostgres(b *testing.B) {
	db, d, _, trips := countedDriver(b)
	pd := d.(*postgresDriver)
	var seq atomic.Int64
	setup := func(b *testing.B) (*lease.DocumentStore, *pgFloor) {
		s, err := lease.NewDocumentStore(d, lease.WithOwner("bench"), lease.WithTTL(time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		f := &pgFloor{d: pd, db: db, key: fmt.Sprintf("floor/%d", seq.Add(1))}
		if err := f.insert(f.key); err != nil {
			b.Fatal(err)
		}
		return s, f
	}
	pair := func(b *testing.B, store, floor func(i int) error, prepare func() error) {
		benchPairCounted(b, trips.n.Load, store, floor, prepare)
	}
	prefix := func() string { return fmt.Sprintf("k%d/", seq.Add(1)) }

	b.Run("acquire", func(b *testing.B) { // a new key: select, insert
		s, f := setup(b)
		p := prefix()
		pair(b,
			func(i int) error { _, err := s.Acquire(ctxBG, fmt.Sprintf("%s%d", p, i)); return err },
			func(i int) error {
				key := fmt.Sprintf("%sfloor/%d", p, i)
				if err := f.get(key); err != sql.ErrNoRows {
					return fmt.Errorf("floor get of a new key: %v", err)
				}
				return f.insert(key)
			}, nil)
	})

	b.Run("renew", func(b *testing.B) { // one guarded update
		s, f := setup(b)
		g, err := s.Acquire(ctxBG, prefix()+"k")
		if err != nil {
			b.Fatal(err)
		}
		pair(b,
			func(int) error { g, err = s.Renew(ctxBG, g); return err },
			func(int) error { return f.update(false) }, nil)
	})

	b.Run("release", func(b *testing.B) { // one guarded update, after an untimed acquire
		s, f := setup(b)
		key := prefix() + "k"
		var g lease.Grant
		pair(b,
			func(int) error { return s.Release(ctxBG, g) },
			func(int) error { return f.update(true) },
			func() (err error) {
				if g, err = s.Acquire(ctxBG, key); err == nil {
					err = f.update(false)
				}
				return err
			})
	})

	b.Run("cycle", func(b *testing.B) { // acquire a released key, renew, release: select + 3 updates
		s, f := setup(b)
		key := prefix() + "k"
		g, err := s.Acquire(ctxBG, key)
		if err == nil {
			err = s.Release(ctxBG, g)
		}
		if err != nil {
			b.Fatal(err)
		}
		pair(b,
			func(int) error {
				g, err := s.Acquire(ctxBG, key)
				if err == nil {
					g, err = s.Renew(ctxBG, g)
				}
				if err == nil {
					err = s.Release(ctxBG, g)
				}
				return err
			},
			func(int) error {
				if err := f.get(f.key); err != nil {
					return err
				}
				for _, released := range []bool{false, false, true} {
					if err := f.update(released); err != nil {
						return err
					}
				}
				return nil
			}, nil)
	})
}

// pgFloor issues the driver's statements raw, on a key of its own.
type pgFloor struct {
	d       *postgresDriver
	db      *sql.DB
	key     string
	version int64
	epoch   uint64
}

func (f *pgFloor) get(key string) error {
	var (
		cols  rowColumns
		now   time.Time
		found bool
	)
	err := f.db.QueryRowContext(ctxBG, f.d.get, key).Scan(&now, &found, &cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5])
	if err == nil && !found {
		return sql.ErrNoRows
	}
	return err
}

func (f *pgFloor) insert(key string) error {
	_, err := f.db.ExecContext(ctxBG, f.d.insert, key, "bench", uint64(1), time.Now().Add(time.Minute).Truncate(time.Microsecond), false, "")
	if key == f.key {
		f.version, f.epoch = 1, 1
	}
	return err
}

func (f *pgFloor) update(released bool) error {
	f.epoch++
	var (
		now time.Time
		n   int64
	)
	err := f.db.QueryRowContext(ctxBG, f.d.update, f.key, f.version, "bench", f.epoch,
		time.Now().Add(time.Minute).Truncate(time.Microsecond), released, "").Scan(&now, &n)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("floor update of %s at version %d changed %d rows", f.key, f.version, n)
	}
	f.version++
	return nil
}

// benchPairCounted runs prepare (untimed, may be nil), store and floor
// b.N times each, interleaved, and reports the time and the round trips
// (as trips counts them) of each.
func benchPairCounted(b *testing.B, trips func() int64, store, floor func(i int) error, prepare func() error) {
	b.Helper()
	var storeTime, floorTime time.Duration
	var storeTrips, floorTrips int64
	timed := func(op func(int) error, i int, d *time.Duration, n *int64) {
		before := trips()
		start := time.Now()
		err := op(i)
		*d += time.Since(start)
		*n += trips() - before
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		if prepare != nil {
			if err := prepare(); err != nil {
				b.Fatal(err)
			}
		}
		timed(store, i, &storeTime, &storeTrips)
		timed(floor, i, &floorTime, &floorTrips)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(storeTime.Nanoseconds())/n, "ns/op")
	b.ReportMetric(float64(floorTime.Nanoseconds())/n, "floor-ns/op")
	b.ReportMetric(float64(storeTime)/float64(floorTime), "ratio")
	b.ReportMetric(float64(storeTrips)/n, "roundtrips/op")
	b.ReportMetric(float64(floorTrips)/n, "floor-roundtrips/op")
}

// BenchmarkHoldUncontended measures an uncontended Hold and its Release
// in a loop beside a bare Acquire and Release on the same store, in the
// same run (testkit.HoldUncontended). Round trips are the statements the
// pool sends, session writes included.
func BenchmarkHoldUncontended(b *testing.B) {
	_, d, _, trips := countedDriver(b)
	s, err := lease.NewDocumentStore(d, lease.WithOwner("bench"), lease.WithTTL(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	testkit.HoldUncontended(b, s, trips.n.Load)
}
