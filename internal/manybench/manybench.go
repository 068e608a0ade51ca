// Package manybench is the many-keys benchmarks of this module's document
// drivers, in one place: each driver package runs them on its own backend
// (a Backend: the driver, and its floors, written raw through the
// database's own client), and they report the storage calls and writes
// per operation beside the floor's.
//
// A store over a driver that states Sessions keeps its Helds through one
// session record (R18–R20): that is the default, and what each benchmark
// measures first. Beside it, in the same run, each reports the per-key
// baseline ("perkey-" metrics): the same number of keys held through a
// store whose driver hides Sessions (PerKey), as every driver was used
// before sessions and as a driver written elsewhere without them still is.
//
// They use only package lease's API: the renewals timed are the ones
// Hold's loop makes on its own, and a wait for many Holds waits for the
// store to have read every key, not for time to pass. Each sub-benchmark
// is named by its size first ("N=100000"), so that -bench 'Renewal/N=100000$'
// runs one.
package manybench

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
)

// Backend is a store the many-keys benchmarks run on.
type Backend struct {
	Name  string
	Sizes []int                         // the Ns it runs
	Open  func(b *testing.B, n int) Rig // for a benchmark of n keys
	// Skip, when set, says why this backend cannot run n keys here ("": it can).
	Skip func(b *testing.B, n int) string
}

// Rig is a backend opened for one benchmark: its driver, the TTL its
// stores grant, and its floors, raw writes through the database's own
// client on rows of their own that Open wrote, beside the store's.
type Rig struct {
	Driver lease.Driver
	TTL    time.Duration
	// Floor is one renewal period of n keys kept per key: n conditional
	// UPDATEs (or updates) in as few raw round trips as the backend allows.
	Floor func(b *testing.B) time.Duration
	// SessionFloor is one renewal period of a session, whatever the number
	// of keys attached to it: one raw UPDATE of one session row, guarded by
	// its version as the driver's is, in a transaction of its own.
	SessionFloor func(b *testing.B) time.Duration
	// Chunk, when set, is how many writes the driver sends a real server in
	// one command: the computed chunked-roundtrips/op assume it (MongoDB).
	Chunk int
	// Wire, when set, is how many requests the driver and the floors have
	// sent their server, each one round trip: the data commands a proxy
	// between them forwarded (MongoDB's test proxy), or the writes of
	// their connections (PostgreSQL). Relays is how many goroutines that
	// proxy runs.
	Wire, Relays func() int
	// Server, when set, reads the database server's own costs.
	Server *Server
	// Settle, when set, finishes the database's work left over from
	// holding the keys (SQLite: the checkpoint of its write-ahead log;
	// PostgreSQL: VACUUM, ANALYZE and CHECKPOINT), so that a steady window measures
	// the steady state, not the one-off work that start-up queued.
	Settle func() error
	// NoPerKey, when set, says why the per-key baseline does not run at
	// this N (a test server too slow for it); the benchmarks then report
	// the store with sessions alone.
	NoPerKey string
}

// perKey reports whether the per-key baseline runs on rig, and logs why
// not when it does not.
func perKey(b *testing.B, rig Rig) bool {
	if rig.NoPerKey != "" {
		b.Logf("no per-key baseline: %s", rig.NoPerKey)
		return false
	}
	return true
}

// Server reads what a database server spends, for the benchmarks that
// report the server's side (PostgreSQL).
type Server struct {
	// CPU is the CPU time the server's processes have used so far.
	CPU func() (time.Duration, error)
	// WAL is the position of the server's write-ahead log, in bytes: the
	// difference of two readings is what it wrote in between.
	WAL func() (int64, error)
}

// Sizes are the Ns the many-keys benchmarks run; the targets are
// at 100,000 keys.
var Sizes = []int{1000, 10000, 100000}

// FloorKey is the key of a floor's i-th row, beside the store's keys.
func FloorKey(i int) string { return fmt.Sprintf("floor:%06d", i) }

