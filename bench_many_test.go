package lease

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/mongoproxy"
)

// tripCounter counts a driver's storage round trips, batched or not. It
// passes PutMany and GetMany on when the driver has them, and otherwise
// does each write or read alone, counting one round trip for each.
//
// It also counts the batched reads (GetMany calls: one per round of the
// waiting loop), and what the same calls would cost in wire round trips
// on a real MongoDB, given how the MongoDB driver chunks them there
// (mongoBatchChunk writes per bulkWrite, keys per find).
type tripCounter struct {
	Driver
	mu    sync.Mutex // guards the counts
	trips int
	reads int // GetMany calls
	mongo int // wire round trips the same calls take on a real MongoDB
}

var (
	_ BatchDriver = (*tripCounter)(nil)
	_ BatchReader = (*tripCounter)(nil)
)

func (c *tripCounter) add(trips, reads, items int) {
	c.mu.Lock()
	c.trips += trips
	c.reads += reads
	c.mongo += max(1, (items+mongoBatchChunk-1)/mongoBatchChunk) * trips
	c.mu.Unlock()
}

// take returns the round trips since the last take, and starts every
// count afresh.
func (c *tripCounter) take() int { return c.takeAll().trips }

// tripCounts are a tripCounter's counts since its last take.
type tripCounts struct{ trips, reads, mongo int }

// peek returns the counts since the last take, without a take.
func (c *tripCounter) peek() tripCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return tripCounts{c.trips, c.reads, c.mongo}
}

func (c *tripCounter) takeAll() tripCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := tripCounts{c.trips, c.reads, c.mongo}
	c.trips, c.reads, c.mongo = 0, 0, 0
	return n
}

func (c *tripCounter) Get(ctx context.Context, key string) (Record, uint64, error) {
	c.add(1, 0, 1)
	return c.Driver.Get(ctx, key)
}

func (c *tripCounter) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	c.add(1, 0, 1)
	return c.Driver.Put(ctx, rec, pre)
}

func (c *tripCounter) PutMany(ctx context.Context, ws []Write) ([]PutResult, error) {
	if bd, ok := c.Driver.(BatchDriver); ok {
		c.add(1, 0, len(ws))
		return bd.PutMany(ctx, ws)
	}
	out := make([]PutResult, len(ws))
	for i, w := range ws {
		out[i].Version, out[i].Err = c.Put(ctx, w.Rec, w.Pre)
	}
	return out, nil
}

func (c *tripCounter) GetMany(ctx context.Context, keys []string) ([]GetResult, error) {
	c.add(0, 1, 0)
	if br, ok := c.Driver.(BatchReader); ok {
		c.add(1, 0, len(keys))
		return br.GetMany(ctx, keys)
	}
	out := make([]GetResult, len(keys))
	for i, key := range keys {
		out[i].Rec, out[i].Version, out[i].Err = c.Get(ctx, key)
	}
	return out, nil
}

// manyBackend is a store the many-keys benchmarks run on.
type manyBackend struct {
	name  string
	sizes []int                             // the Ns it runs
	open  func(b *testing.B, n int) manyRig // for a benchmark of n keys
	// skip, when set, says why this backend cannot run n keys here ("": it can).
	skip func(b *testing.B, n int) string
}

// manyRig is a backend opened for one benchmark: its driver, the TTL its
// stores grant, and the floor of one renewal period of n keys: n
// conditional UPDATEs (or updates) in as few raw round trips as the
// backend allows, on n rows of its own that open wrote.
type manyRig struct {
	d     Driver
	ttl   time.Duration
	floor func(b *testing.B) time.Duration
	wire  *mongoproxy.Proxy // MongoDB: the proxy that d and the floor talk through, counting commands; else nil
}

// manyBackends are the stores the many-keys benchmarks run on: SQLite,
// MongoDB and PostgreSQL, registered by bench_rigs_test.go (package
// lease_test, which can import the drivers; see export_test.go). MongoDB
// runs N=10,000 only on a real MongoDB.
var manyBackends []manyBackend

var manySizes = []int{100, 1000, 10000}

// mongoBatchChunk is how many writes package mongodb sends a real MongoDB
// in one bulkWrite (and keys in one find): what the computed
// mongodb-wire-roundtrips/op assume.
const mongoBatchChunk = 1000

// floorKey is the key of a floor's i-th row, beside the store's keys.
func floorKey(i int) string { return fmt.Sprintf("floor:%06d", i) }

// holdMany holds n keys of s through its Hold loop, acquired in batches,
// and returns the Helds with the heap bytes and goroutines they added.
func holdMany(b *testing.B, s *DocumentStore, n int) (hs []*Held, bytesPerKey float64, goroutines int) {
	keys := benchKeys(n)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	for r := range HoldEach(context.Background(), s, keys) {
		if r.Err != nil {
			b.Fatalf("hold %s: %v", r.Key, r.Err)
		}
		hs = append(hs, r.Held)
	}
	goroutines = runtime.NumGoroutine() - g0
	runtime.GC()
	runtime.ReadMemStats(&after)
	return hs, float64(after.HeapAlloc-before.HeapAlloc) / float64(n), goroutines
}

// renewRound renews hs through their keeper's renewal path, as one of its
// rounds would, and returns when the round is done.
func renewRound(k *keeper, hs []*Held) {
	k.mu.Lock()
	sc := &renewScratch{helds: slices.Clone(hs), grants: make([]Grant, len(hs))} // the keeper reuses sc
	for i, h := range hs {
		h.renewing = true // its round's renewal skips it
		sc.grants[i] = h.Grant()
	}
	k.renewing++
	k.calls.Add(1)
	k.mu.Unlock()
	k.renew(sc, time.Now().Add(time.Minute))
}

