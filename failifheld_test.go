package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestR16FailIfHeldBehindAWaiter: R16. Another store holds k and a Hold
// of store s waits for it; a FailIfHeld Hold of k on s then fails at once
// with a *HeldError naming the real holder: it does not queue behind the
// waiter until the waiter's next look. In the bubble "at once" means that
// no virtual time passes.
func TestR16FailIfHeldBehindAWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		alice, bob := e.store("alice", time.Hour), e.store("bob", holdTTL)
		ag := mustAcquire(t, alice, "k")

		ctx, cancel := context.WithCancel(t.Context())
		waited := make(chan error, 1)
		go func() {
			_, err := Hold(ctx, bob, "k")
			waited <- err
		}()
		synctest.Wait() // bob's first Hold looked, found k held and waits for its next look

		for i := range 3 { // every one, whatever the waiter's backoff has grown to
			start := time.Now()
			_, err := Hold(t.Context(), bob, "k", FailIfHeld())
			if took := time.Since(start); took != 0 {
				t.Errorf("FailIfHeld Hold %d answered after %v of virtual time; want at once", i, took)
			}
			wantHeldErrorOf(t, err, ag)
		}

		cancel()
		if err := <-waited; !errors.Is(err, context.Canceled) || !errors.Is(err, ErrHeld) {
			t.Errorf("the waiting Hold = %v; want it to give up, the key held", err)
		}
	})
}

// wantHeldErrorOf checks that err is a *HeldError, matching ErrHeld, that
// names the holder of g.
func wantHeldErrorOf(t *testing.T, err error, g Grant) {
	t.Helper()
	var he *HeldError
	if !errors.As(err, &he) || !errors.Is(err, ErrHeld) {
		t.Fatalf("err = %v; want a *HeldError", err)
	}
	if he.Key != g.Key || he.Owner != g.Owner || he.Epoch != g.Epoch {
		t.Errorf("HeldError names %q held by %q epoch %d; want %q held by %q epoch %d",
			he.Key, he.Owner, he.Epoch, g.Key, g.Owner, g.Epoch)
	}
}
