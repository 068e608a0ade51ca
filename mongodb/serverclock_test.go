package mongodb

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/hostclock"
	"github.com/leasekit/lease/internal/mongoproxy"
	"github.com/leasekit/lease/internal/mongoserver"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The tests of this file give stores a host clock 10 minutes off the
// server's, through the tests' seam for a host's wall clock (not
// WithClock, which would opt the store out of the server's clock), and
// check that only the server's clock, read from hello's localTime, judges
// expiry (R8).

// skewTTL is the TTL of the stores of these tests: short, so that
// renewals and expiries come within seconds, and long enough that a
// loaded machine renews in time.
const skewTTL = 3 * time.Second

var ctxBG = context.Background()

// skewedStore makes a store on d, owned by owner, whose host's wall clock
// reads offset from the real one.
func skewedStore(t *testing.T, d lease.Driver, owner string, offset time.Duration, opts ...lease.Option) *lease.DocumentStore {
	t.Helper()
	opts = append([]lease.Option{lease.WithOwner(owner), lease.WithTTL(skewTTL),
		hostclock.Option(hostclock.Skewed(offset)).(lease.Option)}, opts...)
	s, err := lease.NewDocumentStore(d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

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

// checkStampedByServer checks that g, acquired between the server's
// readings before and after, expires TTL after a time between them (give
// or take the readings' millisecond): it was stamped by the server's
// clock, not its host's.
func checkStampedByServer(t *testing.T, g lease.Grant, before, after time.Time) {
	t.Helper()
	// The store stamps by a lower bound of the server's clock: its last
	// hello's localTime (whole milliseconds) plus the time since that hello
	// was answered, less than the server's clock by up to the hello's
	// round trip, which a loaded machine stretches. A host clock ten
	// minutes off is far outside either side.
	const slack = 250 * time.Millisecond
	earliest, latest := before.Add(skewTTL-slack), after.Add(skewTTL+time.Millisecond)
	if g.ExpiresAt.Before(earliest) || g.ExpiresAt.After(latest) {
		t.Fatalf("R8: grant of %s expires at %v; want TTL after the server's clock during the acquire, between %v and %v",
			g.Key, g.ExpiresAt, earliest, latest)
	}
}

// renewals counts a store's renewals on a channel.
type renewals chan struct{}

func (r renewals) Observe(e lease.Event) {
	if e.Kind == lease.EventRenewed {
		select {
		case r <- struct{}{}:
		default:
		}
	}
}

func TestServerClockHostAheadNeverTakesEarly_R8(t *testing.T) {
	d := newTestMongoDriver(t, nil)
	renewed := make(renewals, 16)
	holder := skewedStore(t, d, "holder", 0, lease.WithObserver(renewed))
	taker := skewedStore(t, d, "taker-ahead", 10*time.Minute)

	h, err := lease.Hold(ctxBG, holder, "skew/k")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctxBG)
	if g, err := taker.Acquire(ctxBG, "skew/k"); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("R8: a store whose host clock is 10 minutes ahead acquired a key the server's clock says is held: %+v, %v", g, err)
	}

	before := serverNow(t)
	g, err := taker.Acquire(ctxBG, "skew/fresh")
	if err != nil {
		t.Fatal(err)
	}
	checkStampedByServer(t, g, before, serverNow(t))

	// The taker waits for the key while the holder renews it three times:
	// it never gets it, and the holder's Held never ends.
	waitCtx, stop := context.WithCancel(ctxBG)
	waited := make(chan error, 1)
	go func() {
		th, err := lease.Hold(waitCtx, taker, "skew/k")
		if err == nil {
			th.Release(ctxBG)
			err = errors.New("got the key")
		}
		waited <- err
	}()
	for range 3 {
		select {
		case <-renewed:
		case <-h.Context().Done():
			t.Fatalf("R8: the holder's Held ended while a store 10 minutes ahead waited: %v", context.Cause(h.Context()))
		}
	}
	stop()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("R8: a store 10 minutes ahead, waiting for a key renewed by its holder: %v; want it still waiting", err)
	}
	if err := h.Context().Err(); err != nil {
		t.Fatalf("R8: the holder's Held ended: %v", context.Cause(h.Context()))
	}
}

func TestServerClockHostBehind_R8(t *testing.T) {
	coll := mongoserver.Collection(t, mongoserver.SharedClient(t))
	d := newTestMongoDriverOn(t, coll)
	proxy := mongoproxy.New(t, serialisedAddr(t))
	holderClient := mongoserver.Client(t, proxy)
	holderDriver := newTestMongoDriverOn(t, holderClient.Database(coll.Database().Name()).Collection(coll.Name()))
	holder := skewedStore(t, holderDriver, "holder-behind", -10*time.Minute)
	taker := skewedStore(t, d, "taker-behind", -10*time.Minute)

	before := serverNow(t)
	h, err := lease.Hold(ctxBG, holder, "skew/k")
	if err != nil {
		t.Fatal(err)
	}
	checkStampedByServer(t, h.Grant(), before, serverNow(t))

	// The holder's renewals stop (its proxy closes and accepts no more):
	// its Held must end before the server's clock passes the record's
	// expiry.
	proxy.Close()
	select {
	case <-h.Context().Done():
	case <-time.After(time.Minute):
		t.Fatal("the holder's Held did not end after its renewals stopped")
	}
	// The server's clock at the Held's deadline (monotonic, R8) is at most
	// its reading now less the time since the deadline: the reading came
	// after.
	deadline, sent := h.Deadline(), time.Now()
	atDeadline := serverNow(t).Add(-sent.Sub(deadline))
	rec, _, err := d.Get(ctxBG, "skew/k") // final: the closed proxy lets no more of the holder's writes through
	if err != nil {
		t.Fatal(err)
	}
	if !atDeadline.Before(rec.ExpiresAt) {
		t.Fatalf("R8: a holder 10 minutes behind had its Held end at server time %v or earlier, not before its record's expiry %v", atDeadline, rec.ExpiresAt)
	}

	// A taker 10 minutes behind takes the key once the server's clock
	// says it expired, not 10 minutes later.
	ctx, cancel := context.WithTimeout(ctxBG, 30*time.Second)
	defer cancel()
	th, err := lease.Hold(ctx, taker, "skew/k")
	if err != nil {
		t.Fatalf("R8: a store 10 minutes behind did not take a key whose record expired at server time %v: %v", rec.ExpiresAt, err)
	}
	defer th.Release(ctxBG)
	g := th.Grant()
	if g.Epoch != rec.Epoch+1 || !g.PreviousUnclean {
		t.Fatalf("takeover: %+v; want epoch %d, PreviousUnclean", g, rec.Epoch+1)
	}
	if taken := g.ExpiresAt.Add(-skewTTL); taken.Before(rec.ExpiresAt) {
		t.Fatalf("R8: the taker stamped its grant at %v, before the record it took expired (%v)", taken, rec.ExpiresAt)
	}
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
