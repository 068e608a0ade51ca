package lease_test

import (
	"context"
	"fmt"
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
