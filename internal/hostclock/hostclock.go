// Package hostclock is the tests' seam for a store's host wall clock: it
// gives a store the clock a host whose clock is off would have, without
// lease.WithClock, which opts the store out of its server's clock (R8).
// Package lease registers the option at init; being internal, it is not
// part of the module's API.
package hostclock

import "time"

var option func(now func() time.Time) any

// Register is called once by package lease with the function that makes
// the option.
func Register(f func(now func() time.Time) any) { option = f }

// Option returns a lease.Option (assert it: hostclock.Option(f).(lease.Option))
// that makes a store read its host's wall clock through now instead of
// time.Now. A store judging by its server's clock ignores it; any other
// store judges by it, as by WithClock.
func Option(now func() time.Time) any { return option(now) }

// Skewed returns a clock that reads time.Now plus offset.
func Skewed(offset time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(offset) }
}
