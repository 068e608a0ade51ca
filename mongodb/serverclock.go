package mongodb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasekit/lease"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// This file gives the store its server's clock (R8). FerretDB v1 answers
// "$$NOW" with the literal string and its replies carry no operationTime,
// so the only reading of the server's clock that every supported server
// gives is hello's localTime (a BSON date: milliseconds, truncated). The
// driver keeps one sample per driver, refreshed by one hello when it is
// older than clockSampleAge, and extrapolates it by the host's monotonic
// clock in between, which drifts from the server's by parts per million.

// clockSampleAge is how old a sample may get before a call refreshes it:
// over a second the extrapolation drifts by microseconds, and a hello per
// second per driver, whatever the number of keys and stores, costs nothing
// measurable.
const clockSampleAge = time.Second

// clockSample is one hello's reading of the server's clock: localTime, and
// the host's times (with their monotonic readings) at which the hello was
// sent and answered; the server read localTime between them.
type clockSample struct {
	local    time.Time
	sent     time.Time
	answered time.Time
}

// serverClock is a driver's sample of its server's clock. At most one
// hello is in flight: a call that finds the sample old while another call
// refreshes it goes on with the old one, and waits only if there is none.
type serverClock struct {
	db *mongo.Database

	mu       sync.Mutex
	sample   clockSample   // zero: none yet
	inFlight chan struct{} // closed when the running hello ends; nil: none
	lastErr  error         // the last hello's failure, for a call with no sample
}

// sampleFor returns a sample no older than clockSampleAge, refreshing it
// with one hello if needed, or a sample being refreshed by another call.
// It fails only when there is no sample at all and the hello fails.
func (c *serverClock) sampleFor(ctx context.Context) (clockSample, error) {
	for {
		c.mu.Lock()
		s, wait := c.sample, c.inFlight
		fresh := !s.answered.IsZero() && time.Since(s.answered) < clockSampleAge
		switch {
		case fresh || (wait != nil && !s.answered.IsZero()):
			c.mu.Unlock()
			return s, nil
		case wait == nil:
			done := make(chan struct{})
			c.inFlight = done
			c.mu.Unlock()
			return c.refresh(ctx, done)
		}
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return clockSample{}, ctx.Err()
		}
		c.mu.Lock()
		s, err := c.sample, c.lastErr
		c.mu.Unlock()
		if s.answered.IsZero() && err != nil {
			return clockSample{}, err
		}
	}
}

// refresh sends one hello and keeps its sample; done ends the flight.
// A failed hello leaves an older sample in use.
func (c *serverClock) refresh(ctx context.Context, done chan struct{}) (clockSample, error) {
	s, err := c.hello(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(done)
	c.inFlight = nil
	c.lastErr = err
	if err == nil {
		c.sample = s
	}
	if c.sample.answered.IsZero() {
		return clockSample{}, err
	}
	return c.sample, nil
}

// hello asks the primary for its localTime.
func (c *serverClock) hello(ctx context.Context) (clockSample, error) {
	var reply struct {
		LocalTime time.Time `bson:"localTime"`
	}
	sent := time.Now()
	err := c.db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}},
		options.RunCmd().SetReadPreference(readpref.Primary())).Decode(&reply)
	answered := time.Now()
	if err != nil {
		return clockSample{}, fmt.Errorf("lease: mongodb hello for the server's clock: %w", err)
	}
	if reply.LocalTime.IsZero() {
		return clockSample{}, errors.New("lease: mongodb hello for the server's clock: the reply has no localTime")
	}
	return clockSample{local: reply.LocalTime, sent: sent, answered: answered}, nil
}

// lowerBound is the earliest time the server's clock can show now: it read
// local no later than the hello was answered, and has run since at the
// host's monotonic rate (time.Since uses the monotonic reading).
func (s clockSample) lowerBound() time.Time { return s.local.Add(time.Since(s.answered)) }

// withServerClock runs call, a driver call on ctx, after making sure of a
// sample, and reports the sample's lower bound to the store as the
// server's time when call's answer came (lease.ReportServerTime).
//
// The store takes a reported time as read by the server during the call.
// From it, it takes keys and stamps expiries by a lower bound of the
// server's clock (the report plus the time since it came) and refuses a
// renewal (R6) by an upper bound (the report plus the time since the call
// was sent). A lower bound keeps the first one true, which is what "never
// take a key early" rests on: whatever the hello's round trip or the
// sample's age, the store never believes the server's clock later than it
// is. The upper bound is then true when the call itself took longer than
// the hello's round trip plus a millisecond (localTime's truncation),
// which holds for a call that sent the hello; for a call that used an
// older sample it may be low by that much, sub-millisecond on a LAN: R6's
// check and the keeper's reckoning of time left are lax by it, well within
// the safety margin that stops a holder seconds before expiry. No single
// reported value can make both bounds true when the call was shorter than
// the hello, and a report nearer the upper end (the hello's send time)
// could make the store take a key up to a round trip early; the lower
// bound is the one that must not be wrong.
//
// It reports also when call fails: the sample does not come from call,
// and is as true a lower bound either way.
func (d *mongoDriver) withServerClock(ctx context.Context, call func() error) error {
	s, err := d.clock.sampleFor(ctx)
	if err != nil {
		return err
	}
	err = call()
	lease.ReportServerTime(ctx, s.lowerBound())
	return err
}
