package lease

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// startupSizes are the Ns of BenchmarkStartup and BenchmarkHeldSteady;
// -short keeps to the first.
var startupSizes = []int{10000, 100000}

// startupLoad, when set, names the load the machine runs beside the
// benchmark (e.g. "2hogs+fsync"); it only labels the figures.
var startupLoad = flag.String("lease.load", "", "a label for the load beside BenchmarkStartup")

// forStartupBackends runs bench on SQLite and PostgreSQL at each of
// startupSizes (the first only with -short).
func forStartupBackends(b *testing.B, bench func(b *testing.B, rig manyRig, n int)) {
	sizes := startupSizes
	if testing.Short() {
		sizes = sizes[:1]
	}
	for _, backend := range manyBackends {
		if backend.name != "sqlite" && backend.name != "postgres" {
			continue
		}
		for _, n := range sizes {
			b.Run(fmt.Sprintf("%s/N=%d", backend.name, n), func(b *testing.B) {
				bench(b, backend.open(b, n), n)
			})
		}
	}
}

// BenchmarkStartup measures a node's start-up: N free (released, after
// the first iteration: never written) keys held on one store, through one
// HoldEach ("holdeach") or through N goroutines calling Hold at once
// ("hold"), beside the floor of the same run: the driver's own GetMany
// and PutMany of N keys of their own, one call each. It reports the time
// until every key is held; the driver calls (GetMany, PutMany, or one-key
// Get and Put: "calls/op") of the store and of the floor, where the
// keeper's looks are split at maxBatch (5,000) keys, and each driver
// splits a call into transactions (SQLite: 2,500 keys) or statements
// (PostgreSQL: 5,000 keys); the goroutines the store keeps once every key is held; the heap
// bytes per held key; the Helds lost during start-up (a Held whose Context
// ended before all were held), which must be 0; and the calls the store
// still makes after the ReleaseAll that ends each iteration, until its
// keeper is idle (renewals that were in flight), kept out of the floor's.
func BenchmarkStartup(b *testing.B) { forEachHoldWay(b, benchStartup) }

// forEachHoldWay runs bench for each way of holding N keys, "holdeach"
// (one HoldEach) and "hold" (N goroutines calling Hold at once), on each
// startup backend and size.
func forEachHoldWay(b *testing.B, bench func(b *testing.B, rig manyRig, n int, concurrent bool)) {
	for _, way := range []string{"holdeach", "hold"} {
		b.Run(way, func(b *testing.B) {
			forStartupBackends(b, func(b *testing.B, rig manyRig, n int) {
				bench(b, rig, n, way == "hold")
			})
		})
	}
}

// startupStore opens a store on rig's driver, counting its driver calls.
func startupStore(b *testing.B, rig manyRig) (*DocumentStore, *tripCounter) {
	c := &tripCounter{Driver: rig.d}
	s, err := NewDocumentStore(c, WithOwner("bench"), WithTTL(rig.ttl))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, c
}

func benchStartup(b *testing.B, rig manyRig, n int, concurrent bool) {
	s, c := startupStore(b, rig)
	keys := profileKeys(n)
	floorKeys := make([]string, n)
	for i := range floorKeys {
		floorKeys[i] = "startfloor:" + keys[i]
	}
	slices.Sort(floorKeys) // in key order, as HoldEach takes its keys: the cheaper way to write them
	var took, floorTime time.Duration
	var trips, floorTrips, afterRelease, lost, goroutines int
	var perKey float64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		c.take()
		start := time.Now()
		hs := holdAllAtOnce(b, s, keys, concurrent)
		took += time.Since(start)
		trips += c.take()
		for _, h := range hs {
			if h.Context().Err() != nil {
				lost++
			}
		}
		goroutines = runtime.NumGoroutine() - g0
		runtime.GC()
		runtime.ReadMemStats(&after)
		perKey = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
		runtime.KeepAlive(hs)
		if err := s.ReleaseAll(context.Background()); err != nil && !errors.Is(err, ErrLost) {
			b.Fatal(err)
		}
		keeperIdle(s)
		afterRelease += c.take()
		start = time.Now()
		getPutFloor(b, c, floorKeys, rig.ttl)
		floorTime += time.Since(start)
		floorTrips += c.take()
	}
	iters := float64(b.N)
	b.ReportMetric(float64(took.Nanoseconds())/iters, "ns/op")
	b.ReportMetric(float64(trips)/iters, "calls/op")
	b.ReportMetric(float64(floorTime.Nanoseconds())/iters, "floor-ns/op")
	b.ReportMetric(float64(floorTrips)/iters, "floor-calls/op")
	b.ReportMetric(float64(afterRelease)/iters, "calls-after-releaseall/op")
	b.ReportMetric(float64(took)/float64(floorTime), "ratio")
	b.ReportMetric(float64(goroutines), "goroutines")
	b.ReportMetric(perKey, "B/key")
	b.ReportMetric(float64(lost)/iters, "lost/op")
	if *startupLoad != "" {
		b.Logf("load: %s", *startupLoad)
	}
}

