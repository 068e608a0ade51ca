package lease

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// tripCounter counts a driver's storage round trips, batched or not. It
// passes PutMany and GetMany on when the driver has them, and otherwise
// does each write or read alone, counting one round trip for each.
type tripCounter struct {
	Driver
	mu    sync.Mutex // guards trips
	trips int
}

var (
	_ BatchDriver = (*tripCounter)(nil)
	_ BatchReader = (*tripCounter)(nil)
)

func (c *tripCounter) add(n int) {
	c.mu.Lock()
	c.trips += n
	c.mu.Unlock()
}

// take returns the round trips since the last take.
func (c *tripCounter) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.trips
	c.trips = 0
	return n
}

func (c *tripCounter) Get(ctx context.Context, key string) (Record, uint64, error) {
	c.add(1)
	return c.Driver.Get(ctx, key)
}

func (c *tripCounter) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	c.add(1)
	return c.Driver.Put(ctx, rec, pre)
}

func (c *tripCounter) PutMany(ctx context.Context, ws []Write) ([]PutResult, error) {
	if bd, ok := c.Driver.(BatchDriver); ok {
		c.add(1)
		return bd.PutMany(ctx, ws)
	}
	out := make([]PutResult, len(ws))
	for i, w := range ws {
		out[i].Version, out[i].Err = c.Put(ctx, w.Rec, w.Pre)
	}
	return out, nil
}

func (c *tripCounter) GetMany(ctx context.Context, keys []string) ([]GetResult, error) {
	if br, ok := c.Driver.(BatchReader); ok {
		c.add(1)
		return br.GetMany(ctx, keys)
	}
	out := make([]GetResult, len(keys))
	for i, key := range keys {
		out[i].Rec, out[i].Version, out[i].Err = c.Get(ctx, key)
	}
	return out, nil
}

// manyBackends are the stores the many-keys benchmarks run on, each with
// the floor of one renewal period: N conditional UPDATEs (or updates) in
// as few raw round trips as the backend allows.
var manyBackends = []struct {
	name string
	open func(b *testing.B) (Driver, func(b *testing.B, n int) time.Duration)
}{
	{"sqlite", openSQLiteMany},
}

var manySizes = []int{100, 1000, 10000}

