//go:build unix

package lease

import (
	"context"
	"errors"
	"testing"
)

// waitStarts is an Observer that tells when a Hold begins to wait.
type waitStarts chan struct{}

func (w waitStarts) Observe(e Event) {
	if e.Kind == EventWaitStarted {
		w <- struct{}{}
	}
}

// TestR16FailIfHeldBehindAWaiterLocal: R16 on the file: store. Another
// store holds k; a Hold of store s waits for it, looking only when the
// kernel tells of a release or every watchedPoll; FailIfHeld Holds of k
// on s each fail with a *HeldError naming the real holder long before
// that poll: each is bounded by a third of it.
func TestR16FailIfHeldBehindAWaiterLocal(t *testing.T) {
	root := t.TempDir()
	a := newLocal(t, root, WithOwner("a"))
	started := make(waitStarts, 1)
	b := newLocal(t, root, WithOwner("b"), WithObserver(started))
	ag := mustAcquire(t, a, "k")

	ctx, cancel := context.WithCancel(t.Context())
	waited := make(chan error, 1)
	go func() {
		_, err := Hold(ctx, b, "k")
		waited <- err
	}()
	<-started // b's first Hold found k held and waits

	// The first of these may ride on a look the waiter makes as its watch
	// begins; the others come when it waits for the poll.
	for range 3 {
		fctx, fcancel := context.WithTimeout(t.Context(), watchedPoll/3)
		_, err := Hold(fctx, b, "k", FailIfHeld())
		fcancel()
		wantHeldErrorOf(t, err, ag)
	}

	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) || !errors.Is(err, ErrHeld) {
		t.Errorf("the waiting Hold = %v; want it to give up, the key held", err)
	}
}
