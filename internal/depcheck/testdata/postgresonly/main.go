// Command postgresonly uses the PostgreSQL driver only.
package main

import (
	"context"
	"os"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/postgres"
)

func main() {
	ctx := context.Background()
	d, err := postgres.Open(ctx, os.Getenv("LEASE_POSTGRES_URL"), postgres.Table(postgres.DefaultTable))
	if err != nil {
		panic(err)
	}
	s, err := lease.NewDocumentStore(d)
	if err != nil {
		panic(err)
	}
	s.Close()
	d.Close()
}
