package manybench

import (
	"context"
	"errors"
	"flag"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
)

// StartupSizes are the Ns of Startup and HeldSteady; -short keeps to the
// first.
var StartupSizes = []int{10000, 100000}

// startupLoad, when set, names the load the machine runs beside the
// benchmark (e.g. "2hogs+fsync"); it only labels the figures.
var startupLoad = flag.String("lease.load", "", "a label for the load beside BenchmarkStartup")

// forEachHoldWay runs bench for each way of holding N keys, "holdeach"
// (one HoldEach) and "hold" (N goroutines calling Hold at once), at each
// of StartupSizes (the first only with -short).
func forEachHoldWay(b *testing.B, backend Backend, bench func(b *testing.B, rig Rig, n int, concurrent bool)) {
	sizes := StartupSizes
	if testing.Short() {
		sizes = sizes[:1]
	}
	for _, way := range []string{"holdeach", "hold"} {
		b.Run(way, func(b *testing.B) {
			forSizes(b, backend, sizes, func(b *testing.B, rig Rig, n int) {
				bench(b, rig, n, way == "hold")
			})
		})
	}
}

// Startup measures a node's start-up: N free (released, after the first
// iteration: never written) keys held on one store, through one HoldEach
// ("holdeach") or through N goroutines calling Hold at once ("hold"),
// beside the floor of the same run: the driver's own GetMany and PutMany
// of N keys of their own, one call each. It reports the time until every
// key is held; the driver calls (GetMany, PutMany, or one-key Get and Put:
// "calls/op") of the store and of the floor, where the keeper's looks are
// split at its largest batch (5,000 keys), and each driver splits a call
// into transactions (SQLite: 2,500 keys) or statements (PostgreSQL: 5,000
// keys); the goroutines the store keeps once every key is held; the heap
// bytes per held key; the Helds lost during start-up (a Held whose Context
// ended before all were held), which must be 0; and the calls the store
// still makes after the ReleaseAll that ends each iteration, until no call
// is in flight (renewals that were under way), kept out of the floor's.
func Startup(b *testing.B, backend Backend) { forEachHoldWay(b, backend, benchStartup) }

func benchStartup(b *testing.B, rig Rig, n int, concurrent bool) {
	c := &testkit.TripCounter{Driver: rig.Driver}
	s := store(b, c, "bench", rig.TTL)
	keys := ProfileKeys(n)
	floorKeys := make([]string, n)
	for i := range floorKeys {
		floorKeys[i] = "startfloor:" + keys[i]
	}
	slices.Sort(floorKeys) // in key order, as HoldEach takes its keys: the cheaper way to write them
	var took, floorTime time.Duration
	var trips, floorTrips, afterRelease, lost, goroutines int
	var bytes int64
	for b.Loop() {
		var hs []*lease.Held
		bytes, goroutines = heapAndGoroutines(func() {
			c.Take()
			start := time.Now()
			hs = holdAllAtOnce(b, s, keys, concurrent)
			took += time.Since(start)
			trips += c.Take().Trips
		})
		lost += lostHelds(hs)
		if err := s.ReleaseAll(context.Background()); err != nil && !errors.Is(err, lease.ErrLost) {
			b.Fatal(err)
		}
		idle(b, c)
		afterRelease += c.Take().Trips
		start := time.Now()
		putAll(b, c, nextWrites(b, c, floorKeys, "floor", time.Now().Add(rig.TTL)))
		floorTime += time.Since(start)
		floorTrips += c.Take().Trips
	}
	metric(b, float64(took.Nanoseconds()), "ns/op")
	metric(b, float64(trips), "calls/op")
	metric(b, float64(floorTime.Nanoseconds()), "floor-ns/op")
	metric(b, float64(floorTrips), "floor-calls/op")
	metric(b, float64(afterRelease), "calls-after-releaseall/op")
	b.ReportMetric(float64(took)/float64(floorTime), "ratio")
	b.ReportMetric(float64(goroutines), "goroutines")
	b.ReportMetric(float64(bytes)/float64(n), "B/key")
	metric(b, float64(lost), "lost/op")
	if *startupLoad != "" {
		b.Logf("load: %s", *startupLoad)
	}
}

// holdAllAtOnce holds keys on s, through one HoldEach or one Hold per key
// all at once, and returns the Helds once every key is held.
func holdAllAtOnce(b *testing.B, s lease.Store, keys []string, concurrent bool) []*lease.Held {
	if !concurrent {
		return holdEach(b, s, keys)
	}
	hs := make([]*lease.Held, len(keys))
	var wg sync.WaitGroup
	errs := make([]error, len(keys))
	for i, key := range keys {
		wg.Go(func() { hs[i], errs[i] = lease.Hold(context.Background(), s, key) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	return hs
}

// steadyPeriods is how many renewal periods HeldSteady watches.
const steadyPeriods = 6

// HeldSteady measures the CPU this process spends keeping N keys held by
// one HoldEach ("holdeach") or by N goroutines calling Hold at once
// ("hold") (the rig's TTL, renewed every third of it) over steadyPeriods
// renewal periods, from one period after start-up: getrusage user plus
// system time over wall time, as a percentage of one core ("cpu-%").
// Beside it, the floor: the rig's raw renewal writes of N keys
// steadyPeriods times, as CPU of this process over the same wall time
// ("floor-cpu-%"; a server's CPU is in neither). It also reports the
// store's driver calls per period and the Helds lost (0 expected).
func HeldSteady(b *testing.B, backend Backend) {
	if processCPU() == 0 {
		b.Skip("this system gives no process CPU time (getrusage)")
	}
	forEachHoldWay(b, backend, benchHeldSteady)
}

func benchHeldSteady(b *testing.B, rig Rig, n int, concurrent bool) {
	c := &testkit.TripCounter{Driver: rig.Driver}
	s := store(b, c, "bench", rig.TTL)
	hs := holdAllAtOnce(b, s, ProfileKeys(n), concurrent)
	period := rig.TTL / 3
	time.Sleep(period) // start-up's aftermath (its garbage, the first renewals) is not steady state
	var wall, cpu, floorCPU time.Duration
	var trips int
	for b.Loop() {
		c.Take()
		start, cpu0 := time.Now(), processCPU()
		time.Sleep(steadyPeriods * period) // the loop renews on its own meanwhile: real time is what is measured
		wall += time.Since(start)
		cpu += processCPU() - cpu0
		trips += c.Take().Trips
		cpu0 = processCPU()
		for range steadyPeriods {
			rig.Floor(b)
		}
		floorCPU += processCPU() - cpu0
	}
	b.ReportMetric(100*float64(cpu)/float64(wall), "cpu-%")
	b.ReportMetric(100*float64(floorCPU)/float64(wall), "floor-cpu-%")
	b.ReportMetric(float64(trips)/float64(b.N)/steadyPeriods, "calls/period")
	b.ReportMetric(float64(lostHelds(hs)), "lost")
	metric(b, float64(wall.Nanoseconds()), "ns/op")
}
