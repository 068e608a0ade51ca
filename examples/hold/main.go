// Command hold keeps a lease on a key while it works, on the embedded
// default store (an SQLite file in the temporary directory). Each run gets
// the next epoch; while one run holds the key, another waits for it.
//
//	go run ./examples/hold
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/leasekit/lease"
	_ "github.com/leasekit/lease/sqlite" // registers "sqlite:" URLs with lease.Open
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	store, err := lease.Open(ctx, "sqlite:"+filepath.Join(os.TempDir(), "leases.db"))
	if err != nil {
		return err
	}
	defer store.Close()

	// Hold waits while another process holds the key, then renews the
	// lease in the background until Release.
	h, err := lease.Hold(ctx, store, "report:daily")
	if err != nil {
		return err
	}
	defer h.Release(context.Background())

	g := h.Grant()
	if g.PreviousUnclean {
		fmt.Printf("the previous holder of %s died holding it: recover first\n", g.Key)
	}
	// h.Context() ends if the lease is lost: the work must stop then.
	// g.Epoch goes with every write, so that a late writer is refused.
	return work(h.Context(), g.Epoch)
}

// work stands for the job the lease protects.
func work(ctx context.Context, epoch uint64) error {
	fmt.Println("working at epoch", epoch)
	return ctx.Err()
}
