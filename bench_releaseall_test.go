//go:build unix

package lease

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkSessionReleaseAll measures ReleaseAll of N keys held by one
// HoldEach on the memory driver, which states Sessions: it ends every Held
// (R17), then the session, clean, in one write (R22). Each Held's Context
// is waited on (Done called) as a serving goroutine's would be. Beside it,
// in the same run, its floors:
//
//	ns/op            the ReleaseAll call
//	floor-ns/op      the one write it cannot avoid: a guarded PutSession
//	                 of a session record of its own, straight to the driver
//	cancel-ns/op     ending N contexts made as a Held's are (a cancel each,
//	                 with a cause, Done called): the end of N Helds can cost
//	                 no less
//	cpu-ns/op, cancel-cpu-ns/op  this process's CPU time during each (on a
//	                 loaded machine, steadier than the times)
//	ratio            ns/op over floor-ns/op + cancel-ns/op
//	cpu-ratio        cpu-ns/op over cancel-cpu-ns/op
//
// Each is timed after a GC, so that none pays for the start-up's garbage.
func BenchmarkSessionReleaseAll(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) { benchSessionReleaseAll(b, n) })
	}
}

func benchSessionReleaseAll(b *testing.B, n int) {
	d := NewMemoryDriver().(*memoryDriver)
	s, err := NewDocumentStore(d, WithOwner("bench"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ctx := context.Background()
	keys := profileKeys(n)
	floor := newSessionFloor(b, d)
	var took, floors, cancels, cpu, cancelCPU time.Duration
	for b.Loop() {
		hs := make([]*Held, 0, n)
		for r := range HoldEach(ctx, s, keys) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			r.Held.Context().Done()
			hs = append(hs, r.Held)
		}
		runtime.GC()
		start, cpu0 := time.Now(), processCPU()
		if err := s.ReleaseAll(ctx); err != nil {
			b.Fatal(err)
		}
		took, cpu = took+time.Since(start), cpu+processCPU()-cpu0
		for _, h := range hs {
			if !errors.Is(context.Cause(h.Context()), ErrLost) {
				b.Fatalf("%s after ReleaseAll: cause %v; want ErrLost", h.key, context.Cause(h.Context()))
			}
		}
		floors += floor.write(b)
		t, c := cancelFloor(n)
		cancels, cancelCPU = cancels+t, cancelCPU+c
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(per(took), "ns/op")
	b.ReportMetric(per(floors), "floor-ns/op")
	b.ReportMetric(per(cancels), "cancel-ns/op")
	b.ReportMetric(float64(took)/float64(floors+cancels), "ratio")
	b.ReportMetric(per(cpu), "cpu-ns/op")
	b.ReportMetric(per(cancelCPU), "cancel-cpu-ns/op")
	b.ReportMetric(float64(cpu)/float64(cancelCPU), "cpu-ratio")
}

// sessionFloor writes a session record of its own, guarded by its
// version, as ending a session does.
type sessionFloor struct {
	d       *memoryDriver
	version uint64
}

func newSessionFloor(b *testing.B, d *memoryDriver) *sessionFloor {
	f := &sessionFloor{d: d}
	v, err := d.PutSession(context.Background(), f.record(), Precondition{Absent: true})
	if err != nil {
		b.Fatal(err)
	}
	f.version = v
	return f
}

func (f *sessionFloor) record() SessionRecord {
	return SessionRecord{ID: "f100f100f100f100f100f100f100f100", Owner: "floor", ExpiresAt: time.Now().Add(DefaultTTL), State: SessionLive}
}

func (f *sessionFloor) write(b *testing.B) time.Duration {
	start := time.Now()
	v, err := f.d.PutSession(context.Background(), f.record(), Precondition{Version: f.version})
	took := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	f.version = v
	return took
}

// cancelFloor ends n contexts made as a Held's are (a cancel with a
// cause, Done called), after a GC, and returns the time and the process
// CPU the cancels took.
func cancelFloor(n int) (took, cpu time.Duration) {
	cancels := make([]context.CancelCauseFunc, n)
	for i := range cancels {
		var c context.Context
		c, cancels[i] = context.WithCancelCause(context.WithoutCancel(context.Background()))
		c.Done()
	}
	cause := fmt.Errorf("%w: released", ErrLost)
	runtime.GC()
	start, cpu0 := time.Now(), processCPU()
	for _, cancel := range cancels {
		cancel(cause)
	}
	return time.Since(start), processCPU() - cpu0
}
