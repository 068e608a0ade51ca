package leasetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/hostclock"
)

// SkewRig is what TestServerClockSkew needs of a driver that states
// ServerClock, over a server the test reaches.
type SkewRig struct {
	// Pair returns two drivers on one fresh table (or collection) of the
	// server, and cut, which stops every later call of holder from
	// reaching the server (a partition) while other still reaches it.
	Pair func(t *testing.T) (holder, other lease.Driver, cut func())
	// ServerNow reads the server's clock.
	ServerNow func(t *testing.T) time.Time
	// StampLag is how far a store's stamp may lag the server's clock
	// read just before the acquire: the driver's reading may come from an
	// earlier call (a sampled clock), and the store's estimate is its lower
	// bound.
	StampLag time.Duration
}

// skewTTL is the TTL of TestServerClockSkew's stores: short, so that
// renewals and expiries come within seconds, and long enough that a
// loaded machine renews in time.
const skewTTL = 3 * time.Second

// TestServerClockSkew checks R8 with stores whose hosts' clocks are ten
// minutes off the server's, through the tests' seam for a host's wall
// clock (not WithClock, which would opt a store out of the server's
// clock): a store ahead never takes a key its holder keeps renewing, and
// stamps by the server's clock; a holder behind, cut off from the server,
// ends its Held before the server's clock passes its record's expiry; a
// taker behind takes the key once the server's clock has passed it, not
// ten minutes later.
func TestServerClockSkew(t *testing.T, rig SkewRig) {
	t.Run("R8_host_ahead_never_takes_early", func(t *testing.T) { skewAhead(t, rig) })
	t.Run("R8_host_behind", func(t *testing.T) { skewBehind(t, rig) })
}

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

// checkStampedByServer checks that g, acquired between the server's
// readings before and after, expires TTL after a time between them (less
// the rig's lag): it was stamped by the server's clock, not its host's.
func checkStampedByServer(t *testing.T, rig SkewRig, g lease.Grant, before, after time.Time) {
	t.Helper()
	earliest, latest := before.Add(skewTTL-rig.StampLag-time.Microsecond), after.Add(skewTTL+time.Millisecond)
	if g.ExpiresAt.Before(earliest) || g.ExpiresAt.After(latest) {
		t.Fatalf("R8: grant of %s expires at %v; want TTL after the server's clock during the acquire, between %v and %v",
			g.Key, g.ExpiresAt, earliest, latest)
	}
}

// renewals counts a store's renewals on a channel: a key's, or its
// session's, which renews every key of it (R20).
type renewals chan struct{}

func (r renewals) Observe(e lease.Event) {
	if e.Kind == lease.EventRenewed || e.Kind == lease.EventSessionRenewed && e.Err == nil {
		select {
		case r <- struct{}{}:
		default:
		}
	}
}

func skewAhead(t *testing.T, rig SkewRig) {
	_, d, _ := rig.Pair(t)
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

	before := rig.ServerNow(t)
	g, err := taker.Acquire(ctxBG, "skew/fresh")
	if err != nil {
		t.Fatal(err)
	}
	checkStampedByServer(t, rig, g, before, rig.ServerNow(t))

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

func skewBehind(t *testing.T, rig SkewRig) {
	holderDriver, d, cut := rig.Pair(t)
	holder := skewedStore(t, holderDriver, "holder-behind", -10*time.Minute)
	taker := skewedStore(t, d, "taker-behind", -10*time.Minute)

	before := rig.ServerNow(t)
	h, err := lease.Hold(ctxBG, holder, "skew/k")
	if err != nil {
		t.Fatal(err)
	}
	checkStampedByServer(t, rig, h.Grant(), before, rig.ServerNow(t))

	// The holder's renewals stop: its Held must end before the server's
	// clock passes the record's expiry.
	cut()
	select {
	case <-h.Context().Done():
	case <-time.After(time.Minute):
		t.Fatal("the holder's Held did not end after its renewals stopped")
	}
	// The server's clock at the Held's deadline (monotonic, R8) is at most
	// its reading now less the time since the deadline: the reading came
	// after.
	deadline, sent := h.Deadline(), time.Now()
	atDeadline := rig.ServerNow(t).Add(-sent.Sub(deadline))
	rec, _, err := d.Get(ctxBG, "skew/k") // final: the cut lets no more of the holder's writes through
	if err != nil {
		t.Fatal(err)
	}
	rec.ExpiresAt = recordExpiry(t, d, rec)
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
	if rec.Session != "" {
		// A session's grant carries its session's expiry, renewed before
		// the take: what shows the take is the holder's session, ended
		// by the taker first (R21). Taking early is the ahead case's.
		sess, _, err := d.(lease.SessionDriver).GetSession(ctxBG, rec.Session)
		if err != nil || sess.State != lease.SessionEndedUnclean {
			t.Fatalf("R21: the holder's session after the takeover: %+v, %v; want it ended unclean", sess, err)
		}
		return
	}
	if taken := g.ExpiresAt.Add(-skewTTL); taken.Before(rec.ExpiresAt) {
		t.Fatalf("R8: the taker stamped its grant at %v, before the record it took expired (%v)", taken, rec.ExpiresAt)
	}
}

// recordExpiry is when rec's holder must be gone: its session's expiry
// for a key attached to one (R20), else its own.
func recordExpiry(t *testing.T, d lease.Driver, rec lease.Record) time.Time {
	t.Helper()
	if rec.Session == "" {
		return rec.ExpiresAt
	}
	sd, ok := d.(lease.SessionDriver)
	if !ok {
		t.Fatalf("%s names session %s, and the driver keeps no sessions", rec.Key, rec.Session)
	}
	sess, _, err := sd.GetSession(ctxBG, rec.Session)
	if err != nil {
		t.Fatal(err)
	}
	return sess.ExpiresAt
}
