// Package testclock is the one fake clock of this module's tests and of
// the conformance suite (leasetest.Clock is this type): time moves only
// when a test moves it (R8).
package testclock

import (
	"sync"
	"time"
)

// Clock is a fake clock for the stores under test. It starts on a whole
// second, and the tests move it in whole milliseconds, so that drivers
// keeping milliseconds keep every expiry exactly. Its methods are safe for
// concurrent use.
type Clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

// Start is the instant every new Clock reads.
var Start = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// New returns a clock stopped at Start.
func New() *Clock {
	return &Clock{now: Start}
}

// Now is the clock's reading; pass it to lease.WithClock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t, forwards or backwards (clock skew).
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