func openSQLiteMany(b *testing.B) (Driver, func(b *testing.B, n int) time.Duration) {
	path := filepath.Join(b.TempDir(), "leases.db")
	d := openSQLiteAt(b, path)
	db, err := sql.Open("sqlite", sqliteDSN(path, sqliteBusyTimeout))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	update := mustPrepare(b, db, sqliteUpdate)
	version := int64(0)
	floor := func(b *testing.B, n int) time.Duration {
		if version == 0 { // the floor's own rows, written once
			tx, _ := db.Begin()
			for i := range n {
				if _, err := tx.Exec("INSERT INTO leases VALUES (?, 'floor', 1, 0, 0, 1)", fmt.Sprintf("floor:%06d", i)); err != nil {
					b.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
			version = 1
		}
		start := time.Now()
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		stmt := tx.Stmt(update)
		ms := time.Now().UnixMilli()
		for i := range n {
			if _, err := stmt.Exec("floor", 1, ms, 0, version+1, fmt.Sprintf("floor:%06d", i), version); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		version++
		return time.Since(start)
	}
	return d, floor
}

func mustPrepare(b *testing.B, db *sql.DB, q string) *sql.Stmt {
	st, err := db.Prepare(q)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// holdMany holds n keys of s through its Hold loop, acquired in batches,
// and returns the Helds with the heap bytes and goroutines they added.
func holdMany(b *testing.B, s *DocumentStore, n int) (hs []*Held, bytesPerKey float64, goroutines int) {
	keys := benchKeys(n)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	k := keeperFor(s)
	start := time.Now()
	for i, r := range s.acquireMany(context.Background(), keys) {
		if r.err != nil {
			b.Fatalf("acquire %s: %v", keys[i], r.err)
		}
		h, err := k.hold(context.Background(), holdConfig{}, r.g, start, false)
		if err != nil {
			b.Fatal(err)
		}
		hs = append(hs, h)
	}
	goroutines = runtime.NumGoroutine() - g0
	runtime.GC()
	runtime.ReadMemStats(&after)
	return hs, float64(after.HeapAlloc-before.HeapAlloc) / float64(n), goroutines
}

// BenchmarkManyRenewal measures one renewal period of N keys held through
// Hold on one store: the loop's batched renewal of every grant, beside the
// floor (N conditional UPDATEs in one raw transaction, on the same file)
// and beside renewing the keys one at a time, as a Held did before the
// loop batched (timed on up to 1,000 keys and scaled to N). It reports
// round trips per period, goroutines and heap bytes per held key.
func BenchmarkManyRenewal(b *testing.B) {
	for _, backend := range manyBackends {
		for _, n := range manySizes {
			b.Run(fmt.Sprintf("%s/N=%d", backend.name, n), func(b *testing.B) {
				d, floor := backend.open(b)
				c := &tripCounter{Driver: d}
				s, err := NewDocumentStore(c, WithOwner("bench"), WithTTL(DefaultTTL))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { s.Close() })
				hs, perKey, goroutines := holdMany(b, s, n)
				k := keeperFor(s)
				grants := func() []Grant {
					gs := make([]Grant, len(hs))
					for i, h := range hs {
						gs[i] = h.Grant()
					}
					return gs
				}
				var loopTime, floorTime, oneTime time.Duration
				var trips, oneKeys int
				for b.Loop() {
					c.take()
					start := time.Now()
					k.renewBatch(grants(), time.Now().Add(time.Minute))
					loopTime += time.Since(start)
					trips += c.take()
					floorTime += floor(b, n)
					gs := grants()[:min(n, 1000)]
					start = time.Now()
					for _, g := range gs {
						if _, err := s.Renew(context.Background(), g); err != nil {
							b.Fatal(err)
						}
					}
					oneTime += time.Since(start)
					oneKeys += len(gs)
				}
				for _, h := range hs {
					if h.Context().Err() != nil {
						b.Fatalf("%s lost: %v", h.Grant().Key, context.Cause(h.Context()))
					}
				}
				iters := float64(b.N)
				b.ReportMetric(float64(loopTime.Nanoseconds())/iters, "ns/op")
				b.ReportMetric(float64(trips)/iters, "roundtrips/op")
				b.ReportMetric(float64(floorTime.Nanoseconds())/iters, "floor-ns/op")
				b.ReportMetric(float64(loopTime)/float64(floorTime), "ratio")
				b.ReportMetric(float64(oneTime.Nanoseconds())/float64(oneKeys)*float64(n), "one-at-a-time-ns/op")
				b.ReportMetric(float64(goroutines), "goroutines")
				b.ReportMetric(perKey, "B/key")
			})
		}
	}
}

// BenchmarkManyReleaseAll measures ReleaseAll of N held keys, and the
// takeover of N keys whose holder died (expired), as Hold's waiting loop
// makes it: one batched read and one batched write.
func BenchmarkManyReleaseAll(b *testing.B) {
	for _, backend := range manyBackends {
		for _, n := range manySizes {
			b.Run(fmt.Sprintf("%s/N=%d", backend.name, n), func(b *testing.B) {
				d, _ := backend.open(b)
				c := &tripCounter{Driver: d}
				clock := newFakeClock()
				a := newDocStore(b, c, clock, "alice")
				other := newDocStore(b, c, clock, "bob")
				keys := benchKeys(n)
				var releaseTime, takeoverTime time.Duration
				var releaseTrips, takeoverTrips int
				for b.Loop() {
					mustAcquireMany(b, a, keys)
					c.take()
					start := time.Now()
					if err := a.ReleaseAll(context.Background()); err != nil {
						b.Fatal(err)
					}
					releaseTime += time.Since(start)
					releaseTrips += c.take()

					mustAcquireMany(b, a, keys) // and alice dies holding them
					clock.Advance(testTTL)
					c.take()
					start = time.Now()
					for _, g := range mustAcquireMany(b, other, keys) {
						if !g.PreviousUnclean {
							b.Fatalf("takeover of %s not PreviousUnclean", g.Key)
						}
					}
					takeoverTime += time.Since(start)
					takeoverTrips += c.take()
					if err := other.ReleaseAll(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				iters := float64(b.N)
				b.ReportMetric(float64(releaseTime.Nanoseconds())/iters, "releaseall-ns/op")
				b.ReportMetric(float64(releaseTrips)/iters, "releaseall-roundtrips/op")
				b.ReportMetric(float64(takeoverTime.Nanoseconds())/iters, "takeover-ns/op")
				b.ReportMetric(float64(takeoverTrips)/iters, "takeover-roundtrips/op")
			})
		}
	}
}

func mustAcquireMany(b *testing.B, s *DocumentStore, keys []string) []Grant {
	gs := make([]Grant, len(keys))
	for i, r := range s.acquireMany(context.Background(), keys) {
		if r.err != nil {
			b.Fatalf("acquire %s: %v", keys[i], r.err)
		}
		gs[i] = r.g
	}
	return gs
}