// holdAllAtOnce holds keys on s, through one HoldEach or one Hold per key
// all at once, and returns the Helds once every key is held.
func holdAllAtOnce(b *testing.B, s *DocumentStore, keys []string, concurrent bool) []*Held {
	hs := make([]*Held, len(keys))
	if !concurrent {
		i := 0
		for r := range HoldEach(context.Background(), s, keys) {
			if r.Err != nil {
				b.Fatalf("hold %s: %v", r.Key, r.Err)
			}
			hs[i] = r.Held
			i++
		}
		return hs
	}
	var wg sync.WaitGroup
	errs := make([]error, len(keys))
	for i, key := range keys {
		wg.Go(func() { hs[i], errs[i] = Hold(context.Background(), s, key) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	return hs
}

// getPutFloor is the floor of a start-up: the driver's own GetMany of
// keys, then one PutMany writing each key's next grant, on d as the store
// sees it (so that its round trips are counted alike).
func getPutFloor(b *testing.B, d *tripCounter, keys []string, ttl time.Duration) {
	ctx := context.Background()
	got, err := d.GetMany(ctx, keys)
	if err != nil {
		b.Fatal(err)
	}
	ws := make([]Write, len(keys))
	expires := time.Now().Add(ttl)
	for i, r := range got {
		w := Write{Rec: Record{Key: keys[i], Owner: "floor", Epoch: r.Rec.Epoch + 1, ExpiresAt: expires}}
		switch {
		case errors.Is(r.Err, ErrNotFound):
			w.Pre = Precondition{Absent: true}
		case r.Err != nil:
			b.Fatalf("floor get %s: %v", keys[i], r.Err)
		default:
			w.Pre = Precondition{Version: r.Version}
		}
		ws[i] = w
	}
	res, err := d.PutMany(ctx, ws)
	if err != nil {
		b.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			b.Fatalf("floor put %s: %v", keys[i], r.Err)
		}
	}
}

// steadyPeriods is how many renewal periods BenchmarkHeldSteady watches.
const steadyPeriods = 6

// BenchmarkHeldSteady measures the CPU this process spends keeping N
// keys held by one HoldEach ("holdeach") or by N goroutines calling Hold
// at once ("hold") (the store's default TTL, renewed every third of it) over
// steadyPeriods renewal periods, from one period after start-up: getrusage user
// plus system time over wall time, as a percentage of one core
// ("cpu-%"). Beside it, the floor: the raw renewal writes of N keys
// (bench_rigs_test.go) steadyPeriods times, as CPU of this process over
// the same wall time ("floor-cpu-%"; on PostgreSQL the server's CPU is in
// neither). It also reports the store's driver calls per period and the
// Helds lost (0 expected).
func BenchmarkHeldSteady(b *testing.B) {
	if processCPU() == 0 {
		b.Skip("this system gives no process CPU time (getrusage)")
	}
	forEachHoldWay(b, benchHeldSteady)
}

func benchHeldSteady(b *testing.B, rig manyRig, n int, concurrent bool) {
	s, c := startupStore(b, rig)
	hs := holdAllAtOnce(b, s, profileKeys(n), concurrent)
	period := rig.ttl / 3
	time.Sleep(period) // start-up's aftermath (its garbage, the first renewals) is not steady state
	var wall, cpu, floorCPU time.Duration
	var trips, lost int
	for b.Loop() {
		c.take()
		start, cpu0 := time.Now(), processCPU()
		time.Sleep(steadyPeriods * period) // the loop renews on its own meanwhile
		wall += time.Since(start)
		cpu += processCPU() - cpu0
		trips += c.take()
		cpu0 = processCPU()
		for range steadyPeriods {
			rig.floor(b)
		}
		floorCPU += processCPU() - cpu0
	}
	for _, h := range hs {
		if h.Context().Err() != nil {
			lost++
		}
	}
	iters := float64(b.N)
	b.ReportMetric(100*float64(cpu)/float64(wall), "cpu-%")
	b.ReportMetric(100*float64(floorCPU)/float64(wall), "floor-cpu-%")
	b.ReportMetric(float64(trips)/iters/steadyPeriods, "calls/period")
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(float64(wall.Nanoseconds())/iters, "ns/op")
}

// keeperIdle waits until the keeper of s has no renewal or look in flight.
func keeperIdle(s *DocumentStore) {
	k := keeperFor(s)
	defer k.unuse()
	for {
		k.mu.Lock()
		busy := k.renewing > 0 || k.looking
		k.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(5 * time.Millisecond) // polling the keeper's calls, not waiting for time to pass
	}
}

// BenchmarkHoldAlone measures what coalescing costs a Hold that comes
// alone (more than gatherWindow after the store's previous Hold, so it
// does not wait for company): one Hold and its Release at a time on a
// memory store, beside the floor of the same run, a bare Acquire and
// Release of another key on the same store; and ("burst-ns/op") the same
// Hold when it comes right after another, which waits the gathering
// window for more Holds to share its look.
func BenchmarkHoldAlone(b *testing.B) {
	s, err := NewDocumentStore(NewMemoryDriver(), WithOwner("bench"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ctx := context.Background()
	holdRelease := func() time.Duration {
		start := time.Now()
		h, err := Hold(ctx, s, "alone")
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var held, burst, floor time.Duration
	for b.Loop() {
		time.Sleep(2 * gatherWindow) // not measured: the next Hold comes alone
		held += holdRelease()
		burst += holdRelease()
		start := time.Now()
		g, err := s.Acquire(ctx, "floor")
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, g); err != nil {
			b.Fatal(err)
		}
		floor += time.Since(start)
	}
	b.ReportMetric(float64(held.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(burst.Nanoseconds())/float64(b.N), "burst-ns/op")
	b.ReportMetric(float64(floor.Nanoseconds())/float64(b.N), "floor-ns/op")
	b.ReportMetric(gatherWindow.Seconds()*1e9, "window-ns")
}
