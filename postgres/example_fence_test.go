package postgres_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/postgres"
)

// The README's and docs/postgres.md's fenced transactions, compiled (they
// name a real deployment's server, so they are not run).
func ExampleFence() {
	ctx := context.Background()
	pgxConfig, err := pgx.ParseConfig("postgres://app:secret@db1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	db := stdlib.OpenDB(*pgxConfig)
	defer db.Close()
	s, err := lease.Open(ctx, "postgres://app:secret@db1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	h, err := lease.Hold(ctx, s, "profile/42")
	if err != nil {
		log.Fatal(err)
	}
	defer h.Release(ctx)
	if err := saveProfile(ctx, db, h, "42", []byte(`{}`)); err != nil {
		log.Print(err)
	}
}

// saveProfile writes a profile in a transaction fenced by the lease: it
// commits only while h's grant is still the key's live grant.
func saveProfile(ctx context.Context, db *sql.DB, h *lease.Held, id string, data []byte) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := postgres.Fence(ctx, tx, h.Grant()); err != nil {
		return err // lease.ErrLost: the lease passed on; nothing is written
	}
	if _, err := tx.ExecContext(ctx, "UPDATE profiles SET data = $1 WHERE id = $2", data, id); err != nil {
		return err
	}
	return tx.Commit()
}

// FencePgx fences a transaction of pgx's own interface.
func ExampleFencePgx() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "postgres://app:secret@db1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	var g lease.Grant // from Acquire, or a Held's Grant()
	if err := saveProfilePgx(ctx, conn, g, "42", []byte(`{}`)); err != nil {
		log.Print(err)
	}
}

// saveProfilePgx is saveProfile through pgx, on a table of leases named
// other than the default.
func saveProfilePgx(ctx context.Context, conn *pgx.Conn, g lease.Grant, id string, data []byte) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := postgres.FencePgx(ctx, tx, g, postgres.Table("app_leases")); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "UPDATE profiles SET data = $1 WHERE id = $2", data, id); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
