package lease_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/mongoproxy"
	"github.com/leasekit/lease/internal/mongoserver"
	"github.com/leasekit/lease/internal/pgserver"
	"github.com/leasekit/lease/postgres"
	"github.com/leasekit/lease/sqlite"
)

// The backends of the many-keys benchmarks (bench_many_test.go), each
// with its floor: one renewal period of n keys as raw storage writes, on
// n rows of its own beside the store's. The floors write what the drivers
// write, but through the database's own client, not the driver: the
// statements below restate the drivers' (a floor is a reference, not a
// second driver).
func init() {
	lease.RegisterManyBackend("sqlite", lease.ManySizes, openSQLiteMany, nil)
	lease.RegisterManyBackend("mongodb", lease.ManySizes, openMongoMany, ferretTooSlow)
	lease.RegisterManyBackend("postgres", lease.ManySizes, openPostgresMany, nil)
}

// sqliteFloorDSN opens the file as package sqlite does its writer: a busy
// timeout of 5 s, synchronous=FULL, a 16 MiB page cache (the file is in
// WAL mode already).
func sqliteFloorDSN(path string) string {
	q := url.Values{"_pragma": {"busy_timeout(5000)", "synchronous(FULL)", "cache_size(-16384)"}, "_txlock": {"immediate"}}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path), RawQuery: q.Encode()}).String()
}

// sqliteFloorUpdate is package sqlite's guarded UPDATE.
const sqliteFloorUpdate = `UPDATE leases SET owner = ?1, epoch = ?2, expires_ms = ?3, released = ?4, version = ?5
	WHERE key = ?6 AND version = ?7 AND typeof(version) = 'integer'
	AND (owner = ?1 OR typeof(owner) = 'text' AND length(owner) BETWEEN 1 AND 256 AND owner NOT GLOB '*[^!-~]*')
	AND typeof(epoch) = 'integer' AND epoch <> 0
	AND typeof(expires_ms) = 'integer' AND typeof(released) = 'integer' AND released IN (0, 1)`

// postgresFloorUpdate is the least a PostgreSQL renewal of many keys
// costs: one UPDATE of the rows named by arrays of keys and versions, each
// row guarded by its version and by package postgres's parse guard, and
// nothing returned but the count.
func postgresFloorUpdate(table string) string {
	return `UPDATE ` + pgx.Identifier{table}.Sanitize() + ` AS l SET owner = 'floor', epoch = 1, expires = $3, released = false,
		version = w.version + 1
	FROM unnest($1::text[], $2::bigint[]) AS w(key, version)
	WHERE l.key = w.key AND l.version = w.version AND CASE WHEN octet_length(l.owner) BETWEEN 1 AND 256 AND l.owner !~ '[^!-~]'
	AND l.epoch BETWEEN 1 AND 18446744073709551615 AND isfinite(l.expires) AND l.released IS NOT NULL THEN true ELSE false END`
}

// postgresFloorChunk is how many rows one floor UPDATE writes: as many
// as package postgres writes with one statement.
const postgresFloorChunk = 5000

// The writes package mongodb sends in one bulkWrite: to MongoDB, and to
// FerretDB (which deadlocks on an update command of about 100 updates).
const (
	mongoBatchChunk  = 1000
	ferretBatchChunk = 50
)

// ferretTooSlow keeps FerretDB, the stand-in test server, to N <= 1,000.
func ferretTooSlow(b *testing.B, n int) string {
	if n > 1000 && mongoserver.Shared(b).Ferret {
		return "FerretDB scans its collection on every update: 10,000 keys would take hours a period; set MONGODB_URI to a MongoDB to run it"
	}
	return ""
}

// benchFields are the fields a lease document carries besides _id.
func benchFields(version int64) bson.D {
	return bson.D{{Key: "owner", Value: "bench"}, {Key: "epoch", Value: int64(1)},
		{Key: "expires", Value: bson.NewDateTimeFromTime(time.Now().Add(time.Minute))},
		{Key: "released", Value: false}, {Key: "version", Value: version}}
}

