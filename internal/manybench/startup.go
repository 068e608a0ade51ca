package manybench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
)

// startupLoad, when set, names the load the machine runs beside the
// benchmark (e.g. "2hogs+fsync"); it only labels the figures.
var startupLoad = flag.String("lease.load", "", "a label for the load beside BenchmarkStartup and BenchmarkHeldSteady")

// Startup measures a node's start-up: N fresh keys (never written: each
// iteration takes keys of its own) held on one store, through one
// HoldEach ("holdeach") or through N goroutines calling Hold at once
// ("hold"). Beside it, in each iteration, the per-key baseline (another N
// fresh keys through a store over PerKey(driver), run first, so that the
// store with sessions meets the larger table) and the floor: the driver's
// own GetMany and PutMany of N keys of their own, one call each. It
// reports the time until every key is held (ns/op, perkey-ns/op,
// floor-ns/op; ratio is ns/op over the floor, perkey-ns/ns the baseline
// over ns/op); the driver calls (GetMany, PutMany, session writes, or
// one-key Get and Put: "calls/op") of each, where the keeper's looks are
// split at its largest batch (5,000 keys), and each driver splits a call
// into transactions (SQLite: 2,500 keys) or statements (PostgreSQL: 5,000
// keys); the goroutines the store keeps once every key is held; the heap
// bytes per held key; and the Helds lost during start-up (a Held whose
// Context ended before all were held), which must be 0.
func Startup(b *testing.B, backend Backend) {
	forSizes(b, backend, backend.Sizes, func(b *testing.B, rig Rig, n int) {
		for _, way := range []string{"holdeach", "hold"} {
			b.Run(way, func(b *testing.B) { benchStartup(b, rig, n, way == "hold") })
		}
	})
}

// started sums the start-ups of one store.
type started struct {
	took       time.Duration
	calls      int
	lost       int
	bytes      int64
	goroutines int
}

// measure holds the fresh keys prefix+ProfileKeys on s, then releases
// them all.
func (m *started) measure(b *testing.B, s *lease.DocumentStore, c *testkit.TripCounter, prefix string, n int, concurrent bool) {
	keys := ProfileKeys(prefix, n)
	var hs []*lease.Held
	m.bytes, m.goroutines = heapAndGoroutines(func() {
		c.Take()
		start := time.Now()
		hs = holdAllAtOnce(b, s, keys, concurrent)
		m.took += time.Since(start)
		m.calls += c.Take().Trips
	})
	m.lost += lostHelds(hs)
	if err := s.ReleaseAll(context.Background()); err != nil && !errors.Is(err, lease.ErrLost) {
		b.Fatal(err)
	}
	idle(b, c)
	c.Take()
}

func benchStartup(b *testing.B, rig Rig, n int, concurrent bool) {
	s, c := counted(b, rig.Driver, "bench", rig.TTL)
	pk, pc := counted(b, PerKey(b, rig.Driver), "bench", rig.TTL)
	floorKeys := ProfileKeys("startfloor:", n)
	slices.Sort(floorKeys) // in key order, as HoldEach takes its keys: the cheaper way to write them
	var sess, per started
	var floorTime time.Duration
	var floorCalls, iter int
	baseline := perKey(b, rig)
	for b.Loop() {
		iter++
		if baseline {
			per.measure(b, pk, pc, fmt.Sprintf("k%d/", iter), n, concurrent)
		}
		sess.measure(b, s, c, fmt.Sprintf("s%d/", iter), n, concurrent)
		start := time.Now()
		putAll(b, c, nextWrites(b, c, floorKeys, "floor", time.Now().Add(rig.TTL)))
		floorTime += time.Since(start)
		floorCalls += c.Take().Trips
	}
	metric(b, float64(sess.took.Nanoseconds()), "ns/op")
	metric(b, float64(sess.calls), "calls/op")
	metric(b, float64(floorTime.Nanoseconds()), "floor-ns/op")
	metric(b, float64(floorCalls), "floor-calls/op")
	ratio(b, float64(sess.took), float64(floorTime), "ratio")
	b.ReportMetric(float64(sess.goroutines), "goroutines")
	b.ReportMetric(float64(sess.bytes)/float64(n), "B/key")
	metric(b, float64(sess.lost+per.lost), "lost/op")
	if baseline {
		metric(b, float64(per.took.Nanoseconds()), "perkey-ns/op")
		metric(b, float64(per.calls), "perkey-calls/op")
		ratio(b, float64(per.took), float64(sess.took), "perkey-ns/ns")
		b.ReportMetric(float64(per.bytes)/float64(n), "perkey-B/key")
	}
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

// nextWrites reads keys through d's GetMany and returns the writes of
// each key's next grant to owner until expires, each conditional on the
// version read.
func nextWrites(b *testing.B, d lease.Driver, keys []string, owner string, expires time.Time) []lease.Write {
	got, err := d.(lease.BatchReader).GetMany(context.Background(), keys)
	if err != nil {
		b.Fatal(err)
	}
	ws := make([]lease.Write, len(keys))
	for i, r := range got {
		ws[i] = lease.Write{Rec: lease.Record{Key: keys[i], Owner: owner, Epoch: r.Rec.Epoch + 1, ExpiresAt: expires}}
		switch {
		case errors.Is(r.Err, lease.ErrNotFound):
			ws[i].Pre = lease.Precondition{Absent: true}
		case r.Err != nil:
			b.Fatalf("get %s: %v", keys[i], r.Err)
		default:
			ws[i].Pre = lease.Precondition{Version: r.Version}
		}
	}
	return ws
}

// putAll writes ws through d's PutMany, failing on any write's error.
func putAll(b *testing.B, d lease.Driver, ws []lease.Write) {
	res, err := d.(lease.BatchDriver).PutMany(context.Background(), ws)
	if err != nil {
		b.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			b.Fatalf("put %s: %v", ws[i].Rec.Key, r.Err)
		}
	}
}
