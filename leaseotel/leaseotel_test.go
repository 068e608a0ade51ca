package leaseotel_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/leaseotel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// clock is a settable clock for the stores.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestMetrics runs a scripted sequence on a store observed through the
// adapter (three acquires, one of them a takeover, two renewals, one loss,
// a ReleaseAll) and checks what the SDK's reader exports.
func TestMetrics(t *testing.T) {
	ctx := t.Context()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())
	obs, err := leaseotel.New(mp, leaseotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}

	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	d := lease.NewMemoryDriver()
	store := func(owner string, opts ...lease.Option) *lease.DocumentStore {
		s, err := lease.NewDocumentStore(d, append(opts, lease.WithOwner(owner), lease.WithClock(clk.Now), lease.WithTTL(time.Minute))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	alice, bob := store("alice", lease.WithObserver(obs)), store("bob")
	acquire := func(s lease.Store, key string) lease.Grant {
		t.Helper()
		g, err := s.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}

	acquire(bob, "profile:3") // bob dies holding it
	clk.advance(2 * time.Minute)
	g1 := acquire(alice, "profile:1")
	g2 := acquire(alice, "profile:2")
	g3 := acquire(alice, "profile:3") // a takeover
	if !g3.PreviousUnclean {
		t.Fatal("profile:3 was not a takeover")
	}
	clk.advance(30 * time.Second)
	for _, g := range []lease.Grant{g2, g3} {
		if _, err := alice.Renew(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	clk.advance(31 * time.Second) // profile:1 ran out; bob takes it
	acquire(bob, "profile:1")
	if _, err := alice.Renew(ctx, g1); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Renew(profile:1) = %v; want ErrLost", err)
	}
	if err := alice.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := sums(t, rm)
	kind := attribute.String("lease.store.kind", "memory")
	for _, c := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  int64
	}{
		{"lease.held", nil, 0},
		{"lease.acquisitions", []attribute.KeyValue{attribute.Bool("lease.takeover", false)}, 2},
		{"lease.acquisitions", []attribute.KeyValue{attribute.Bool("lease.takeover", true)}, 1},
		{"lease.renewals", nil, 2},
		{"lease.losses", []attribute.KeyValue{attribute.String("lease.loss.cause", "taken")}, 1},
		{"lease.releases", []attribute.KeyValue{attribute.Bool("lease.release.all", true)}, 2},
	} {
		set := attribute.NewSet(append(c.attrs, kind)...)
		key := c.name + " " + set.Encoded(attribute.DefaultEncoder())
		if v, ok := got[key]; !ok || v != c.want {
			t.Errorf("%s = %d (exported: %v); want %d", key, v, ok, c.want)
		}
	}
	for key, v := range got {
		if strings.HasPrefix(key, "lease.renewal.failures ") && v != 0 {
			t.Errorf("%s = %d; want no renewal failures", key, v)
		}
	}

	ops := histogramCounts(t, rm, "lease.storage.duration", "lease.storage.operation")
	if ops["get"] == 0 || ops["put"] == 0 {
		t.Errorf("storage calls by operation = %v; want gets and puts", ops)
	}
	checkUnits(t, rm)
	checkNoKeys(t, rm)

	var storageSpans int
	for _, s := range spans.GetSpans() {
		if s.Name == "lease.storage" {
			storageSpans++
		}
	}
	if storageSpans == 0 {
		t.Error("no lease.storage spans recorded")
	}
}

// sums returns every exported sum's data points, by "name attributes".
func sums(t *testing.T, rm metricdata.ResourceMetrics) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != leaseotel.ScopeName {
			t.Errorf("scope %q; want %q", sm.Scope.Name, leaseotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range s.DataPoints {
					out[m.Name+" "+p.Attributes.Encoded(attribute.DefaultEncoder())] = p.Value
				}
			}
		}
	}
	return out
}

// histogramCounts returns the counts of a histogram's data points by the
// value of attribute by.
func histogramCounts(t *testing.T, rm metricdata.ResourceMetrics, name string, by attribute.Key) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				t.Fatalf("%s is a %T; want a float64 histogram", name, m.Data)
			}
			for _, p := range h.DataPoints {
				v, _ := p.Attributes.Value(by)
				out[v.AsString()] += p.Count
			}
		}
	}
	return out
}

// checkUnits checks the units of every instrument exported.
func checkUnits(t *testing.T, rm metricdata.ResourceMetrics) {
	t.Helper()
	want := map[string]string{
		"lease.held": "{lease}", "lease.acquisitions": "{acquisition}", "lease.renewals": "{renewal}",
		"lease.losses": "{loss}", "lease.releases": "{release}", "lease.storage.duration": "s",
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if u, ok := want[m.Name]; ok && m.Unit != u {
				t.Errorf("%s unit %q; want %q", m.Name, m.Unit, u)
			}
			delete(want, m.Name)
		}
	}
	for name := range want {
		t.Errorf("%s not exported", name)
	}
}

// checkNoKeys checks that no metric names a key or an owner.
func checkNoKeys(t *testing.T, rm metricdata.ResourceMetrics) {
	t.Helper()
	check := func(name string, set attribute.Set) {
		for _, kv := range set.ToSlice() {
			if kv.Key == "lease.key" || kv.Key == "lease.owner" {
				t.Errorf("%s has attribute %s", name, kv.Key)
			}
		}
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					check(m.Name, p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					check(m.Name, p.Attributes)
				}
			}
		}
	}
}

// TestSessionMetrics: a store that keeps its Helds through a session
// counts the session's renewals, not its keys', and its start and end.
func TestSessionMetrics(t *testing.T) {
	ctx := t.Context()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	obs, err := leaseotel.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	s, err := lease.NewDocumentStore(lease.NewMemoryDriver(), lease.WithOwner("alice"), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var held []*lease.Held
	for r := range lease.HoldEach(ctx, s, []string{"a", "b", "c"}) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		held = append(held, r.Held)
	}
	if _, err := held[0].Confirm(ctx); err != nil { // one session renewal: every key's
		t.Fatal(err)
	}
	if err := s.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := sums(t, rm)
	kind := attribute.String("lease.store.kind", "memory")
	for _, c := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  int64
	}{
		{"lease.session.renewals", nil, 1},
		{"lease.sessions", []attribute.KeyValue{attribute.String("lease.session.event", "started")}, 1},
		{"lease.sessions", []attribute.KeyValue{attribute.String("lease.session.event", "ended")}, 1},
		{"lease.releases", []attribute.KeyValue{attribute.Bool("lease.release.all", true)}, 3},
		{"lease.held", nil, 0},
	} {
		set := attribute.NewSet(append(c.attrs, kind)...)
		key := c.name + " " + set.Encoded(attribute.DefaultEncoder())
		if v, ok := got[key]; !ok || v != c.want {
			t.Errorf("%s = %d (exported: %v); want %d", key, v, ok, c.want)
		}
	}
	base := attribute.NewSet(kind)
	if v := got["lease.renewals "+base.Encoded(attribute.DefaultEncoder())]; v != 0 {
		t.Errorf("lease.renewals = %d; want none: the keys were renewed through their session", v)
	}
}
