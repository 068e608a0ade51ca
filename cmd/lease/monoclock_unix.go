//go:build unix && !aix

package main

import "golang.org/x/sys/unix"

// hasMonoClock: lease run and its guard read one system-wide monotonic
// clock, so the guard can keep the lease's deadline on its own.
const hasMonoClock = true

// monoNow reads CLOCK_MONOTONIC in nanoseconds. Unlike time.Now's
// monotonic reading, which counts from this process's start, it means the
// same instant in every process of the host, and no change of the wall
// clock moves it. It returns 0 (no deadline) if the clock cannot be read,
// which every system this file builds for can.
func monoNow() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Nano()
}
