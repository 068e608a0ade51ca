//go:build unix

package lease

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPerKeyRenewal measures what Hold's loop spends keeping N keys
// held by one HoldEach on a store whose driver does not state Sessions, so
// that every key is renewed per key, in batches (R12): the memory driver
// with Sessions hidden. Each iteration is one renewal period (RenewEvery,
// a period of at least two seconds and eight floors), and reports:
//
//	cpu-ns/op          this process's CPU time (getrusage) over the period
//	wave-ns/op         from the start of the period's first write call to the end of its last
//	period-allocs/op, period-B/op  heap allocations over the period (the floor's not in it)
//	floor-*            the floor of the same run: the raw PutMany calls of N
//	                   conditional writes on N rows of its own, maxBatch a call,
//	                   one after the other: its time, CPU and allocations
//	cpu-ratio          the store's CPU over the floor's
//	wave-ratio         the wave over the floor's time
//	B/key              the heap that holding the N keys added
//	floor-overlaps     floors that a renewal wave overlapped (a loaded
//	                   machine), left out with the period after them
func BenchmarkPerKeyRenewal(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) { benchPerKeyRenewal(b, n) })
	}
}

func benchPerKeyRenewal(b *testing.B, n int) {
	d := &waveDriver{memoryDriver: NewMemoryDriver().(*memoryDriver)}
	s, err := NewDocumentStore(d, WithOwner("bench"), WithTTL(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	floor := newPutFloor(b, d.memoryDriver, n)
	period := max(2*time.Second, 8*floor.run(b).took)

	var hs []*Held
	bytes := heapAdded(func() {
		for r := range HoldEach(context.Background(), s, profileKeys(n), RenewEvery(period)) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			hs = append(hs, r.Held)
		}
	})
	d.waitWave(0) // the look's writes are done
	d.take()
	var cpu, wave time.Duration
	var allocs, allocBytes uint64
	var fl floorRun
	periods, floors, overlaps := 0, 0, 0
	for b.Loop() {
		cpu0, m0 := processCPU(), memStats()
		d.waitWave(n)
		cpu += processCPU() - cpu0
		m1 := memStats()
		allocs, allocBytes = allocs+m1.Mallocs-m0.Mallocs, allocBytes+m1.TotalAlloc-m0.TotalAlloc
		wave += d.take()
		periods++
		r := floor.run(b)
		if d.started() {
			// A wave began during the floor (a loaded machine): neither the
			// floor nor the next period's figures are clean. Let that wave
			// end, and measure from the next.
			overlaps++
			d.waitWave(n)
			d.take()
			continue
		}
		fl, floors = fl.plus(r), floors+1
	}
	if floors == 0 {
		b.Fatal("every floor overlapped a renewal wave")
	}
	for _, h := range hs {
		if err := h.Context().Err(); err != nil {
			b.Fatalf("%s lost: %v", h.Grant().Key, context.Cause(h.Context()))
		}
	}
	per := func(x float64) float64 { return x / float64(periods) }
	perFloor := func(x float64) float64 { return x / float64(floors) }
	b.ReportMetric(per(float64(cpu)), "cpu-ns/op")
	b.ReportMetric(per(float64(wave)), "wave-ns/op")
	b.ReportMetric(per(float64(allocs)), "period-allocs/op")
	b.ReportMetric(per(float64(allocBytes)), "period-B/op")
	b.ReportMetric(perFloor(float64(fl.took)), "floor-ns/op")
	b.ReportMetric(perFloor(float64(fl.cpu)), "floor-cpu-ns/op")
	b.ReportMetric(perFloor(float64(fl.allocs)), "floor-allocs/op")
	b.ReportMetric(per(float64(cpu))/perFloor(float64(fl.cpu)), "cpu-ratio")
	b.ReportMetric(per(float64(wave))/perFloor(float64(fl.took)), "wave-ratio")
	b.ReportMetric(float64(overlaps), "floor-overlaps")
	b.ReportMetric(float64(bytes)/float64(n), "B/key")
}

// waveDriver is the memory driver without sessions that tells when a
// renewal wave is done: it counts the records written and the write calls
// in flight, and times the span of the calls since the last take.
type waveDriver struct {
	*memoryDriver
	mu          sync.Mutex
	changed     sync.Cond // on mu: writes or inFlight changed
	writes      int
	inFlight    int
	first, last time.Time
}

// Capabilities: none, so that the store keeps every key per key.
func (*waveDriver) Capabilities() Capabilities { return Capabilities{} }

func (d *waveDriver) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	d.start()
	defer d.done(1)
	return d.memoryDriver.Put(ctx, rec, pre)
}

