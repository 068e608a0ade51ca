package testkit

import (
	"context"
	"fmt"
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
// Beside it runs a second floor, the same Acquire and Release under a
// context with a deadline, as most callers' are and as a Hold's own look
// is (it is bounded, and ends when the store closes): database/sql and
// the SQL drivers watch such a context during each call, at a cost of
// their own.
//
// Each iteration runs one cycle of each, in turn forwards and backwards,
// so that half the Holds come right after the previous Hold (a worker
// holding one key after another) and the store's drift (a disk's fsync
// times, a server's load) hits all three alike. It reports, for the Hold
// cycle (no prefix), the floor ("floor-") and the floor under a deadline
// ("ctx-floor-"):
//
//	ns/op, roundtrips/op  the mean time and storage round trips of a cycle
//	p50-ns/op             the median cycle, which a few stalls of a shared disk do not move
//	ratio, p50-ratio      the Hold cycle's time over the floor's, by mean and by median
//	ctx-ratio, ctx-p50-ratio  the same over the floor under a deadline
//
// One untimed cycle of each comes first: a session's start, a statement's
// preparation, files laid out, once per store.
func HoldUncontended(b *testing.B, s lease.Store, trips func() int64) {
	b.Helper()
	hold := func(ctx context.Context) error {
		h, err := lease.Hold(ctx, s, "hold")
		if err != nil {
			return err
		}
		return h.Release(ctx)
	}
	floor := func(ctx context.Context) error {
		g, err := s.Acquire(ctx, "floor")
		if err != nil {
			return err
		}
		return s.Release(ctx, g)
	}
	ops := []*cycles{
		{name: "", run: hold},
		{name: "floor-", run: floor},
		{name: "ctx-floor-", run: floor, deadline: true},
	}
	for _, op := range ops {
		if err := op.run(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	i := 0
	for b.Loop() {
		for k := range ops {
			if i%2 == 1 {
				k = len(ops) - 1 - k
			}
			ops[k].time(b, trips)
		}
		i++
	}
	n := float64(b.N)
	for _, op := range ops {
		b.ReportMetric(float64(op.sum().Nanoseconds())/n, op.name+"ns/op")
		b.ReportMetric(float64(op.median().Nanoseconds()), op.name+"p50-ns/op")
		b.ReportMetric(float64(op.trips)/n, op.name+"roundtrips/op")
	}
	hold1, floor1, ctx1 := ops[0], ops[1], ops[2]
	b.ReportMetric(float64(hold1.sum())/float64(floor1.sum()), "ratio")
	b.ReportMetric(float64(hold1.median())/float64(floor1.median()), "p50-ratio")
	b.ReportMetric(float64(hold1.sum())/float64(ctx1.sum()), "ctx-ratio")
	b.ReportMetric(float64(hold1.median())/float64(ctx1.median()), "ctx-p50-ratio")
}

// cycles is one kind of cycle of HoldUncontended, and its measures.
type cycles struct {
	name     string
	run      func(ctx context.Context) error
	deadline bool // run under a context with a deadline
	times    []time.Duration
	trips    int64
}

// time runs one cycle and counts its time and round trips.
func (c *cycles) time(b *testing.B, trips func() int64) {
	ctx := context.Background()
	if c.deadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	before := trips()
	start := time.Now()
	err := c.run(ctx)
	c.times = append(c.times, time.Since(start))
	c.trips += trips() - before
	if err != nil {
		b.Fatal(fmt.Errorf("%scycle: %w", c.name, err))
	}
}

func (c *cycles) sum() time.Duration {
	var t time.Duration
	for _, d := range c.times {
		t += d
	}
	return t
}

// median sorts the cycle times and returns the middle one.
func (c *cycles) median() time.Duration {
	slices.Sort(c.times)
	return c.times[len(c.times)/2]
}

// Trips returns a count of c's round trips so far, for HoldUncontended.
func (c *TripCounter) Trips() int64 {
	return int64(c.Peek().Trips)
}
