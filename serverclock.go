package lease

import (
	"context"
	"sync"
	"time"

	"github.com/leasekit/lease/internal/hostclock"
)

// This file holds a DocumentStore's estimate of its database server's
// clock (R8), for a driver that states Capabilities.ServerClock.
//
// The driver reports, with the answer to every call, a reading of the
// server's clock taken while it served the call (ReportServerTime). The
// store notes the monotonic times at which it sent the call and got the
// reading: the server read srv somewhere between them, so at a later
// monotonic time t the server's clock shows between
// srv + (t - received) and srv + (t - sent). The store keeps the newest
// reading: after a failover the new primary's clock judges from its first
// answer on. It takes a key, stamps expiries and lists holders by the
// lower bound, so that it never takes a key before the server's clock has
// passed its expiry, and refuses a renewal (R6) by the upper bound, when
// the grant may have expired. The bounds assume the server's clock runs at
// the rate of the host's monotonic clock.

// ReportServerTime tells the store whose call ctx carries that the
// database server's clock read now while serving that call. A driver that
// states Capabilities.ServerClock calls it once per call, as soon as its
// answer arrives, with a time its server read during the call (in the
// manner of net/http/httptrace, the store's probe travels in ctx). It
// does nothing when ctx carries no store's call, so a driver may always
// call it.
func ReportServerTime(ctx context.Context, now time.Time) {
	if p, ok := ctx.Value(clockProbeKey{}).(*clockProbe); ok {
		p.clock.record(now, p.sent)
	}
}

// clockProbeKey is the context key of a call's clockProbe.
type clockProbeKey struct{}

// clockProbe is one driver call, as far as the server clock cares: the
// estimate it feeds and the monotonic time it was sent.
type clockProbe struct {
	clock *serverClock
	sent  time.Duration
}

// serverClock is a store's estimate of its server's clock.
type serverClock struct {
	base time.Time // the monotonic origin of sent and received

	mu       sync.Mutex // guards the reading
	srv      time.Time  // the newest reading; zero: none yet
	sent     time.Duration
	received time.Duration
}

func newServerClock() *serverClock { return &serverClock{base: time.Now()} }

// mono is the monotonic time since the estimate began.
func (c *serverClock) mono() time.Duration { return time.Since(c.base) }

// probe returns ctx carrying a probe for one driver call sent now; a nil
// clock (a store not judging by its server) leaves ctx as it is.
func (c *serverClock) probe(ctx context.Context) context.Context {
	if c == nil {
		return ctx
	}
	return context.WithValue(ctx, clockProbeKey{}, &clockProbe{clock: c, sent: c.mono()})
}

// record keeps the reading srv of a call sent at sent, unless a reading
// of a later call is kept already.
func (c *serverClock) record(srv time.Time, sent time.Duration) {
	received := c.mono()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.srv.IsZero() && sent < c.sent {
		return
	}
	c.srv, c.sent, c.received = srv, sent, received
}

// bounds returns the earliest and the latest time the server's clock may
// show now; ok is false before the first reading.
func (c *serverClock) bounds() (lower, upper time.Time, ok bool) {
	now := c.mono()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv.IsZero() {
		return time.Time{}, time.Time{}, false
	}
	return c.srv.Add(now - c.received), c.srv.Add(now - c.sent), true
}

func init() {
	hostclock.Register(func(now func() time.Time) any {
		return Option(func(c *config) { c.hostNow = now })
	})
}

// now is the store's clock (R8) for taking keys, stamping expiries and
// judging holders: the lower bound of the server's clock for a store that
// judges by it, else cfg.now (WithClock's, or the host's). Before the
// first reading, which every acquire and every listing gets from its read
// and a renewal from the acquire or read before it, and for a driver that
// states ServerClock but reports no reading, it falls back to the host's.
func (s *DocumentStore) now() time.Time {
	if s.clock == nil || mutant == mutantHostClock {
		return s.cfg.now()
	}
	if lower, _, ok := s.clock.bounds(); ok {
		return lower
	}
	return s.cfg.now()
}

// renewNow is the store's clock for R6's check that a grant has not
// expired: the upper bound of the server's clock, so that a renewal the
// server might already see as late is refused; else as now.
func (s *DocumentStore) renewNow() time.Time {
	if s.clock == nil || mutant == mutantHostClock {
		return s.cfg.now()
	}
	if _, upper, ok := s.clock.bounds(); ok {
		return upper
	}
	return s.cfg.now()
}

// serverNow is the upper bound of the server's clock, for the keeper
// (serverClocked): measured against it, the time left on a grant is never
// more than the server will allow it.
func (s *DocumentStore) serverNow() (time.Time, bool) {
	if s.clock == nil || mutant == mutantHostClock {
		return time.Time{}, false
	}
	_, upper, ok := s.clock.bounds()
	return upper, ok
}
