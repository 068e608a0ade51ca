package leaseotel_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/leaseotel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// failingDriver fails every Put while fail is set, as a backend that
// went away would.
type failingDriver struct {
	lease.Driver
	fail atomic.Bool
}

var errDown = errors.New("backend down")

func (d *failingDriver) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	if d.fail.Load() {
		return 0, errDown
	}
	return d.Driver.Put(ctx, rec, pre)
}

// TestWaitAndRenewalFailures: a Hold that gives up after waiting 2s is one
// lease.wait.duration of 2s with outcome gave_up; a renewal that fails on
// storage counts in lease.renewal.failures with its error.type, and the
// failed write in lease.storage.duration.
func TestWaitAndRenewalFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		obs, err := leaseotel.New(mp)
		if err != nil {
			t.Fatal(err)
		}
		d := &failingDriver{Driver: lease.NewMemoryDriver()}
		alice, err := lease.NewDocumentStore(d, lease.WithOwner("alice"), lease.WithObserver(obs))
		if err != nil {
			t.Fatal(err)
		}
		defer alice.Close()
		bob, err := lease.NewDocumentStore(d, lease.WithOwner("bob"))
		if err != nil {
			t.Fatal(err)
		}
		defer bob.Close()
		if _, err := bob.Acquire(t.Context(), "job"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		if _, err := lease.Hold(ctx, alice, "job"); !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("Hold = %v; want ErrHeld", err)
		}

		g, err := alice.Acquire(t.Context(), "other")
		if err != nil {
			t.Fatal(err)
		}
		d.fail.Store(true)
		time.Sleep(time.Second) // a renewal that wrote what is stored would read as landed (R9)
		if _, err := alice.Renew(t.Context(), g); !errors.Is(err, lease.ErrStorage) {
			t.Fatalf("Renew = %v; want a storage error", err)
		}

		var rm metricdata.ResourceMetrics
		if err := reader.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		kind := attribute.String("lease.store.kind", "memory")
		set := attribute.NewSet(kind, attribute.String("error.type", "storage"))
		if v := sums(t, rm)["lease.renewal.failures "+set.Encoded(attribute.DefaultEncoder())]; v != 1 {
			t.Errorf("lease.renewal.failures{error.type=storage} = %d; want 1", v)
		}
		waits := histogramCounts(t, rm, "lease.wait.duration", "lease.wait.outcome")
		if waits["gave_up"] != 1 || waits["acquired"] != 0 {
			t.Errorf("waits by outcome = %v; want one gave_up", waits)
		}
		// The wait is timed from the first look, which Hold makes after
		// gathering concurrent Holds for up to a millisecond.
		if sum := histogramSum(rm, "lease.wait.duration"); sum < 1.999 || sum > 2 {
			t.Errorf("waited %vs in all; want 2s less the first look's gathering", sum)
		}
		failed := histogramCounts(t, rm, "lease.storage.duration", "error.type")
		if failed["storage"] == 0 {
			t.Errorf("storage calls by error.type = %v; want the failed put", failed)
		}
	})
}

func histogramSum(rm metricdata.ResourceMetrics, name string) float64 {
	var sum float64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name {
				for _, p := range h.DataPoints {
					sum += p.Sum
				}
			}
		}
	}
	return sum
}
