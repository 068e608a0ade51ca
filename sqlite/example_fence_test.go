package sqlite_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/sqlite"
)

// docs/sqlite.md's fenced transaction, compiled (it names a path of a
// real host, so it is not run).
func ExampleFence() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:/var/lib/app/leases.db?_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	var g lease.Grant // from Acquire, or a Held's Grant()
	if err := saveJobState(ctx, db, g, "done"); err != nil {
		log.Print(err)
	}
}

// saveJobState writes a job's state, in the lease file, in a transaction
// fenced by the lease.
func saveJobState(ctx context.Context, db *sql.DB, g lease.Grant, state string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := sqlite.Fence(ctx, tx, g); err != nil {
		return err // lease.ErrLost: the lease passed on; nothing is written
	}
	if _, err := tx.ExecContext(ctx, "UPDATE jobs SET state = ? WHERE key = ?", state, g.Key); err != nil {
		return err
	}
	return tx.Commit()
}
