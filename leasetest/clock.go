package leasetest

import (
	"sync"
	"time"
)

// Clock is a fake clock for the stores under test (R8): time moves only
// when the suite moves it. It starts on a whole second, and the suite moves
// it in whole milliseconds, so that drivers keeping milliseconds keep every
// expiry exactly.
type Clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

// NewClock returns a clock stopped at a fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
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