// FloorSession is the id of the session row that a SessionFloor writes,
// beside the stores' own sessions.
const FloorSession = "f100f100f100f100f100f100f100f100"

// Keys are n keys prefix+"key-0", prefix+"key-1", ...
func Keys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%skey-%d", prefix, i)
	}
	return keys
}

// ProfileKeys are n keys shaped as a profile host's: prefix, "profile/"
// and 16 hex digits that follow no order, so that consecutive keys are
// far apart in the store's key order, as random profile IDs are.
func ProfileKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		x := uint64(i+1) * 0x9e3779b97f4a7c15 // a bijection: distinct i, distinct keys
		keys[i] = fmt.Sprintf("%sprofile/%016x", prefix, x^x>>29)
	}
	return keys
}

// perKeyPrefix starts the keys of the per-key baseline: a session store's
// released keys still name its session, which a store over PerKey cannot
// read, so the baseline holds keys of its own, of the same shape.
const perKeyPrefix = "perkey/"

// settle runs rig's Settle, if it has one.
func settle(b *testing.B, rig Rig) {
	if rig.Settle != nil {
		if err := rig.Settle(); err != nil {
			b.Fatal(err)
		}
	}
}

// forSizes runs bench once per size of backend, on a rig opened for it.
func forSizes(b *testing.B, backend Backend, sizes []int, bench func(b *testing.B, rig Rig, n int)) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			if backend.Skip != nil {
				if why := backend.Skip(b, n); why != "" {
					b.Skip(why)
				}
			}
			bench(b, backend.Open(b, n), n)
		})
	}
}

// store opens a store on d with owner and ttl, closed when b ends.
func store(b *testing.B, d lease.Driver, owner string, ttl time.Duration, opts ...lease.Option) *lease.DocumentStore {
	opts = append([]lease.Option{lease.WithOwner(owner), lease.WithTTL(ttl)}, opts...)
	s, err := lease.NewDocumentStore(d, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// counted is a store over a TripCounter on d, and the counter.
func counted(b *testing.B, d lease.Driver, owner string, ttl time.Duration, opts ...lease.Option) (*lease.DocumentStore, *testkit.TripCounter) {
	c := &testkit.TripCounter{Driver: d}
	return store(b, c, owner, ttl, opts...), c
}

// holdEach holds keys on s through one HoldEach, with opts.
func holdEach(b *testing.B, s lease.Store, keys []string, opts ...lease.HoldOption) []*lease.Held {
	hs := make([]*lease.Held, 0, len(keys))
	for r := range lease.HoldEach(context.Background(), s, keys, opts...) {
		if r.Err != nil {
			b.Fatalf("hold %s: %v", r.Key, r.Err)
		}
		hs = append(hs, r.Held)
	}
	return hs
}

// releaseAll ends every Held of s and releases their keys.
func releaseAll(b *testing.B, s lease.Store) {
	if err := s.ReleaseAll(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// heapAndGoroutines measures what fn adds: heap bytes and goroutines.
func heapAndGoroutines(fn func()) (bytes int64, goroutines int) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	fn()
	goroutines = runtime.NumGoroutine() - g0
	runtime.GC()
	runtime.ReadMemStats(&after)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc), goroutines
}

// idle waits until c has no call in flight: the store's renewals and
// looks that were under way have ended.
func idle(b *testing.B, c *testkit.TripCounter) {
	testkit.WaitFor(b, "the store's calls in flight to end", c.Idle)
}

// lostHelds counts the Helds of hs whose Context has ended.
func lostHelds(hs []*lease.Held) int {
	n := 0
	for _, h := range hs {
		if h.Context().Err() != nil {
			n++
		}
	}
	return n
}

// metric reports total/iters in unit.
func metric(b *testing.B, total float64, unit string) {
	b.ReportMetric(total/float64(b.N), unit)
}

// ratio reports x/y in unit, when y is not 0.
func ratio(b *testing.B, x, y float64, unit string) {
	if y != 0 {
		b.ReportMetric(x/y, unit)
	}
}