// BenchmarkManyRenewal measures one renewal period of N keys held through
// Hold on one store: the loop's batched renewal of every grant, beside the
// floor (N conditional UPDATEs in one raw transaction, on the same file or
// server) and beside renewing the keys one at a time, as a Held did before
// the loop batched (timed on up to 1,000 keys, or as many as 2 s allow,
// and scaled to N). It reports
// store round trips per period, this process's CPU time (user and system,
// from getrusage, around the batched renewal only; a server in another
// process is not in it), goroutines and heap bytes per held key.
//
// On MongoDB it also reports the wire commands per period (bulkWrite
// updates and finds, as the proxy forwards them) for the store and for the
// floor. The test server is FerretDB unless MONGODB_URI is set, and the
// driver sends FerretDB ferretBatchChunk writes per bulkWrite, so
// mongodb-wire-roundtrips/op is computed, not measured: what the same
// PutMany and GetMany calls cost on a real MongoDB, ceil(n/mongoBatchChunk)
// each.
func BenchmarkManyRenewal(b *testing.B) {
	forManyBackends(b, func(b *testing.B, rig manyRig, n int) {
		c := &tripCounter{Driver: rig.d}
		s, err := NewDocumentStore(c, WithOwner("bench"), WithTTL(rig.ttl))
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
		var loopTime, floorTime, oneTime, cpu time.Duration
		var counts tripCounts
		var wire, floorWire, oneKeys int
		for b.Loop() {
			c.take()
			wire0, cpu0 := wireTrips(rig.wire), processCPU()
			start := time.Now()
			renewRound(k, hs)
			loopTime += time.Since(start)
			cpu += processCPU() - cpu0
			counts = counts.plus(c.takeAll())
			wire0, wire = wireTrips(rig.wire), wire+wireTrips(rig.wire)-wire0
			floorTime += rig.floor(b)
			floorWire += wireTrips(rig.wire) - wire0
			start = time.Now()
			for _, g := range grants()[:min(n, 1000)] {
				if _, err := s.Renew(context.Background(), g); err != nil {
					b.Fatal(err)
				}
				oneKeys++
				if time.Since(start) > 2*time.Second {
					break // enough to scale from (FerretDB takes milliseconds per update)
				}
			}
			oneTime += time.Since(start)
		}
		for _, h := range hs {
			if h.Context().Err() != nil {
				b.Fatalf("%s lost: %v", h.Grant().Key, context.Cause(h.Context()))
			}
		}
		iters := float64(b.N)
		b.ReportMetric(float64(loopTime.Nanoseconds())/iters, "ns/op")
		b.ReportMetric(float64(counts.trips)/iters, "roundtrips/op")
		if processCPU() > 0 {
			b.ReportMetric(float64(cpu.Nanoseconds())/iters, "cpu-ns/op")
		}
		b.ReportMetric(float64(floorTime.Nanoseconds())/iters, "floor-ns/op")
		b.ReportMetric(float64(loopTime)/float64(floorTime), "ratio")
		b.ReportMetric(float64(oneTime.Nanoseconds())/float64(oneKeys)*float64(n), "one-at-a-time-ns/op")
		b.ReportMetric(float64(goroutines), "goroutines")
		b.ReportMetric(perKey, "B/key")
		if rig.wire != nil {
			b.ReportMetric(float64(wire)/iters, "wire-roundtrips/op")
			b.ReportMetric(float64(floorWire)/iters, "floor-wire-roundtrips/op")
			b.ReportMetric(float64(counts.mongo)/iters, "mongodb-wire-roundtrips/op")
		}
	})
}

// forManyBackends runs bench once per backend and size, on a backend
// opened for it.
func forManyBackends(b *testing.B, bench func(b *testing.B, rig manyRig, n int)) {
	for _, backend := range manyBackends {
		for _, n := range backend.sizes {
			b.Run(fmt.Sprintf("%s/N=%d", backend.name, n), func(b *testing.B) {
				if backend.skip != nil {
					if why := backend.skip(b, n); why != "" {
						b.Skip(why)
					}
				}
				bench(b, backend.open(b, n), n)
			})
		}
	}
}

func (t tripCounts) plus(u tripCounts) tripCounts {
	return tripCounts{t.trips + u.trips, t.reads + u.reads, t.mongo + u.mongo}
}

// wireTrips is how many data commands p has forwarded, each one round
// trip (0 without a proxy).
func wireTrips(p *mongoproxy.Proxy) int {
	if p == nil {
		return 0
	}
	n := 0
	for _, cmd := range []string{"find", "getMore", "insert", "update", "delete"} {
		n += p.Seen(cmd)
	}
	return n
}

// processCPU is this process's CPU time, user and system, where the
// system can say (see bench_many_unix_test.go); 0 where it cannot.
var processCPU = func() time.Duration { return 0 }

// BenchmarkManyReleaseAll measures ReleaseAll of N held keys, and the
// takeover of N keys whose holder died (expired), as Hold's waiting loop
// makes it: one batched read and one batched write.
func BenchmarkManyReleaseAll(b *testing.B) {
	forManyBackends(b, func(b *testing.B, rig manyRig, n int) {
		c := &tripCounter{Driver: rig.d}
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
