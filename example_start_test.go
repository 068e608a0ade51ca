package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/leasekit/lease"
)

// The package documentation's getting-started example: open a store, Hold
// a key, work under the Held's context, Release.
func Example_gettingStarted() {
	dir, err := os.MkdirTemp("", "lease-start-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	if err := holdReport(context.Background(), "file:"+dir); err != nil {
		fmt.Println(err)
	}
	// Output: writing the report at epoch 1
}

// holdReport is the package documentation's example, on the store at url.
func holdReport(ctx context.Context, url string) error {
	store, err := lease.Open(ctx, url)
	if err != nil {
		return err
	}
	defer store.Close()

	h, err := lease.Hold(ctx, store, "report:daily") // waits while another holds it
	if err != nil {
		return err
	}
	defer h.Release(context.Background())

	// h.Context() ends if the lease is lost: the work must stop then.
	// h.Grant().Epoch goes with every write, so that a late writer is refused.
	return writeReport(h.Context(), h.Grant().Epoch)
}

// writeReport stands for the job a lease protects: it stops when ctx ends.
func writeReport(ctx context.Context, epoch uint64) error {
	fmt.Println("writing the report at epoch", epoch)
	return ctx.Err()
}

// docs/local.md's example, compiled: one run of a nightly job on one
// host, on the local store. It names a directory of a real host, so it is
// not run.
func ExampleNewLocalStore() {
	if err := nightlyOnce(context.Background()); err != nil {
		log.Print(err)
	}
}

func nightlyOnce(ctx context.Context) error {
	s, err := lease.NewLocalStore("/var/lib/myapp/leases") // or lease.Open(ctx, "file:/var/lib/myapp/leases")
	if err != nil {
		return err
	}
	defer s.Close()

	g, err := s.Acquire(ctx, "jobs/nightly")
	var held *lease.HeldError
	switch {
	case errors.As(err, &held):
		log.Printf("%s is running it (epoch %d)", held.Owner, held.Epoch)
		return nil
	case err != nil:
		return err
	}
	defer s.Release(ctx, g)
	if g.PreviousUnclean {
		// the last holder died without releasing: recover first
	}
	fmt.Println("running jobs/nightly at epoch", g.Epoch)
	return nil
}
