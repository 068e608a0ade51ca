package leaseotel_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/leaseotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// countingObserver counts events by kind: the cheapest useful observer.
type countingObserver struct {
	n [16]atomic.Int64
}

func (c *countingObserver) Observe(e lease.Event) { c.n[e.Kind].Add(1) }

func (c *countingObserver) total() int64 {
	var sum int64
	for i := range c.n {
		sum += c.n[i].Load()
	}
	return sum
}

// BenchmarkObserve measures one acquire, renew and release cycle on a
// memory store: the driver calls alone (floor), then the store with no
// observer, with a counting observer, and with the OpenTelemetry adapter
// on the SDK (a ManualReader, as an exporter would have it). The cycle is
// 4 storage round trips and, observed, 7 events: acquired, renewed,
// released and 4 storage calls.
func BenchmarkObserve(b *testing.B) {
	ctx := context.Background()
	b.Run("floor", func(b *testing.B) {
		d := lease.NewMemoryDriver()
		rec := lease.Record{Key: "k", Owner: "o", Epoch: 1}
		v, err := d.Put(ctx, rec, lease.Precondition{Absent: true})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := d.Get(ctx, "k"); err != nil {
				b.Fatal(err)
			}
			for range 3 { // acquire, renew, release
				if v, err = d.Put(ctx, rec, lease.Precondition{Version: v}); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(4, "trips/op")
	})
	cycle := func(b *testing.B, obs lease.Observer) {
		s, err := lease.NewDocumentStore(lease.NewMemoryDriver(), lease.WithObserver(obs))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		b.ReportAllocs()
		for b.Loop() {
			g, err := s.Acquire(ctx, "k")
			if err != nil {
				b.Fatal(err)
			}
			if g, err = s.Renew(ctx, g); err != nil {
				b.Fatal(err)
			}
			if err := s.Release(ctx, g); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(4, "trips/op")
	}
	b.Run("none", func(b *testing.B) { cycle(b, nil) })
	b.Run("counting", func(b *testing.B) {
		c := &countingObserver{}
		cycle(b, c)
		b.ReportMetric(float64(c.total())/float64(b.N), "events/op")
	})
	b.Run("otel", func(b *testing.B) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		defer mp.Shutdown(ctx)
		obs, err := leaseotel.New(mp)
		if err != nil {
			b.Fatal(err)
		}
		cycle(b, obs)
	})
}
