package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasekit/lease"
)

// A profile host takes the lease before opening a profile, and runs crash
// recovery when the previous holder died without releasing.
func Example() {
	ctx := context.Background()
	store, err := lease.Open(ctx, "memory:", lease.WithOwner("host-a"), lease.WithTTL(30*time.Second))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	g, err := store.Acquire(ctx, "profile:42")
	if err != nil {
		panic(err)
	}
	if g.PreviousUnclean {
		fmt.Println("recovering after a crashed holder")
	}
	fmt.Printf("%s holds %s at epoch %d\n", g.Owner, g.Key, g.Epoch)

	if err := store.Release(ctx, g); err != nil {
		panic(err)
	}
	// Output: host-a holds profile:42 at epoch 1
}

// Two owners contend for one key: the loser learns who holds it.
func ExampleHeldError() {
	ctx := context.Background()
	driver := lease.NewMemoryDriver()
	a, _ := lease.NewDocumentStore(driver, lease.WithOwner("host-a"))
	b, _ := lease.NewDocumentStore(driver, lease.WithOwner("host-b"))

	if _, err := a.Acquire(ctx, "jobs/nightly"); err != nil {
		panic(err)
	}
	_, err := b.Acquire(ctx, "jobs/nightly")
	var held *lease.HeldError
	if errors.As(err, &held) {
		fmt.Printf("held by %s (epoch %d)\n", held.Owner, held.Epoch)
	}
	// Output: held by host-a (epoch 1)
}

// A holder that crashes never releases; once its lease expires the next
// holder gets a larger epoch and is told to recover.
func ExampleGrant_PreviousUnclean() {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	driver := lease.NewMemoryDriver()
	crashed, _ := lease.NewDocumentStore(driver, lease.WithOwner("host-a"), lease.WithClock(clock), lease.WithTTL(10*time.Second))
	next, _ := lease.NewDocumentStore(driver, lease.WithOwner("host-b"), lease.WithClock(clock), lease.WithTTL(10*time.Second))

	if _, err := crashed.Acquire(ctx, "profile:42"); err != nil {
		panic(err)
	}
	crashed.Close() // dies holding the lease

	now = now.Add(10 * time.Second)
	g, err := next.Acquire(ctx, "profile:42")
	if err != nil {
		panic(err)
	}
	fmt.Printf("epoch %d, previous unclean: %v\n", g.Epoch, g.PreviousUnclean)
	// Output: epoch 2, previous unclean: true
}

// Profile is a protected resource that fences its writers: it remembers
// the newest epoch it has seen and refuses older ones.
type Profile struct {
	newestEpoch uint64
	data        []byte
}

// In the protected resource (a database row, a storage bucket, a queue):
func (p *Profile) Save(epoch uint64, data []byte) error {
	if epoch < p.newestEpoch {
		return fmt.Errorf("stale writer: epoch %d, newest is %d", epoch, p.newestEpoch)
	}
	p.newestEpoch = epoch
	p.data = data
	return nil
}

// A protected resource fences writes with the epoch: once it has seen a
// newer holder, a stale holder's late write is refused.
func Example_fencing() {
	var p Profile
	fmt.Println(p.Save(7, []byte("a"))) // the holder at epoch 7
	fmt.Println(p.Save(8, []byte("b"))) // the next holder
	fmt.Println(p.Save(7, []byte("c"))) // epoch 7 wakes from a long pause
	// Output:
	// <nil>
	// <nil>
	// stale writer: epoch 7, newest is 8
}
