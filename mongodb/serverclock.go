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

// clockSampleMaxAge is how old a sample may get, while hellos fail, before
// a call fails rather than extrapolate it further: a minute drifts by
// milliseconds at the rates clocks keep.
const clockSampleMaxAge = time.Minute

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
}

// sampleFor returns a sample no older than clockSampleAge, refreshing it
// with one hello if needed, or a sample being refreshed by another call.
// It fails only when there is no sample younger than clockSampleMaxAge
// and its own hello fails: a
// call waiting on another's hello that failed (perhaps for that call's
// ctx) tries one of its own.
func (c *serverClock) sampleFor(ctx context.Context) (clockSample, error) {
	for {
		c.mu.Lock()
		s, wait := c.sample, c.inFlight
		switch {
		case s.youngerThan(clockSampleAge) || (wait != nil && s.youngerThan(clockSampleMaxAge)):
			c.mu.Unlock()
			return s, nil
		case wait == nil:
			done := make(chan struct{})
			c.inFlight = done
			c.mu.Unlock()
			return c.refresh(ctx, done)
		}
		c.mu.Unlock()
		select { // then take its sample, or send a hello of our own if it failed
		case <-wait:
		case <-ctx.Done():
			return clockSample{}, ctx.Err()
		}
	}
}

// refresh sends one hello and keeps its sample; done ends the flight.
// A failed hello leaves an older sample in use, up to clockSampleMaxAge.
func (c *serverClock) refresh(ctx context.Context, done chan struct{}) (clockSample, error) {
	s, err := c.hello(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(done)
	c.inFlight = nil
	if err == nil {
		c.sample = s
	}
	if !c.sample.youngerThan(clockSampleMaxAge) {
		return clockSample{}, err
	}
	return c.sample, nil
}

// youngerThan reports whether s is a sample answered less than age ago.
func (s clockSample) youngerThan(age time.Duration) bool {
	return !s.answered.IsZero() && time.Since(s.answered) < age
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
