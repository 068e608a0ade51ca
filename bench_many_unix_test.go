//go:build unix

package lease

import (
	"context"
	"database/sql"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// PostgreSQL and getrusage, for the many-keys benchmarks, where the
// PostgreSQL tests run.
func init() {
	manyBackends = append(manyBackends, manyBackend{name: "postgres", sizes: manySizes, open: openPostgresMany})
	processCPU = rusageCPU
}

// rusageCPU is this process's user and system CPU time.
func rusageCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// openPostgresMany opens a driver on a fresh table of the shared server.
// Its floor is n of the driver's own guarded UPDATEs (the statement Put
// sends) on rows of their own, sent as one pipelined batch: one implicit
// transaction, one round trip.
func openPostgresMany(b *testing.B, n int) manyRig {
	d := newTestPostgresDriver(b)
	ctx := context.Background()
	conn, err := testPostgresDB(b).Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	_, err = conn.ExecContext(ctx, `INSERT INTO `+pgx.Identifier{d.table}.Sanitize()+
		` (key, owner, epoch, expires, released, version)
		SELECT 'floor:' || lpad(i::text, 6, '0'), 'floor', 1, now() + interval '1 minute', false, 1
		FROM generate_series(0, $1 - 1) AS i`, n)
	if err != nil {
		b.Fatal(err)
	}
	version := int64(1)
	floor := func(b *testing.B) time.Duration {
		start := time.Now()
		if err := pgFloorBatch(conn, d.update, n, version); err != nil {
			b.Fatal(err)
		}
		version++
		return time.Since(start)
	}
	return manyRig{d: d, ttl: DefaultTTL, floor: floor}
}

// pgFloorBatch sends n guarded UPDATEs of the floor's rows at version in
// one batch, and checks that each changed its row.
func pgFloorBatch(conn *sql.Conn, update string, n int, version int64) error {
	return conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		if _, err := pc.Prepare(context.Background(), update, update); err != nil { // once per connection
			return err
		}
		var batch pgx.Batch
		expires := time.Now().Add(time.Minute)
		for i := range n {
			batch.Queue(update, floorKey(i), version, "floor", int64(1), expires, false)
		}
		br := pc.SendBatch(context.Background(), &batch)
		for i := range n {
			tag, err := br.Exec()
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("floor update of %s at version %d changed %d rows", floorKey(i), version, tag.RowsAffected())
			}
			if err != nil {
				br.Close()
				return err
			}
		}
		return br.Close()
	})
}
