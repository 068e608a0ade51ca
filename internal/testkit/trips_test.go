package testkit

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasekit/lease"
)

// TestTripCounterPauseHoldsCalls checks what a benchmark relies on to
// time a floor alone: a call that starts while the counter is paused
// reaches no driver and counts nothing until Resume, then counts as held.
func TestTripCounterPauseHoldsCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &TripCounter{Driver: lease.NewMemoryDriver()}
		rec := lease.Record{Key: "k", Owner: "o", Epoch: 1, ExpiresAt: time.Now().Add(time.Minute)}
		c.Pause()
		done := make(chan error, 1)
		go func() {
			_, err := c.Put(context.Background(), rec, lease.Precondition{Absent: true})
			done <- err
		}()
		synctest.Wait()
		if got := c.Peek(); got.Trips != 0 || got.Writes != 0 || !c.Idle() {
			t.Fatalf("while paused: %+v, idle %v; want no call counted or in flight", got, c.Idle())
		}
		if _, _, err := c.Driver.Get(context.Background(), "k"); err == nil {
			t.Fatal("the paused Put reached the driver")
		}
		c.Resume()
		if err := <-done; err != nil {
			t.Fatalf("Put after Resume: %v", err)
		}
		if got := c.Take(); got.Trips != 1 || got.Writes != 1 || got.Held != 1 {
			t.Fatalf("after Resume: %+v; want 1 round trip, 1 write, 1 held", got)
		}
		if _, err := c.Put(context.Background(), rec, lease.Precondition{Absent: true}); err == nil {
			t.Fatal("a second insert of the same key succeeded")
		}
		if got := c.Take(); got.Held != 0 {
			t.Fatalf("a call started while not paused counted as held: %+v", got)
		}
	})
}
