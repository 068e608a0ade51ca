package lease_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasekit/lease"
)

// Hold keeps a lease while a service works, and stops the work through
// Held.Context when the lease can no longer be trusted. The epoch fences
// every write the work makes.
func ExampleHold() {
	ctx := context.Background()
	// Two services sharing one backend; in production, Open("sqlite:...")
	// or Open("mongodb://...") in each process.
	backend := lease.NewMemoryDriver()
	alice, _ := lease.NewDocumentStore(backend, lease.WithOwner("alice"))
	bob, _ := lease.NewDocumentStore(backend, lease.WithOwner("bob"))

	h, err := lease.Hold(ctx, alice, "profiles/42")
	if err != nil {
		fmt.Println(err)
		return
	}
	g := h.Grant()
	fmt.Println("alice holds", g.Key, "epoch", g.Epoch, "recover:", g.PreviousUnclean)

	// Work runs under h.Context(), which ends if the lease is lost.
	_, err = lease.Hold(ctx, bob, "profiles/42", lease.FailIfHeld())
	var held *lease.HeldError
	if errors.As(err, &held) {
		fmt.Println("bob: held by", held.Owner, "epoch", held.Epoch)
	}

	if err := h.Release(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println("alice's work stopped:", errors.Is(context.Cause(h.Context()), lease.ErrLost))

	hb, err := lease.Hold(ctx, bob, "profiles/42", lease.FailIfHeld())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer hb.Release(ctx)
	fmt.Println("bob holds epoch", hb.Grant().Epoch)
	// Output:
	// alice holds profiles/42 epoch 1 recover: false
	// bob: held by alice epoch 1
	// alice's work stopped: true
	// bob holds epoch 2
}

// Run holds a key while a function runs, and releases it afterwards.
func ExampleRun() {
	ctx := context.Background()
	store, err := lease.Open(ctx, "memory:")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	err = lease.Run(ctx, store, "nightly-report", func(ctx context.Context, g lease.Grant) error {
		// Do the work, passing g.Epoch with every write so that the
		// resource can reject writes from an older holder.
		fmt.Println("running with epoch", g.Epoch)
		return ctx.Err()
	})
	fmt.Println("run:", err)

	_, err = store.Holder(ctx, "nightly-report")
	fmt.Println("free again:", errors.Is(err, lease.ErrNotFound))
	// Output:
	// running with epoch 1
	// run: <nil>
	// free again: true
}
