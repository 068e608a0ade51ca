package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testclock"
	"github.com/leasekit/lease/internal/testkit"
)

// TestSQLiteReadsBesideAWrite: reads that need no write lock (Holder,
// Holders, GetMany: the first read of a batched acquire) complete while
// the driver's one writer connection is inside a long write transaction,
// reading the last commit (WAL) and not the write in progress; a write
// queued behind that transaction still waits for it. Then the same while
// the driver's own batch waits for the file's write lock, which another
// connection holds.
func TestSQLiteReadsBesideAWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	d := openSQLiteAt(t, path).(*sqliteDriver)
	clock := testclock.New()
	s := testkit.NewDocStore(t, d, clock, "alice")
	g := testkit.MustAcquire(t, s, "held")
	// A guard against a hang: without the read pool every read below
	// waits for the writer until this deadline, and fails.
	ctx, cancel := context.WithTimeout(ctxBG, 10*time.Second)
	defer cancel()

	t.Run("the writer inside a transaction", func(t *testing.T) {
		writer, err := d.db.Conn(ctx) // the driver's only writer connection
		if err != nil {
			t.Fatal(err)
		}
		defer writer.Close()
		for _, q := range []string{"BEGIN IMMEDIATE",
			"INSERT INTO leases VALUES ('pending', 'bob', 1, 0, 0, 1, '')"} {
			if _, err := writer.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		queued := make(chan error, 1)
		go func() { _, err := s.Acquire(ctx, "queued"); queued <- err }()

		checkReadsBesideWrite(t, ctx, s, d, g)
		select {
		case err := <-queued:
			t.Fatalf("an acquire finished while the writer was inside a transaction: %v; want it queued", err)
		default:
		}
		if _, err := writer.ExecContext(ctx, "COMMIT"); err != nil {
			t.Fatal(err)
		}
		writer.Close() // back to the pool: the queued acquire gets it
		if err := <-queued; err != nil {
			t.Fatalf("the queued acquire: %v", err)
		}
		if rec, err := s.Holder(ctx, "queued"); err != nil || rec.Owner != "alice" {
			t.Fatalf("Holder(queued) after the commit = %+v, %v", rec, err)
		}
	})

	t.Run("a batch waiting for the file's write lock", func(t *testing.T) {
		locker, err := rawSQLite(t, path).Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer locker.Close()
		if _, err := locker.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		batch := make(chan error, 1)
		go func() {
			res, err := d.PutMany(ctx, []lease.Write{{Rec: lease.Record{Key: "batched", Owner: "alice", Epoch: 1,
				ExpiresAt: clock.Now().Add(time.Minute)}, Pre: lease.Precondition{Absent: true}}})
			if err == nil {
				err = res[0].Err
			}
			batch <- err
		}()
		for d.db.Stats().InUse == 0 { // polling until the batch holds the writer, waiting for the lock
			time.Sleep(time.Millisecond)
		}
		if _, err := s.Holder(ctx, "held"); err != nil {
			t.Fatalf("Holder while a batch waits for the write lock: %v", err)
		}
		if _, err := locker.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
		if err := <-batch; err != nil {
			t.Fatalf("the batch after the lock was freed: %v", err)
		}
	})
}

// checkReadsBesideWrite reads through s and d while the writer holds an
// uncommitted row "pending": the reads answer at once, from the last commit.
func checkReadsBesideWrite(t *testing.T, ctx context.Context, s lease.Store, d *sqliteDriver, g lease.Grant) {
	t.Helper()
	if rec, err := s.Holder(ctx, "held"); err != nil || rec.Owner != g.Owner || rec.Epoch != g.Epoch {
		t.Fatalf("Holder(held) beside the write = %+v, %v; want %+v", rec, err, g)
	}
	if _, err := s.Holder(ctx, "pending"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Holder(pending) = %v; want ErrNotFound: the write is not committed", err)
	}
	var keys []string
	for rec, err := range s.Holders(ctx, "") {
		if err != nil {
			t.Fatalf("Holders beside the write: %v", err)
		}
		keys = append(keys, rec.Key)
	}
	if len(keys) != 1 || keys[0] != "held" {
		t.Fatalf("Holders beside the write = %q; want [held]", keys)
	}
	res, err := d.GetMany(ctx, []string{"held", "pending"})
	if err != nil || res[0].Err != nil || !errors.Is(res[1].Err, lease.ErrNotFound) {
		t.Fatalf("GetMany beside the write = %+v, %v", res, err)
	}
}
