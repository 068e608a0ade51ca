package testkit

import (
	"context"
	"testing"
	"time"
)

// deadlineMargin is the part of the time left to a test binary's deadline
// kept back, so that a test that runs out of patience fails with its own
// message before `go test` panics with every goroutine's stack.
const deadlineMargin = 0.1

// Patient returns a context for waits that depend on how loaded the
// machine is: it ends a little before the test binary's deadline (-timeout),
// or with t, never at a fixed time. A wait for many Holds, a count or an
// event uses it instead of a fixed minute.
func Patient(t testing.TB) context.Context {
	ctx := t.Context()
	deadline, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return ctx
	}
	d, has := deadline.Deadline()
	if !has {
		return ctx
	}
	left := time.Until(d)
	ctx, cancel := context.WithTimeout(ctx, left-time.Duration(float64(left)*deadlineMargin))
	t.Cleanup(cancel)
	return ctx
}

// WaitFor polls cond until it holds, failing the test with what when the
// patience of Patient runs out. It waits for a count or an event, not for
// time to pass.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ctx := Patient(t)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s: %v", what, context.Cause(ctx))
		case <-tick.C:
		}
	}
}
