package sqlite

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testclock"
	"github.com/leasekit/lease/internal/testkit"
)

// BenchmarkSQLite measures each store operation on a file database beside
// its floor: the raw statements it cannot avoid, issued straight through
// database/sql on a connection of its own to the same file, with the same
// pragmas (WAL, synchronous=FULL). Each iteration runs
// the operation and its floors in turn, rotating the order, so that all
// three meet the same disk: a commit's fsync time drifts by several times
// over a run on a shared disk, and floors measured in a separate benchmark
// would compare different minutes. Each line reports:
//
//	ns/op              the store operation alone
//	roundtrips/op      its Driver calls
//	update-floor-ns/op as many conditional UPDATEs as it makes round trips (the floor)
//	update-ratio       ns/op over update-floor-ns/op
//	exact-floor-ns/op  the statements it issues: a SELECT per Get, an UPDATE per Put
//	exact-ratio        ns/op over exact-floor-ns/op
func BenchmarkSQLite(b *testing.B) {
	for _, op := range []struct {
		name  string
		exact string // the statements one operation issues: S = SELECT, U = conditional UPDATE
		op    func(s *lease.DocumentStore, f *testkit.CountingDriver, clock *testclock.Clock) benchOp
	}{
		{"acquire", "SU", benchAcquire},
		{"renew", "U", benchRenew},
		{"release", "U", benchRelease},
		{"cycle", "SUU", benchCycle},
	} {
		b.Run(op.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "leases.db")
			f := &testkit.CountingDriver{Driver: openSQLiteAt(b, path)}
			clock := testclock.New()
			run := op.op(testkit.NewDocStore(b, f, clock, "bench"), f, clock)
			floor := newRawFloor(b, path)
			updates := strings.Repeat("U", len(op.exact))
			var opTime, updateTime, exactTime time.Duration
			var trips int
			i := 0
			for b.Loop() {
				for k := range 3 {
					switch (i + k) % 3 {
					case 0:
						d, n := run(b)
						opTime, trips = opTime+d, trips+n
					case 1:
						updateTime += floor.run(b, updates)
					case 2:
						exactTime += floor.run(b, op.exact)
					}
				}
				i++
			}
			n := float64(b.N)
			b.ReportMetric(float64(opTime.Nanoseconds())/n, "ns/op")
			b.ReportMetric(float64(trips)/n, "roundtrips/op")
			b.ReportMetric(float64(updateTime.Nanoseconds())/n, "update-floor-ns/op")
			b.ReportMetric(float64(opTime)/float64(updateTime), "update-ratio")
			b.ReportMetric(float64(exactTime.Nanoseconds())/n, "exact-floor-ns/op")
			b.ReportMetric(float64(opTime)/float64(exactTime), "exact-ratio")
		})
	}
}

// benchOp does one store operation and returns the time and the round
// trips of its measured part.
type benchOp func(b *testing.B) (time.Duration, int)

// measure times fn and counts the round trips it makes through f.
func measure(b *testing.B, f *testkit.CountingDriver, fn func() error) (time.Duration, int) {
	gets, puts := f.Calls()
	start := time.Now()
	err := fn()
	d := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	gets2, puts2 := f.Calls()
	return d, gets2 - gets + puts2 - puts
}

// benchAcquire: the key is free each time (the store's own grant has
// expired), so each Acquire reads and writes once.
func benchAcquire(s *lease.DocumentStore, f *testkit.CountingDriver, clock *testclock.Clock) benchOp {
	return func(b *testing.B) (time.Duration, int) {
		clock.Advance(testkit.TTL)
		return measure(b, f, func() error { _, err := s.Acquire(ctxBG, "k"); return err })
	}
}

// benchRenew renews one grant over and over.
func benchRenew(s *lease.DocumentStore, f *testkit.CountingDriver, clock *testclock.Clock) benchOp {
	var g lease.Grant
	return func(b *testing.B) (time.Duration, int) {
		if g.Epoch == 0 {
			var err error
			if g, err = s.Acquire(ctxBG, "k"); err != nil {
				b.Fatal(err)
			}
		}
		clock.Advance(time.Millisecond)
		return measure(b, f, func() (err error) { g, err = s.Renew(ctxBG, g); return err })
	}
}

// benchRelease acquires, then measures the release alone.
func benchRelease(s *lease.DocumentStore, f *testkit.CountingDriver, clock *testclock.Clock) benchOp {
	return func(b *testing.B) (time.Duration, int) {
		g, err := s.Acquire(ctxBG, "k")
		if err != nil {
			b.Fatal(err)
		}
		return measure(b, f, func() error { return s.Release(ctxBG, g) })
	}
}

func benchCycle(s *lease.DocumentStore, f *testkit.CountingDriver, clock *testclock.Clock) benchOp {
	return func(b *testing.B) (time.Duration, int) {
		return measure(b, f, func() error {
			g, err := s.Acquire(ctxBG, "k")
			if err != nil {
				return err
			}
			return s.Release(ctxBG, g)
		})
	}
}

// rawFloor issues the statements a store cannot avoid, straight through
// database/sql, on a connection of its own to the store's file, on a key of
// its own: the same table, WAL and disk, the same pragmas (sqliteDSN).
type rawFloor struct {
	sel, upd *sql.Stmt
	version  int64
	ms       int64
}

func newRawFloor(b *testing.B, path string) *rawFloor {
	db, err := sql.Open("sqlite", sqliteDSN(path, sqliteBusyTimeout, false))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	mustExec(b, db, "INSERT INTO leases VALUES ('floor', 'bench', 1, 0, 0, 1, '')")
	f := &rawFloor{version: 1, ms: time.Now().UnixMilli()}
	if f.sel, err = db.Prepare(sqliteGet); err != nil {
		b.Fatal(err)
	}
	if f.upd, err = db.Prepare(sqliteUpdate); err != nil {
		b.Fatal(err)
	}
	return f
}

// run issues stmts (S: the SELECT of Get, U: a conditional UPDATE that
// succeeds) and returns the time they took.
func (f *rawFloor) run(b *testing.B, stmts string) time.Duration {
	start := time.Now()
	for _, st := range stmts {
		if st == 'S' {
			var owner, session string
			var epoch, exp, released, v int64
			if err := f.sel.QueryRow("floor").Scan(&owner, &epoch, &exp, &released, &v, &session); err != nil {
				b.Fatal(err)
			}
			continue
		}
		f.ms++
		res, err := f.upd.Exec("bench", f.version, f.ms, f.version%2, "", f.version+1, "floor", f.version)
		if err != nil {
			b.Fatal(err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			b.Fatalf("conditional UPDATE changed %d rows, %v; want 1", n, err)
		}
		f.version++
	}
	return time.Since(start)
}

// BenchmarkHoldUncontended measures an uncontended Hold and its Release
// in a loop beside a bare Acquire and Release on the same store over a
// file database, in the same run (testkit.HoldUncontended). Round trips
// are the driver's calls, batched or not, session writes included.
func BenchmarkHoldUncontended(b *testing.B) {
	c := &testkit.TripCounter{Driver: openSQLiteAt(b, filepath.Join(b.TempDir(), "leases.db"))}
	s, err := lease.NewDocumentStore(c, lease.WithOwner("bench"), lease.WithTTL(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	testkit.HoldUncontended(b, s, c.Trips)
}
