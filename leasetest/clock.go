package leasetest

import "github.com/leasekit/lease/internal/testclock"

// Clock is a fake clock for the stores under test (R8): time moves only
// when the suite moves it. It starts on a whole second, and the suite moves
// it in whole milliseconds, so that drivers keeping milliseconds keep every
// expiry exactly. Now is its reading (pass it to lease.WithClock); Advance
// moves it forward, Set moves it anywhere (clock skew). The module's own
// tests use the same type.
type Clock = testclock.Clock

// NewClock returns a clock stopped at a fixed instant.
func NewClock() *Clock { return testclock.New() }
