// Package manybench is the many-keys benchmarks of this module's document
// drivers, in one place: each driver package runs them on its own backend
// (a Backend: the driver, and its floor, one renewal period of n keys
// written raw through the database's own client), and they report the
// storage round trips per operation beside the floor's. They use only
// package lease's API: the renewals timed are the ones Hold's loop makes on
// its own, and a wait for many Holds waits for the store to have read every
// key, not for time to pass.
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
// stores grant, and the floor of one renewal period of n keys: n
// conditional UPDATEs (or updates) in as few raw round trips as the
// backend allows, on n rows of its own that Open wrote.
type Rig struct {
	Driver lease.Driver
	TTL    time.Duration
	Floor  func(b *testing.B) time.Duration
	// Chunk, when set, is how many writes the driver sends a real server in
	// one command: the computed chunked-roundtrips/op assume it (MongoDB).
	Chunk int
	// Wire, when set, is how many data commands a proxy between the driver
	// and its server has forwarded (each one round trip); Relays how many
	// goroutines that proxy runs (MongoDB's test proxy).
	Wire, Relays func() int
}

// Sizes are the Ns the many-keys benchmarks run.
var Sizes = []int{100, 1000, 10000}

// FloorKey is the key of a floor's i-th row, beside the store's keys.
func FloorKey(i int) string { return fmt.Sprintf("floor:%06d", i) }

// Keys are n keys "key-0", "key-1", ...
func Keys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	return keys
}

// ProfileKeys are n keys shaped as a profile host's: "profile/" and 16
// hex digits that follow no order, so that consecutive keys are far
// apart in the store's key order, as random profile IDs are.
func ProfileKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		x := uint64(i+1) * 0x9e3779b97f4a7c15 // a bijection: distinct i, distinct keys
		keys[i] = fmt.Sprintf("profile/%016x", x^x>>29)
	}
	return keys
}

// forSizes runs bench once per size of backend, on a rig opened for it.
func forSizes(b *testing.B, backend Backend, sizes []int, bench func(b *testing.B, rig Rig, n int)) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("%s/N=%d", backend.Name, n), func(b *testing.B) {
			if backend.Skip != nil {
				if why := backend.Skip(b, n); why != "" {
					b.Skip(why)
				}
			}
			bench(b, backend.Open(b, n), n)
		})
	}
}

// store opens a store on c with owner and ttl, closed when b ends.
func store(b *testing.B, d lease.Driver, owner string, ttl time.Duration) *lease.DocumentStore {
	s, err := lease.NewDocumentStore(d, lease.WithOwner(owner), lease.WithTTL(ttl))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
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
