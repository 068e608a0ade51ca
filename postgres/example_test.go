package postgres_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/postgres"
)

import _ "github.com/leasekit/lease/postgres" // registers postgres:// and postgresql:// with lease.Open

// docs/postgres.md's examples, compiled (they name servers of a real
// deployment, so they are not run).
func Example() {
	ctx := context.Background()
	if err := openByURL(ctx); err != nil {
		log.Print(err)
	}
	pgxConfig, err := pgx.ParseConfig("postgres://app:secret@db1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	if err := openWithPool(ctx, pgxConfig); err != nil {
		log.Print(err)
	}
}

// openByURL opens the store by its URL, through the registered scheme.
func openByURL(ctx context.Context) error {
	s, err := lease.Open(ctx, "postgres://app:secret@db1:5432,db2:5432/app?target_session_attrs=read-write&table=leases")
	if err != nil {
		return err
	}
	return s.Close()
}

// openWithPool builds the store on a pool the program already has.
func openWithPool(ctx context.Context, pgxConfig *pgx.ConnConfig) error {
	db := stdlib.OpenDB(*pgxConfig) // github.com/jackc/pgx/v5/stdlib

	d, err := postgres.NewDriver(ctx, db, postgres.Table("leases")) // github.com/leasekit/lease/postgres
	if err != nil {
		return err
	}
	s, err := lease.NewDocumentStore(d)
	if err != nil {
		return err
	}
	return s.Close()
}
