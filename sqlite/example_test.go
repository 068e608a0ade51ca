package sqlite_test

import (
	"context"
	"log"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/sqlite"
)

import _ "github.com/leasekit/lease/sqlite" // registers sqlite: with lease.Open

// docs/sqlite.md's examples, compiled (they name a path of a real host,
// so they are not run).
func Example() {
	ctx := context.Background()
	if err := openByURL(ctx); err != nil {
		log.Print(err)
	}
	if err := openShared(ctx); err != nil {
		log.Print(err)
	}
}

// openByURL opens the store by its URL, through the registered scheme.
func openByURL(ctx context.Context) error {
	store, err := lease.Open(ctx, "sqlite:/var/lib/app/leases.db")
	if err != nil {
		return err
	}
	return store.Close()
}

// openShared opens the driver itself, to share one handle among stores.
func openShared(ctx context.Context) error {
	d, err := sqlite.Open("/var/lib/app/leases.db") // github.com/leasekit/lease/sqlite
	if err != nil {
		return err
	}
	defer d.Close()
	store, err := lease.NewDocumentStore(d, lease.WithOwner("worker-1"))
	if err != nil {
		return err
	}
	defer store.Close()
	_, err = store.Holder(ctx, "jobs/nightly")
	return err
}
