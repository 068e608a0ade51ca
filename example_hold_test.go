package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"

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

	h, err := lease.Hold(ctx, alice, "profile:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	g := h.Grant()
	fmt.Println("alice holds", g.Key, "epoch", g.Epoch, "recover:", g.PreviousUnclean)

	// Work runs under h.Context(), which ends if the lease is lost.
	_, err = lease.Hold(ctx, bob, "profile:42", lease.FailIfHeld())
	var held *lease.HeldError
	if errors.As(err, &held) {
		fmt.Println("bob: held by", held.Owner, "epoch", held.Epoch)
	}

	if err := h.Release(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println("alice's work stopped:", errors.Is(context.Cause(h.Context()), lease.ErrLost))

	hb, err := lease.Hold(ctx, bob, "profile:42", lease.FailIfHeld())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer hb.Release(ctx)
	fmt.Println("bob holds epoch", hb.Grant().Epoch)
	// Output:
	// alice holds profile:42 epoch 1 recover: false
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

	err = lease.Run(ctx, store, "nightly", func(ctx context.Context, g lease.Grant) error {
		// Do the work, passing g.Epoch with every write so that the
		// resource can reject writes from an older holder.
		fmt.Println("running with epoch", g.Epoch)
		return ctx.Err()
	})
	fmt.Println("run:", err)

	_, err = store.Holder(ctx, "nightly")
	fmt.Println("free again:", errors.Is(err, lease.ErrNotFound))
	// Output:
	// running with epoch 1
	// run: <nil>
	// free again: true
}

// recoverProfile stands for a service's crash recovery: replay a journal,
// check invariants, rebuild from the source of truth.
func recoverProfile(ctx context.Context, id string, epoch uint64) error {
	fmt.Println("recovering profile", id, "at epoch", epoch)
	return nil
}

// serveProfile stands for a service's work on a profile: it must stop
// when ctx ends, and pass epoch with every write it makes.
func serveProfile(ctx context.Context, id string, epoch uint64) error {
	fmt.Println("serving profile", id, "at epoch", epoch)
	return nil
}

// serveWithRun serves a profile under Run, recovering first if the
// previous holder died.
func serveWithRun(ctx context.Context, store lease.Store) error {
	err := lease.Run(ctx, store, "profile:42", func(ctx context.Context, g lease.Grant) error {
		if g.PreviousUnclean {
			// The previous holder died without releasing: recover first.
			if err := recoverProfile(ctx, "42", g.Epoch); err != nil {
				return err
			}
		}
		return serveProfile(ctx, "42", g.Epoch) // must return when ctx ends
	})
	if errors.Is(err, lease.ErrLost) {
		return fmt.Errorf("profile:42 was lost while serving; the work was told to stop: %w", err)
	}
	return err
}

// serveWithHold serves a profile under Hold, until the work returns or
// the lease is lost.
func serveWithHold(ctx context.Context, store lease.Store) error {
	h, err := lease.Hold(ctx, store, "profile:42") // waits while someone else holds it
	if err != nil {
		return err
	}
	defer h.Release(context.Background())
	return serveProfile(h.Context(), "42", h.Grant().Epoch) // stops when the lease is lost
}

// startNode is docs/performance.md's profile-host start-up: every assigned profile
// held through one HoldEach, each served as soon as its key is held.
func startNode(ctx context.Context, node lease.Store, assigned []string,
	serve func(ctx context.Context, id string, epoch uint64) error) map[string]*lease.Held {
	profiles := make(map[string]*lease.Held, len(assigned))
	for r := range lease.HoldEach(ctx, node, assigned) {
		if r.Err != nil {
			log.Printf("profile %s not started: %v", r.Key, r.Err)
			continue
		}
		profiles[r.Key] = r.Held
		go serve(r.Held.Context(), r.Key, r.Held.Grant().Epoch) // stops when the lease is lost
	}
	return profiles
}

// HoldEach brings a node's profiles up in batches, with no goroutine per
// key; ReleaseAll hands them all back at shutdown.
func ExampleHoldEach() {
	ctx := context.Background()
	node, err := lease.Open(ctx, "memory:")
	if err != nil {
		panic(err)
	}
	defer node.Close()
	quiet := func(ctx context.Context, id string, epoch uint64) error { <-ctx.Done(); return nil }
	profiles := startNode(ctx, node, []string{"profile:1", "profile:2", "profile:3"}, quiet)
	fmt.Println(len(profiles), "profiles held")
	if err := node.ReleaseAll(ctx); err != nil {
		panic(err)
	}
	fmt.Println("released; contexts ended:", profiles["profile:2"].Context().Err() != nil)
	// Output:
	// 3 profiles held
	// released; contexts ended: true
}

// Run and Hold serve a profile while they keep its lease; each use is a
// new holder with the next epoch.
func Example_serve() {
	ctx := context.Background()
	store, err := lease.Open(ctx, "memory:")
	if err != nil {
		panic(err)
	}
	defer store.Close()
	if err := serveWithRun(ctx, store); err != nil {
		fmt.Println(err)
	}
	if err := serveWithHold(ctx, store); err != nil {
		fmt.Println(err)
	}
	// Output:
	// serving profile 42 at epoch 1
	// serving profile 42 at epoch 2
}
