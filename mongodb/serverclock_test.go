package mongodb

import (
	"context"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/mongoproxy"
	"github.com/leasekit/lease/internal/mongoserver"
	"github.com/leasekit/lease/leasetest"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The tests of this file give stores a host clock 10 minutes off the
// server's, through the tests' seam for a host's wall clock (not
// WithClock, which would opt the store out of the server's clock), and
// check that only the server's clock, read from hello's localTime, judges
// expiry (R8).

var ctxBG = context.Background()

// serverNow reads the server's clock: hello's localTime, which is
// truncated to the millisecond.
func serverNow(t *testing.T) time.Time {
	t.Helper()
	var reply struct {
		LocalTime time.Time `bson:"localTime"`
	}
	err := mongoserver.SharedClient(t).Database("admin").RunCommand(ctxBG, bson.D{{Key: "hello", Value: 1}}).Decode(&reply)
	if err != nil || reply.LocalTime.IsZero() {
		t.Fatalf("hello: %+v, %v", reply, err)
	}
	return reply.LocalTime
}

// TestServerClockSkew_R8 runs leasetest's clock-skew suite on MongoDB:
// stores whose hosts' clocks are ten minutes off judge by the server's
// clock alone, read from hello's localTime; the holder reaches the server
// through a proxy of its own, which the cut closes. A stamp may lag the
// server's clock by the last hello's round trip (the driver reports a
// lower bound), which a loaded machine stretches.
func TestServerClockSkew_R8(t *testing.T) {
	leasetest.TestServerClockSkew(t, leasetest.SkewRig{
		Pair: func(t *testing.T) (lease.Driver, lease.Driver, func()) {
			coll := mongoserver.Collection(t, mongoserver.SharedClient(t))
			d := newTestMongoDriverOn(t, coll)
			proxy := mongoproxy.New(t, serialisedAddr(t))
			holderClient := mongoserver.Client(t, proxy)
			holder := newTestMongoDriverOn(t, holderClient.Database(coll.Database().Name()).Collection(coll.Name()))
			return holder, d, func() { proxy.Close() }
		},
		ServerNow: serverNow,
		StampLag:  250 * time.Millisecond,
	})
}

// serialisedAddr is the address a test's own proxy forwards to: the
// shared serialising proxy on FerretDB, so that its requests stay
// serialised with every other client's, else the server.
func serialisedAddr(t *testing.T) string {
	t.Helper()
	s := mongoserver.Shared(t)
	if s.Ferret {
		return mongoserver.SharedProxy(t, s).Addr()
	}
	return s.Addr
}

// TestServerClockSampleShared_R8 checks the driver's sampling of the
// server's clock: concurrent calls without a sample share one hello, calls
// within clockSampleAge send none, and the first call after it sends one.
func TestServerClockSampleShared_R8(t *testing.T) {
	d, err := newMongoDriver(ctxBG, mongoserver.Collection(t, mongoserver.SharedClient(t)), driverOpts(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	const calls = 16
	samples := make(chan clockSample, calls)
	for range calls {
		go func() {
			s, err := d.clock.sampleFor(ctxBG)
			if err != nil {
				t.Error(err)
			}
			samples <- s
		}()
	}
	first := <-samples
	for range calls - 1 {
		if s := <-samples; s != first {
			t.Fatalf("R8: concurrent calls without a sample got different hellos' samples (localTime %v and %v); want one shared", first.local, s.local)
		}
	}
	if s, err := d.clock.sampleFor(ctxBG); err != nil || s != first {
		t.Fatalf("R8: a call within %v of the sample got localTime %v, %v; want the sample's %v, no hello", clockSampleAge, s.local, err, first.local)
	}
	if lower, now := first.lowerBound(), serverNow(t); lower.After(now.Add(time.Millisecond)) {
		t.Fatalf("R8: the sample's lower bound %v is after the server's clock %v", lower, now)
	}

	d.clock.mu.Lock()
	d.clock.sample.answered = d.clock.sample.answered.Add(-clockSampleAge)
	aged := d.clock.sample
	d.clock.mu.Unlock()
	s, err := d.clock.sampleFor(ctxBG)
	if err != nil || s == aged || !s.answered.After(first.answered) {
		t.Fatalf("R8: a call after the sample aged %v got localTime %v, %v; want a new hello's sample", clockSampleAge, s.local, err)
	}
}

// TestServerClockSampleFailedHello_R8 checks what a call does when its
// hello fails (here: its ctx is done): it goes on with a sample younger
// than clockSampleMaxAge, and fails rather than extrapolate an older one.
func TestServerClockSampleFailedHello_R8(t *testing.T) {
	d, err := newMongoDriver(ctxBG, mongoserver.Collection(t, mongoserver.SharedClient(t)), driverOpts(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	first, err := d.clock.sampleFor(ctxBG)
	if err != nil {
		t.Fatal(err)
	}
	failing, cancel := context.WithCancel(ctxBG)
	cancel()
	age := func(by time.Duration) {
		d.clock.mu.Lock()
		d.clock.sample.answered = first.answered.Add(-by)
		d.clock.mu.Unlock()
	}
	age(2 * clockSampleAge)
	if s, err := d.clock.sampleFor(failing); err != nil || s.local != first.local {
		t.Fatalf("R8: a call whose hello failed, with a sample %v old: localTime %v, %v; want the sample's %v",
			2*clockSampleAge, s.local, err, first.local)
	}
	age(clockSampleMaxAge)
	if s, err := d.clock.sampleFor(failing); err == nil {
		t.Fatalf("R8: a call whose hello failed, with a sample %v old, went on with localTime %v; want an error", clockSampleMaxAge, s.local)
	}
}
