// Command acquire uses the bare operations of a Store: it takes the lease on a
// profile, runs crash recovery if the previous holder died, serves, and
// releases. Run it twice: each run is a new holder, with the next epoch.
//
//	go run ./examples/acquire
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/leasekit/lease"
	// The schemes this example can open (LEASE_STORE): importing a driver
	// package registers its URLs with lease.Open.
	_ "github.com/leasekit/lease/mongodb"
	_ "github.com/leasekit/lease/postgres"
	_ "github.com/leasekit/lease/sqlite"
)

func main() {
	url := os.Getenv("LEASE_STORE")
	if url == "" {
		url = "sqlite:" + filepath.Join(os.TempDir(), "lease-quickstart.db")
	}
	if err := serve(context.Background(), url); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, url string) error {
	store, err := lease.Open(ctx, url, lease.WithTTL(30*time.Second))
	if err != nil {
		return err
	}
	defer store.Close()

	g, err := store.Acquire(ctx, "profile:42")
	var held *lease.HeldError
	switch {
	case errors.As(err, &held):
		return fmt.Errorf("profile:42 is served by %s until %v", held.Owner, held.ExpiresAt)
	case err != nil:
		return err
	}
	if g.PreviousUnclean {
		fmt.Println("the previous holder died: recovering profile:42")
	}
	fmt.Printf("serving profile:42 at epoch %d\n", g.Epoch)
	// ... serve, calling store.Renew(ctx, g) well before g.ExpiresAt
	// (or use lease.Hold, which renews for you) ...
	return store.Release(ctx, g)
}