func openSQLiteMany(b *testing.B, n int) lease.ManyRig {
	path := filepath.Join(b.TempDir(), "leases.db")
	d, err := sqlite.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	db, err := sql.Open("sqlite", sqliteFloorDSN(path))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	tx, _ := db.Begin()
	for i := range n {
		if _, err := tx.Exec("INSERT INTO leases VALUES (?, 'floor', 1, 0, 0, 1)", lease.FloorKey(i)); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	update := mustPrepare(b, db, sqliteFloorUpdate)
	version := int64(1)
	floor := func(b *testing.B) time.Duration {
		start := time.Now()
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		stmt := tx.Stmt(update)
		ms := time.Now().UnixMilli()
		for i := range n {
			if _, err := stmt.Exec("floor", 1, ms, 0, version+1, lease.FloorKey(i), version); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		version++
		return time.Since(start)
	}
	return lease.NewManyRig(d, lease.DefaultTTL, floor, nil)
}

// openMongoMany opens a driver on a fresh collection, through a proxy of
// its own so that the proxy's counts are this benchmark's. Its floor is n
// raw updateOne's filtered on _id and version, on documents of their own
// (another collection of the same size), in unordered bulkWrites of as
// many updates as the driver sends that server in one (ferretBatchChunk on
// FerretDB, which deadlocks on an update command of about 100 updates;
// mongoBatchChunk on MongoDB), with the driver's write concern.
//
// FerretDB (the test server unless MONGODB_URI is set) scans the
// collection for each update: about 2 ms per update at 100 documents, 15
// ms at 1,000, so renewing 1,000 keys takes 15 s and 10,000 would take
// hours. Its stores therefore grant a 10 minute TTL (at 30 s the
// background renewals of 1,000 keys could not keep up), and N=10,000
// runs only on a real MongoDB (MONGODB_URI).
func openMongoMany(b *testing.B, n int) lease.ManyRig {
	srv := mongoserver.Shared(b)
	p := mongoproxy.New(b, srv.Addr)
	client := mongoserver.Client(b, p)
	d := newMongoDriver(b, mongoserver.Collection(b, client))
	chunk := mongoBatchChunk
	if srv.Ferret {
		chunk = ferretBatchChunk
	}
	journal := true
	coll := mongoserver.Collection(b, client).Clone(options.Collection().
		SetWriteConcern(&writeconcern.WriteConcern{W: writeconcern.WCMajority, Journal: &journal}))
	ctx := context.Background()
	docs := make([]any, n)
	for i := range docs {
		docs[i] = append(bson.D{{Key: "_id", Value: lease.FloorKey(i)}}, benchFields(1)...)
	}
	for at := 0; at < n; at += chunk {
		if _, err := coll.InsertMany(ctx, docs[at:min(at+chunk, n)]); err != nil {
			b.Fatal(err)
		}
	}
	version := int64(1)
	models := make([]mongo.WriteModel, n)
	floor := func(b *testing.B) time.Duration {
		start := time.Now()
		for i := range models {
			models[i] = mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: "_id", Value: lease.FloorKey(i)}, {Key: "version", Value: version}}).
				SetUpdate(bson.D{{Key: "$set", Value: benchFields(version + 1)}})
		}
		for at := 0; at < n; at += chunk {
			chunk := models[at:min(at+chunk, n)]
			res, err := coll.BulkWrite(ctx, chunk, options.BulkWrite().SetOrdered(false))
			if err == nil && res.MatchedCount != int64(len(chunk)) {
				err = fmt.Errorf("floor bulkWrite matched %d of %d", res.MatchedCount, len(chunk))
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		version++
		return time.Since(start)
	}
	ttl := lease.DefaultTTL
	if srv.Ferret {
		ttl = 10 * time.Minute
	}
	return lease.NewManyRig(d, ttl, floor, p)
}

func mustPrepare(b *testing.B, db *sql.DB, q string) *sql.Stmt {
	st, err := db.Prepare(q)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// openPostgresMany opens a driver on a fresh table of the shared server.
// Its floor is n guarded writes (postgresFloorUpdate) on rows of their
// own, one UPDATE statement per postgresFloorChunk rows.
func openPostgresMany(b *testing.B, n int) lease.ManyRig {
	table := pgserver.FreshTable(b)
	d, err := postgres.NewDriver(b.Context(), pgserver.SharedDB(b), postgres.Table(table))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	ctx := context.Background()
	conn, err := pgserver.SharedDB(b).Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	_, err = conn.ExecContext(ctx, `INSERT INTO `+pgx.Identifier{table}.Sanitize()+
		` (key, owner, epoch, expires, released, version)
		SELECT 'floor:' || lpad(i::text, 6, '0'), 'floor', 1, now() + interval '1 minute', false, 1
		FROM generate_series(0, $1 - 1) AS i`, n)
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
	return lease.NewManyRig(d, lease.DefaultTTL, floor, nil)
}

// pgFloorBatch writes the floor's n rows at version with
// postgresFloorUpdate, postgresFloorChunk rows a statement (each its own
// transaction, as the driver's are), and checks that each row changed.
func pgFloorBatch(conn *sql.Conn, update string, n int, version int64) error {
	return conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		expires := time.Now().Add(time.Minute)
		for at := 0; at < n; at += postgresFloorChunk {
			end := min(at+postgresFloorChunk, n)
			keys, versions := make([]string, 0, end-at), make([]int64, 0, end-at)
			for i := at; i < end; i++ {
				keys, versions = append(keys, lease.FloorKey(i)), append(versions, version)
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
