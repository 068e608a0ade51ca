package manybench

import (
	"context"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
)

// Renewal measures one renewal period of N keys held through HoldEach on
// one store: the batched renewal of every grant that Hold's loop makes on
// its own (RenewEvery a period of at least a second and three floors),
// beside the floor (N conditional UPDATEs in raw round trips, on the same
// file or server) and beside renewing the keys one at a time through
// Store.Renew, as a Held did before the loop batched (timed on up to 1,000
// keys, or as many as half a period allows, and scaled to N). It reports:
//
//	ns/op                       from the start of the round's first storage call to the end of its last
//	roundtrips/op               the store's round trips in one period
//	cpu-ns/op                   this process's CPU time (getrusage) over one period; a server in
//	                            another process is not in it
//	floor-ns/op, ratio          the floor, and ns/op over it
//	one-at-a-time-ns/op         N Renews one by one
//	goroutines, B/key           what holding the N keys added
//
// With a Rig's Wire it also reports the wire commands per period for the
// store and for the floor, and with Chunk the round trips the same calls
// take on a server that takes Chunk writes a command
// (chunked-roundtrips/op).
func Renewal(b *testing.B, backend Backend) {
	forSizes(b, backend, backend.Sizes, func(b *testing.B, rig Rig, n int) {
		c := &testkit.TripCounter{Driver: rig.Driver, Chunk: rig.Chunk}
		s := store(b, c, "bench", rig.TTL)
		period := max(time.Second, 3*rig.Floor(b))
		var hs []*lease.Held
		bytes, goroutines := heapAndGoroutines(func() { hs = holdEach(b, s, Keys(n), lease.RenewEvery(period)) })
		var floorTime, oneTime, cpu time.Duration
		var round testkit.Trips
		var wire, floorWire, oneKeys int
		for b.Loop() {
			idle(b, c)
			c.Take()
			wire0, cpu0 := trips(rig.Wire), processCPU()
			testkit.WaitFor(b, "a renewal round of every key", func() bool { return c.Peek().Writes >= n && c.Idle() })
			cpu += processCPU() - cpu0
			round = round.Plus(c.Take())
			wire0, wire = trips(rig.Wire), wire+trips(rig.Wire)-wire0
			floorTime += rig.Floor(b)
			floorWire += trips(rig.Wire) - wire0
			k, took := renewOneByOne(b, s, hs, period/2)
			oneKeys, oneTime = oneKeys+k, oneTime+took
		}
		if lost := lostHelds(hs); lost > 0 {
			b.Fatalf("%d of %d Helds lost", lost, n)
		}
		metric(b, float64(round.Span.Nanoseconds()), "ns/op")
		metric(b, float64(round.Trips), "roundtrips/op")
		if processCPU() > 0 {
			metric(b, float64(cpu.Nanoseconds()), "cpu-ns/op")
		}
		metric(b, float64(floorTime.Nanoseconds()), "floor-ns/op")
		b.ReportMetric(float64(round.Span)/float64(floorTime), "ratio")
		b.ReportMetric(float64(oneTime.Nanoseconds())/float64(oneKeys)*float64(n), "one-at-a-time-ns/op")
		b.ReportMetric(float64(goroutines), "goroutines")
		b.ReportMetric(float64(bytes)/float64(n), "B/key")
		if rig.Wire != nil {
			metric(b, float64(wire), "wire-roundtrips/op")
			metric(b, float64(floorWire), "floor-wire-roundtrips/op")
		}
		if rig.Chunk > 0 {
			metric(b, float64(round.Chunked), "chunked-roundtrips/op")
		}
	})
}

// renewOneByOne renews the grants of up to 1,000 of hs through Store.Renew,
// one call each, for at most budget, and returns how many it renewed and
// how long that took.
func renewOneByOne(b *testing.B, s lease.Store, hs []*lease.Held, budget time.Duration) (int, time.Duration) {
	start := time.Now()
	done := 0
	for _, h := range hs[:min(len(hs), 1000)] {
		if _, err := s.Renew(context.Background(), h.Grant()); err != nil {
			b.Fatal(err)
		}
		done++
		if time.Since(start) > budget {
			break // enough to scale from (FerretDB takes milliseconds per update)
		}
	}
	return done, time.Since(start)
}

// trips is wire() (0 without a proxy).
func trips(wire func() int) int {
	if wire == nil {
		return 0
	}
	return wire()
}
