//go:build !unix || aix

package main

// hasMonoClock: this system offers no monotonic clock shared between
// processes through golang.org/x/sys; the guard keeps no deadline of its
// own and relies on lease run's orders alone.
const hasMonoClock = false

func monoNow() int64 { return 0 }
