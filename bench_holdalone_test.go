package lease

import (
	"context"
	"testing"
	"time"
)

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
