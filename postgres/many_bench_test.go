package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/manybench"
	"github.com/leasekit/lease/internal/pgserver"
)

// The many-keys benchmarks (package manybench) on a fresh table of the
// shared server, beside the floors, on rows of their own: n guarded writes
// (postgresFloorUpdate), one UPDATE statement per postgresMaxBatch rows,
// for keys kept per key; one guarded UPDATE of one session row
// (postgresSessionFloorUpdate) for a session. They also report the
// server's side: the WAL it writes and, when the tests started it, its
// processes' CPU time; and the wire round trips of the store and of the
// floors (a request a round trip, see countedDB).
var manyPostgres = manybench.Backend{Name: "postgres", Sizes: manybench.Sizes, Open: openPostgresMany}

// Each benchmark is package manybench's of the same name: see there for
// what it measures and reports.

func BenchmarkManyRenewal(b *testing.B)    { manybench.Renewal(b, manyPostgres) }
func BenchmarkManyReleaseAll(b *testing.B) { manybench.ReleaseAll(b, manyPostgres) }
func BenchmarkManyTakeover(b *testing.B)   { manybench.Takeover(b, manyPostgres) }
func BenchmarkManyWaiting(b *testing.B)    { manybench.Waiting(b, manyPostgres) }
func BenchmarkStartup(b *testing.B)        { manybench.Startup(b, manyPostgres) }
func BenchmarkHeldSteady(b *testing.B)     { manybench.HeldSteady(b, manyPostgres) }

// postgresFloorUpdate is the least a PostgreSQL renewal of many keys
// costs: one UPDATE of the rows named by arrays of keys and versions, each
// row guarded by its version and by the driver's parse guard, and nothing
// returned but the count.
func postgresFloorUpdate(table string) string {
	return `UPDATE ` + pgx.Identifier{table}.Sanitize() + ` AS l SET owner = 'floor', epoch = 1, expires = $3, released = false,
		version = w.version + 1
	FROM unnest($1::text[], $2::bigint[]) AS w(key, version)
	WHERE l.key = w.key AND l.version = w.version AND CASE WHEN octet_length(l.owner) BETWEEN 1 AND 256 AND l.owner !~ '[^!-~]'
	AND l.epoch BETWEEN 1 AND 18446744073709551615 AND isfinite(l.expires) AND l.released IS NOT NULL THEN true ELSE false END`
}

// postgresSessionFloorUpdate is the least a renewal of a session costs:
// one UPDATE of its row, guarded by its version and by the driver's parse
// guard, a transaction of its own, nothing returned but the count.
func postgresSessionFloorUpdate(table string) string {
	return `UPDATE ` + pgx.Identifier{sessionsTable(table)}.Sanitize() + ` AS x SET owner = 'floor', expires = $3, state = 1,
		version = $2 + 1
	WHERE x.id = $1 AND x.version = $2 AND octet_length(x.owner) BETWEEN 1 AND 256 AND x.owner !~ '[^!-~]'
	AND isfinite(x.expires) AND x.state BETWEEN 1 AND 3`
}