func (d *waveDriver) PutMany(ctx context.Context, ws []Write) ([]PutResult, error) {
	d.start()
	defer d.done(len(ws))
	return d.memoryDriver.PutMany(ctx, ws)
}

func (d *waveDriver) start() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.first.IsZero() {
		d.first = time.Now()
	}
	d.inFlight++
}

func (d *waveDriver) done(writes int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inFlight--
	d.writes += writes
	d.last = time.Now()
	if d.changed.L == nil {
		d.changed.L = &d.mu
	}
	d.changed.Broadcast()
}

// waitWave waits until n records were written since the last take and no
// write call is in flight.
func (d *waveDriver) waitWave(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.changed.L == nil {
		d.changed.L = &d.mu
	}
	for d.writes < n || d.inFlight > 0 {
		d.changed.Wait()
	}
}

// started reports whether a write call began since the last take.
func (d *waveDriver) started() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.first.IsZero()
}

// take returns the span of the write calls since the last take, and
// starts the count afresh.
func (d *waveDriver) take() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	span := d.last.Sub(d.first)
	if d.first.IsZero() || d.last.Before(d.first) {
		span = 0
	}
	d.writes, d.first, d.last = 0, time.Time{}, time.Time{}
	return span
}

// putFloor is the floor of a renewal period of n keys: n conditional
// writes on rows of its own, in PutMany calls of maxBatch, straight to
// the driver.
type putFloor struct {
	d  *memoryDriver
	ws []Write
}

func newPutFloor(b *testing.B, d *memoryDriver, n int) *putFloor {
	f := &putFloor{d: d, ws: make([]Write, n)}
	exp := time.Now().Add(time.Hour)
	for i := range f.ws {
		f.ws[i] = Write{Rec: Record{Key: fmt.Sprintf("floor:%06d", i), Owner: "floor", Epoch: 1, ExpiresAt: exp}, Pre: Precondition{Absent: true}}
	}
	f.put(b)
	return f
}

// put writes every row once, each against the version it wrote last.
func (f *putFloor) put(b *testing.B) {
	for at := 0; at < len(f.ws); at += maxBatch {
		chunk := f.ws[at:min(at+maxBatch, len(f.ws))]
		res, err := f.d.PutMany(context.Background(), chunk)
		if err != nil {
			b.Fatal(err)
		}
		for i, r := range res {
			if r.Err != nil {
				b.Fatalf("floor write %s: %v", chunk[i].Rec.Key, r.Err)
			}
			chunk[i].Pre = Precondition{Version: r.Version}
		}
	}
}

// floorRun is what one or more runs of the floor took.
type floorRun struct {
	took, cpu time.Duration
	allocs    uint64
}

func (r floorRun) plus(o floorRun) floorRun {
	return floorRun{r.took + o.took, r.cpu + o.cpu, r.allocs + o.allocs}
}

// run writes the floor's rows once and measures it.
func (f *putFloor) run(b *testing.B) floorRun {
	m0, cpu0 := memStats(), processCPU()
	start := time.Now()
	f.put(b)
	took := time.Since(start)
	cpu := processCPU() - cpu0
	return floorRun{took: took, cpu: cpu, allocs: memStats().Mallocs - m0.Mallocs}
}

// processCPU is this process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func memStats() runtime.MemStats {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// heapAdded is the live heap that fn adds.
func heapAdded(fn func()) int64 {
	runtime.GC()
	before := memStats()
	fn()
	runtime.GC()
	return int64(memStats().HeapAlloc) - int64(before.HeapAlloc)
}
