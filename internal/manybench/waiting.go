package manybench

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
)

// waitRounds is how many rounds of the waiting loop Waiting counts while
// the keys stay held, after waitWarmup: time enough for every waiter's
// backoff to reach its longest, so the rounds counted are the steady ones.
//
// The holder's grants last holderTTL, so that they stay held however long
// the N Holds' first looks take (half a minute for 10,000 on PostgreSQL);
// the waiters poll at their longest backoff whatever the holder's TTL.
const (
	waitRounds = 3
	waitWarmup = 2 * time.Second
	holderTTL  = 10 * time.Minute
	maxWaiting = 10000
)

// Waiting measures N Holds waiting on one store for N keys that another
// store holds. It reports:
//
//	start-ns/op               from starting the N Holds until the store has read every key
//	start-roundtrips/op       in that time: their first looks, and the loop's rounds meanwhile
//	wait-roundtrips/round     round trips of the waiting loop per round while the keys stay held
//	wait-rounds/s             how often the loop looks, once its backoff has grown
//	takeover-ns/op            from the holder's ReleaseAll call to the last Hold returning its
//	                          Held (the release alone is in ReleaseAll; timing from its return
//	                          would miss keys taken while it ran, as on FerretDB, where each
//	                          bulkWrite of the release lands on its own)
//	takeover-roundtrips/op    the waiting store's round trips in that time
//	goroutines                besides the N callers' own (and a proxy's, Rig.Relays)
//	B/key                     heap bytes per waiting key
//
// With a Rig's Wire it also reports the wire commands of the waiting
// rounds, and of the release and takeover together. The rounds run in real
// time: the loop polls at its longest backoff, so an iteration takes
// seconds, and ns/op is its wall time. It runs the backend's sizes up to
// maxWaiting: N goroutines, each in its own Hold.
//
// The holder is a store over the rig's driver: over one that states
// Sessions, its keys are attached to its session, and its ReleaseAll is
// one write (R22).
func Waiting(b *testing.B, backend Backend) {
	sizes := slices.DeleteFunc(slices.Clone(backend.Sizes), func(n int) bool { return n > maxWaiting })
	forSizes(b, backend, sizes, func(b *testing.B, rig Rig, n int) {
		holder := store(b, rig.Driver, "alice", holderTTL)
		c := &testkit.TripCounter{Driver: rig.Driver}
		waiting := store(b, c, "bob", rig.TTL)
		keys := Keys("", n)
		var m waitMeasure
		for b.Loop() {
			m.iteration(b, rig, holder, waiting, c, keys)
		}
		metric(b, float64(m.startTime.Nanoseconds()), "start-ns/op")
		metric(b, float64(m.startTrips), "start-roundtrips/op")
		b.ReportMetric(float64(m.waitTrips)/float64(m.rounds), "wait-roundtrips/round")
		b.ReportMetric(float64(m.rounds)/m.waitTime.Seconds(), "wait-rounds/s")
		metric(b, float64(m.takeoverTime.Nanoseconds()), "takeover-ns/op")
		metric(b, float64(m.takeoverTrips), "takeover-roundtrips/op")
		metric(b, float64(m.goroutines), "goroutines")
		metric(b, m.bytes/float64(n), "B/key")
		if rig.Wire != nil {
			b.ReportMetric(float64(m.waitWire)/float64(m.rounds), "wire-wait-roundtrips/round")
			metric(b, float64(m.takeoverWire), "wire-handover-roundtrips/op")
		}
	})
}

// waitMeasure sums Waiting's measures over its iterations.
type waitMeasure struct {
	startTrips, waitTrips, rounds, takeoverTrips int
	waitWire, takeoverWire                       int
	startTime, waitTime, takeoverTime            time.Duration
	goroutines                                   int
	bytes                                        float64
}

type holdResult struct {
	key string
	h   *lease.Held
	err error
}

// iteration has holder take keys, starts one Hold per key on waiting,
// counts the waiting rounds, then has holder release every key and times
// the takeover; at the end waiting releases them all.
func (m *waitMeasure) iteration(b *testing.B, rig Rig, holder, waiting *lease.DocumentStore, c *testkit.TripCounter, keys []string) {
	ctx := testkit.Patient(b)
	holdEach(b, holder, keys)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	g0, relays0 := runtime.NumGoroutine(), trips(rig.Relays)
	idle(b, c)
	c.Take()
	start := time.Now()
	results := make(chan holdResult, len(keys))
	for _, key := range keys {
		go func() { // the caller's own goroutine, one per Hold
			h, err := lease.Hold(ctx, waiting, key)
			results <- holdResult{key, h, err}
		}()
	}
	waitersLooked(b, c, len(keys), results)
	m.startTime += time.Since(start)
	m.startTrips += c.Take().Trips
	time.Sleep(waitWarmup) // let the waits settle into their longest poll

	runtime.GC()
	runtime.ReadMemStats(&after)
	m.bytes += float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
	m.goroutines += runtime.NumGoroutine() - len(keys) - g0 - (trips(rig.Relays) - relays0)

	c.Take()
	wire0 := trips(rig.Wire)
	start = time.Now()
	testkit.WaitFor(b, fmt.Sprintf("%d rounds of the waiting loop", waitRounds), func() bool { return c.Peek().Reads >= waitRounds })
	counts := c.Take()
	m.waitTime += time.Since(start)
	m.rounds += counts.Reads
	m.waitTrips += counts.Trips
	m.waitWire += trips(rig.Wire) - wire0

	wire0, start = trips(rig.Wire), time.Now()
	if err := holder.ReleaseAll(ctx); err != nil {
		b.Fatal(err)
	}
	got := collectHolds(b, results, len(keys))
	m.takeoverTime += time.Since(start)
	m.takeoverTrips += c.Take().Trips
	m.takeoverWire += trips(rig.Wire) - wire0
	for _, r := range got {
		if g := r.h.Grant(); g.Key != r.key || g.PreviousUnclean {
			b.Fatalf("Hold(%s) got %+v after a clean release", r.key, g)
		}
	}
	if err := waiting.ReleaseAll(ctx); err != nil {
		b.Fatal(err)
	}
}

// waitersLooked waits until every Hold has looked once and found its key
// held: the store has read each of the n keys. A Hold that returns
// instead fails the benchmark.
func waitersLooked(b *testing.B, c *testkit.TripCounter, n int, results <-chan holdResult) {
	testkit.WaitFor(b, fmt.Sprintf("the %d Holds to look at their keys", n), func() bool {
		select {
		case r := <-results:
			if r.err == nil {
				g := r.h.Grant()
				b.Fatalf("Hold(%s) got epoch %d (PreviousUnclean %v) while its key was held", r.key, g.Epoch, g.PreviousUnclean)
			}
			b.Fatalf("Hold(%s) returned while its key was held: %v", r.key, r.err)
		default:
		}
		return c.KeysRead() >= n
	})
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

// trips is wire() (0 without a proxy).
func trips(wire func() int) int {
	if wire == nil {
		return 0
	}
	return wire()
}
