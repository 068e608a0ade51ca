package testkit

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/leasekit/lease"
)

// HoldUncontended measures an uncontended Hold and its Release on s, in
// a loop, beside its floor in the same run: a bare Acquire and Release of
// a key of its own on the same store. A single caller must not pay for
// the batching meant for crowds, so the floor is what a Hold cannot beat.
// trips counts the storage round trips s has made so far.
//
// Each iteration runs one cycle of each, the order alternating, so that
// half the Holds come right after the previous Hold (a worker holding one
// key after another) and half after a floor cycle, and the store's drift
// (a disk's fsync times, a server's load) hits both alike. It reports:
//
//	ns/op                Hold + Release
//	floor-ns/op          Acquire + Release
//	ratio                ns/op over floor-ns/op
//	roundtrips/op        the Hold cycle's storage round trips
//	floor-roundtrips/op  the floor's
//	p50-ns/op, floor-p50-ns/op, p50-ratio  the same by the median cycle,
//	                     which a few stalls of a shared disk do not move
//
// One untimed cycle of each comes first: a session's start, a statement's
// preparation, files laid out, once per store.
func HoldUncontended(b *testing.B, s lease.Store, trips func() int64) {
	b.Helper()
	ctx := context.Background()
	hold := func() error {
		h, err := lease.Hold(ctx, s, "hold")
		if err != nil {
			return err
		}
		return h.Release(ctx)
	}
	floor := func() error {
		g, err := s.Acquire(ctx, "floor")
		if err != nil {
			return err
		}
		return s.Release(ctx, g)
	}
	for _, op := range []func() error{hold, floor} {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	var holdTimes, floorTimes []time.Duration
	var holdTrips, floorTrips int64
	timed := func(op func() error, ds *[]time.Duration, n *int64) {
		before := trips()
		start := time.Now()
		err := op()
		*ds = append(*ds, time.Since(start))
		*n += trips() - before
		if err != nil {
			b.Fatal(err)
		}
	}
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			timed(hold, &holdTimes, &holdTrips)
			timed(floor, &floorTimes, &floorTrips)
		} else {
			timed(floor, &floorTimes, &floorTrips)
			timed(hold, &holdTimes, &holdTrips)
		}
		i++
	}
	n := float64(b.N)
	holdTime, floorTime := sum(holdTimes), sum(floorTimes)
	b.ReportMetric(float64(holdTime.Nanoseconds())/n, "ns/op")
	b.ReportMetric(float64(floorTime.Nanoseconds())/n, "floor-ns/op")
	b.ReportMetric(float64(holdTime)/float64(floorTime), "ratio")
	b.ReportMetric(float64(holdTrips)/n, "roundtrips/op")
	b.ReportMetric(float64(floorTrips)/n, "floor-roundtrips/op")
	holdMid, floorMid := median(holdTimes), median(floorTimes)
	b.ReportMetric(float64(holdMid.Nanoseconds()), "p50-ns/op")
	b.ReportMetric(float64(floorMid.Nanoseconds()), "floor-p50-ns/op")
	b.ReportMetric(float64(holdMid)/float64(floorMid), "p50-ratio")
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

// median sorts ds and returns its middle one.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// Trips returns a count of c's round trips so far, for HoldUncontended.
func (c *TripCounter) Trips() int64 {
	return int64(c.Peek().Trips)
}
