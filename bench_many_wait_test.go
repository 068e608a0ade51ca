package lease

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/mongoproxy"
)

// waitRounds is how many rounds of the waiting loop BenchmarkManyWaiting
// counts while the keys stay held, after waitWarmup: time enough for every
// waiter's backoff to reach holdMaxBackoff, so the rounds counted are the
// steady ones.
//
// The holder's grants last holderTTL, so that they stay held however long
// the N Holds' first looks take (half a minute for 10,000 on PostgreSQL);
// the waiters poll at holdMaxBackoff whatever the holder's TTL.
const (
	waitRounds = 3
	waitWarmup = 2 * time.Second
	holderTTL  = 10 * time.Minute
)

// BenchmarkManyWaiting measures N Holds waiting on one store for N keys
// that another store holds, on each backend of manyBackends. It reports:
//
//	start-ns/op               from starting the N Holds until all wait
//	start-roundtrips/op       in that time: their first looks, one each, and the loop's
//	                          rounds meanwhile
//	wait-roundtrips/round     round trips of the waiting loop per round while the keys stay held
//	wait-rounds/s             how often the loop looks, once its backoff has grown
//	takeover-ns/op            from the holder's ReleaseAll call to the last Hold returning its
//	                          Held (the release alone is in BenchmarkManyReleaseAll; timing
//	                          from its return would miss keys taken while it ran, as on
//	                          FerretDB, where each bulkWrite of the release lands on its own)
//	takeover-roundtrips/op    the waiting store's round trips in that time
//	goroutines                besides the N callers' own (and, on MongoDB, the
//	                          in-process test proxy's one per connection)
//	B/key                     heap bytes per waiting key
//
// On MongoDB it also reports the wire commands of the waiting rounds, and
// of the release and takeover together, as the proxy counts them. The
// rounds run in real time: the loop polls at up to holdMaxBackoff, so an
// iteration takes seconds, and ns/op is its wall time.
func BenchmarkManyWaiting(b *testing.B) {
	forManyBackends(b, func(b *testing.B, rig manyRig, n int) {
		holder, err := NewDocumentStore(rig.d, WithOwner("alice"), WithTTL(holderTTL))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { holder.Close() })
		c := &tripCounter{Driver: rig.d}
		waiting, err := NewDocumentStore(c, WithOwner("bob"), WithTTL(rig.ttl))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { waiting.Close() })
		keys := benchKeys(n)
		var m waitMeasure
		for b.Loop() {
			m.iteration(b, rig, holder, waiting, c, keys)
		}
		iters := float64(b.N)
		b.ReportMetric(float64(m.startTime.Nanoseconds())/iters, "start-ns/op")
		b.ReportMetric(float64(m.startTrips)/iters, "start-roundtrips/op")
		b.ReportMetric(float64(m.waitTrips)/float64(m.rounds), "wait-roundtrips/round")
		b.ReportMetric(float64(m.rounds)/m.waitTime.Seconds(), "wait-rounds/s")
		b.ReportMetric(float64(m.takeoverTime.Nanoseconds())/iters, "takeover-ns/op")
		b.ReportMetric(float64(m.takeoverTrips)/iters, "takeover-roundtrips/op")
		b.ReportMetric(float64(m.goroutines)/iters, "goroutines")
		b.ReportMetric(m.bytes/iters/float64(n), "B/key")
		if rig.wire != nil {
			b.ReportMetric(float64(m.waitWire)/float64(m.rounds), "wire-wait-roundtrips/round")
			b.ReportMetric(float64(m.takeoverWire)/iters, "wire-handover-roundtrips/op")
		}
	})
}

// waitMeasure sums BenchmarkManyWaiting's measures over its iterations.
type waitMeasure struct {
	startTrips, waitTrips, rounds, takeoverTrips int
	waitWire, takeoverWire                       int
	startTime, waitTime, takeoverTime            time.Duration
	goroutines                                   int
	bytes                                        float64
}

type holdResult struct {
	key string
	h   *Held
	err error
}

// iteration has holder take keys, starts one Hold per key on waiting,
// counts the waiting rounds, then has holder release every key and times
// the takeover; at the end waiting releases them all.
func (m *waitMeasure) iteration(b *testing.B, rig manyRig, holder, waiting *DocumentStore, c *tripCounter, keys []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mustAcquireMany(b, holder, keys)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	g0, proxy0 := runtime.NumGoroutine(), proxyGoroutines(rig.wire)
	c.take()
	start := time.Now()
	results := make(chan holdResult, len(keys))
	for _, key := range keys {
		go func() { // the caller's own goroutine, one per Hold
			h, err := Hold(ctx, waiting, key)
			results <- holdResult{key, h, err}
		}()
	}
	waitersRegistered(b, waiting, len(keys), results)
	m.startTime += time.Since(start)
	m.startTrips += c.take()
	time.Sleep(waitWarmup) // let the waits settle into their longest poll

	runtime.GC()
	runtime.ReadMemStats(&after)
	m.bytes += float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
	m.goroutines += runtime.NumGoroutine() - len(keys) - g0 - (proxyGoroutines(rig.wire) - proxy0)

	c.take()
	wire0 := wireTrips(rig.wire)
	start = time.Now()
	for c.peek().reads < waitRounds {
		time.Sleep(10 * time.Millisecond) // real time is what the loop polls by
	}
	counts := c.takeAll()
	m.waitTime += time.Since(start)
	m.rounds += counts.reads
	m.waitTrips += counts.trips
	m.waitWire += wireTrips(rig.wire) - wire0

	wire0, start = wireTrips(rig.wire), time.Now()
	if err := holder.ReleaseAll(ctx); err != nil {
		b.Fatal(err)
	}
	got := collectHolds(b, results, len(keys))
	m.takeoverTime += time.Since(start)
	m.takeoverTrips += c.take()
	m.takeoverWire += wireTrips(rig.wire) - wire0
	for _, r := range got {
		if g := r.h.Grant(); g.Key != r.key || g.PreviousUnclean {
			b.Fatalf("Hold(%s) got %+v after a clean release", r.key, g)
		}
	}
	if err := waiting.ReleaseAll(ctx); err != nil {
		b.Fatal(err)
	}
}

// waitersRegistered waits until the keeper of s has n waiters: every Hold
// has looked once and found its key held. A Hold that returns instead
// fails the benchmark.
func waitersRegistered(b *testing.B, s *DocumentStore, n int, results <-chan holdResult) {
	k := keeperFor(s)
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		if lookedWaiters(k) == n {
			return
		}
		select {
		case r := <-results:
			if r.err == nil {
				g := r.h.Grant()
				b.Fatalf("Hold(%s) got epoch %d (PreviousUnclean %v) while its key was held", r.key, g.Epoch, g.PreviousUnclean)
			}
			b.Fatalf("Hold(%s) returned while its key was held: %v", r.key, r.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	b.Fatalf("the %d Holds did not all start waiting", n)
}

// collectHolds returns the n Holds' results, failing on an error.
func collectHolds(b *testing.B, results <-chan holdResult, n int) []holdResult {
	got := make([]holdResult, 0, n)
	for range n {
		r := <-results
		if r.err != nil {
			b.Fatalf("Hold(%s): %v", r.key, r.err)
		}
		got = append(got, r)
	}
	return got
}

// proxyGoroutines is how many goroutines the test proxy p runs to relay
// connections: one per client connection (each is tracked with its
// server connection). 0 without a proxy.
func proxyGoroutines(p *mongoproxy.Proxy) int {
	if p == nil {
		return 0
	}
	return p.Relays()
}
