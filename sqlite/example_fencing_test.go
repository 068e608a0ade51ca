package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	_ "github.com/leasekit/lease/sqlite" // registers database/sql's "sqlite" driver, as the sqlite: store uses
)

// errStaleEpoch: a newer holder has written the profile.
var errStaleEpoch = errors.New("stale epoch: a newer holder exists")

// saveProfile writes a profile only if no newer holder has: the write
// carries the holder's epoch, and the row keeps the newest it has seen.
func saveProfile(ctx context.Context, db *sql.DB, id string, data []byte, epoch uint64) error {
	res, err := db.ExecContext(ctx,
		`UPDATE profiles SET data = ?, epoch = ? WHERE id = ? AND epoch <= ?`,
		data, epoch, id, epoch)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return errStaleEpoch // a newer holder exists: this holder must stop
	}
	return nil
}

// Fencing in SQL: the row refuses a write from an older epoch than the
// newest that wrote it.
func Example_fencingSQL() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "lease-fencing-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", filepath.Join(dir, "app.db")) // the driver the sqlite: store uses
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE profiles (id TEXT PRIMARY KEY, data BLOB, epoch INTEGER NOT NULL);
		INSERT INTO profiles VALUES ('42', NULL, 0)`); err != nil {
		panic(err)
	}
	fmt.Println(saveProfile(ctx, db, "42", []byte("new"), 2))
	fmt.Println(saveProfile(ctx, db, "42", []byte("late"), 1))
	// Output:
	// <nil>
	// stale epoch: a newer holder exists
}
