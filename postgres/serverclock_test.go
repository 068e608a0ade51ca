package postgres

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/hostclock"
	"github.com/leasekit/lease/internal/pgproxy"
	"github.com/leasekit/lease/internal/pgserver"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// The tests of this file give stores a host clock 10 minutes off the
// server's, through the tests' seam for a host's wall clock (not
// WithClock, which would opt the store out of the server's clock), and
// check that only the server's clock judges expiry (R8).

// skewTTL is the TTL of the stores of these tests: short, so that
// renewals and expiries come within seconds, and long enough that a
// loaded machine renews in time.
const skewTTL = 3 * time.Second

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

// serverNow reads the server's clock.
func serverNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	if err := pgserver.SharedDB(t).QueryRowContext(ctxBG, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// checkStampedByServer checks that g, acquired between the server's
// readings before and after, expires TTL after a time between them: it
// was stamped by the server's clock, not its host's.
func checkStampedByServer(t *testing.T, g lease.Grant, before, after time.Time) {
	t.Helper()
	earliest, latest := before.Add(skewTTL-time.Microsecond), after.Add(skewTTL)
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
	d := newTestPostgresDriver(t)
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
	table := pgserver.FreshTable(t)
	proxy := pgproxy.New(t, sharedAddr(t))
	holderDriver := driverVia(t, proxy, table)
	d, err := NewDriver(ctxBG, pgserver.SharedDB(t), Table(table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	holder := skewedStore(t, holderDriver, "holder-behind", -10*time.Minute)
	taker := skewedStore(t, d, "taker-behind", -10*time.Minute)

	before := serverNow(t)
	h, err := lease.Hold(ctxBG, holder, "skew/k")
	if err != nil {
		t.Fatal(err)
	}
	checkStampedByServer(t, h.Grant(), before, serverNow(t))

	// The holder's renewals stop: its Held must end before the server's
	// clock passes the record's expiry.
	proxy.Partition()
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
	rec, _, err := d.Get(ctxBG, "skew/k") // final: the proxy lets no more of the holder's writes through
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

// sharedAddr is the shared server's "host:port".
func sharedAddr(t *testing.T) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// driverVia makes a driver on table of the shared server whose every
// connection goes through proxy.
func driverVia(t *testing.T, proxy *pgproxy.Proxy, table string) lease.Driver {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host, cfg.Port = "127.0.0.1", uint16(proxy.Port())
	cfg.Fallbacks = nil
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	d, err := NewDriver(ctxBG, db, Table(table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