func openPostgresMany(b *testing.B, n int) manybench.Rig {
	table := pgserver.FreshTable(b)
	db, wire := countedDB(b)
	d := newDriverOn(b, db, table)
	ctx := context.Background()
	// The floors write through a connection of the store's pool, so that
	// their wire round trips are counted as the store's are; the WAL is
	// read through one of its own, counted in neither.
	conn, err := db.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	walConn, err := pgserver.SharedDB(b).Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { walConn.Close() })
	_, err = conn.ExecContext(ctx, `INSERT INTO `+pgx.Identifier{table}.Sanitize()+
		` (key, owner, epoch, expires, released, version)
		SELECT 'floor:' || lpad(i::text, 6, '0'), 'floor', 1, now() + interval '1 minute', false, 1
		FROM generate_series(0, $1 - 1) AS i`, n)
	if err == nil {
		_, err = conn.ExecContext(ctx, `INSERT INTO `+pgx.Identifier{sessionsTable(table)}.Sanitize()+
			` (id, owner, expires, state, version) VALUES ($1, 'floor', now() + interval '1 minute', 1, 1)`, manybench.FloorSession)
	}
	if err != nil {
		b.Fatal(err)
	}
	version := int64(1)
	floor := func(b *testing.B) time.Duration {
		start := time.Now()
		if err := pgFloorBatch(conn, postgresFloorUpdate(table), n, version); err != nil {
			b.Fatal(err)
		}
		version++
		return time.Since(start)
	}
	return manybench.Rig{Driver: d, TTL: lease.DefaultTTL, Floor: floor,
		SessionFloor: pgSessionFloor(conn, table), Server: pgServerSide(b, walConn), Wire: wire, Settle: func() error {
			// The whole database, earlier benchmarks' dead rows too; then
			// the checkpoint that writes out what start-up dirtied.
			_, err := walConn.ExecContext(ctx, `VACUUM (ANALYZE)`)
			if err == nil {
				_, err = walConn.ExecContext(ctx, `CHECKPOINT`)
			}
			return err
		}}
}

// countedDB is a pool on the shared server as Open makes it (openPool),
// that counts its wire round trips (countRequests). It is closed when b
// ends.
func countedDB(b *testing.B) (*sql.DB, func() int) {
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(b))
	if err != nil {
		b.Fatal(err)
	}
	sent := countRequests(cfg)
	db := openPool(cfg, DefaultMaxConns)
	b.Cleanup(func() { db.Close() })
	return db, sent
}

// pgSessionFloor renews the floor's session row, one statement a call.
func pgSessionFloor(conn *sql.Conn, table string) func(*testing.B) time.Duration {
	update := postgresSessionFloorUpdate(table)
	version := int64(1)
	return func(b *testing.B) time.Duration {
		start := time.Now()
		res, err := conn.ExecContext(context.Background(), update, manybench.FloorSession, version, time.Now().Add(lease.DefaultTTL))
		var n int64
		if err == nil {
			n, err = res.RowsAffected()
		}
		if err == nil && n != 1 {
			err = fmt.Errorf("%d rows changed, want 1", n)
		}
		if err != nil {
			b.Fatalf("the session floor's update at version %d: %v", version, err)
		}
		version++
		return time.Since(start)
	}
}

// pgServerSide reads, through conn, the server's WAL position, and its
// processes' CPU time, when the tests started it (nil otherwise: a server
// of yours may be serving others too).
func pgServerSide(b *testing.B, conn *sql.Conn) *manybench.Server {
	srv := pgserver.SharedServer(b)
	if srv == nil {
		return nil
	}
	ctx := context.Background()
	return &manybench.Server{
		CPU: srv.CPU,
		WAL: func() (int64, error) {
			var at int64
			err := conn.QueryRowContext(ctx, `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&at)
			return at, err
		},
	}
}

// pgFloorBatch writes the floor's n rows at version with update,
// postgresMaxBatch rows a statement (each its own transaction, as the
// driver's are), and checks that each row changed.
func pgFloorBatch(conn *sql.Conn, update string, n int, version int64) error {
	return conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		expires := time.Now().Add(time.Minute)
		for at := 0; at < n; at += postgresMaxBatch {
			end := min(at+postgresMaxBatch, n)
			keys, versions := make([]string, 0, end-at), make([]int64, 0, end-at)
			for i := at; i < end; i++ {
				keys, versions = append(keys, manybench.FloorKey(i)), append(versions, version)
			}
			tag, err := pc.Exec(context.Background(), update, keys, versions, expires)
			if err == nil && tag.RowsAffected() != int64(end-at) {
				err = fmt.Errorf("floor update of %d rows at version %d changed %d", end-at, version, tag.RowsAffected())
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}
