package leasetest

import (
	"errors"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/hostclock"
)

// testServerClock checks a driver that states ServerClock (R8): stores
// whose hosts' clocks are a year off the server's, and not given
// WithClock, stamp and judge by the server's clock, which the driver
// reports with its answers, also with a Get that finds no record. It
// takes the server's clock to be within a minute of this host's.
func testServerClock(t *testing.T, open DriverOpener) {
	d := open(t)
	if !lease.DriverCapabilities(d).ServerClock {
		t.Skip("the driver does not state ServerClock")
	}
	const year, slack = 365 * 24 * time.Hour, time.Minute
	stores := make([]*lease.DocumentStore, 2)
	for i, offset := range []time.Duration{-year, year} {
		s, err := lease.NewDocumentStore(d, lease.WithOwner([]string{"behind", "ahead"}[i]), lease.WithTTL(TTL),
			hostclock.Option(hostclock.Skewed(offset)).(lease.Option))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	behind, ahead := stores[0], stores[1]
	k := newNamespace() + "k"
	before := time.Now()
	g := mustAcquire(t, behind, k)
	if g.ExpiresAt.Before(before.Add(TTL-slack)) || g.ExpiresAt.After(time.Now().Add(TTL+slack)) {
		t.Fatalf("R8: a store whose host's clock is a year behind stamped expiry %v; want the server's clock plus %v "+
			"(does the driver call lease.ReportServerTime with every answer, also a Get's that finds no record?)", g.ExpiresAt, TTL)
	}
	if _, err := ahead.Acquire(ctxBG, k); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("R8: a store whose host's clock is a year ahead took a key the server's clock says is held: %v", err)
	}
	if rec, err := ahead.Holder(ctxBG, k); err != nil || rec.Owner != "behind" {
		t.Fatalf("R8: Holder by a store a year ahead = %+v, %v; want the live holder", rec, err)
	}
	r, err := behind.Renew(ctxBG, g)
	if err != nil || r.ExpiresAt.After(time.Now().Add(TTL+slack)) {
		t.Fatalf("R8: Renew by a store a year behind = %+v, %v; want expiry by the server's clock", r, err)
	}
	wantErr(t, "Release", behind.Release(ctxBG, r), nil)
}
