package sqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
)

// BenchmarkSQLiteBatch measures the batch driver methods on a file
// database beside their floors: the same statements issued raw through
// database/sql on a connection of its own to the same file, on keys of
// their own, with the same pragmas (WAL, synchronous=FULL). Operation and
// floor alternate within each iteration, so that both meet the same disk.
//
//	putmany-renew-N  PutMany of N renewals (conditional UPDATEs); floor: the
//	                 same N UPDATE statements in one transaction
//	getmany-N        GetMany of N keys; floor: one SELECT ... WHERE key IN (N keys)
//	list-N           List of N records; floor: one range SELECT of N rows
//
// transactions/op (or queries/op) counts the driver's commits or queries
// per operation; floor-transactions/op the floor's.
func BenchmarkSQLiteBatch(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("putmany-renew-%d", n), func(b *testing.B) { benchSQLitePutMany(b, n) })
	}
	b.Run("getmany-1000", func(b *testing.B) { benchSQLiteRead(b, 1000, false) })
	b.Run("list-1000", func(b *testing.B) { benchSQLiteRead(b, 1000, true) })
}

// sqliteBenchFile makes a file with n lease rows under prefix "s/" for
// the driver and n under "f/" for the floor, and returns the driver and a
// raw handle of one connection.
func sqliteBenchFile(b *testing.B, n int) (*sqliteDriver, *sql.DB, time.Time) {
	path := filepath.Join(b.TempDir(), "leases.db")
	d := openSQLiteAt(b, path).(*sqliteDriver)
	exp := time.Now().Add(time.Minute)
	ws := make([]lease.Write, 0, 2*n)
	for i := range n {
		for _, p := range []string{"s/", "f/"} {
			ws = append(ws, lease.Write{Rec: lease.Record{Key: fmt.Sprintf("%s%06d", p, i), Owner: "bench", Epoch: 1, ExpiresAt: exp}, Pre: lease.Precondition{Absent: true}})
		}
	}
	if _, err := d.PutMany(ctxBG, ws); err != nil {
		b.Fatal(err)
	}
	db, err := sql.Open("sqlite", sqliteDSN(path, sqliteBusyTimeout, false))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	return d, db, exp
}

func benchSQLitePutMany(b *testing.B, n int) {
	d, db, exp := sqliteBenchFile(b, n)
	upd, err := db.Prepare(sqliteUpdate)
	if err != nil {
		b.Fatal(err)
	}
	version := uint64(1)
	ws := make([]lease.Write, n)
	store := func() (time.Duration, int) {
		exp = exp.Add(time.Millisecond)
		for i := range ws {
			ws[i] = lease.Write{Rec: lease.Record{Key: fmt.Sprintf("s/%06d", i), Owner: "bench", Epoch: 1, ExpiresAt: exp}, Pre: lease.Precondition{Version: version}}
		}
		commits := d.commits.Load()
		start := time.Now()
		results, err := d.PutMany(ctxBG, ws)
		elapsed := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range results {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
		return elapsed, int(d.commits.Load() - commits)
	}
	floor := func() time.Duration {
		ms := exp.UnixMilli()
		start := time.Now()
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		st := tx.Stmt(upd)
		for i := range n {
			res, err := st.Exec("bench", 1, ms, 0, "", int64(version+1), fmt.Sprintf("f/%06d", i), int64(version))
			if err != nil {
				b.Fatal(err)
			}
			if k, _ := res.RowsAffected(); k != 1 {
				b.Fatalf("floor UPDATE changed %d rows", k)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var opTime, floorTime time.Duration
	var txs int
	i := 0
	for b.Loop() {
		for k := range 2 {
			if (i+k)%2 == 0 {
				d, t := store()
				opTime, txs = opTime+d, txs+t
			} else {
				floorTime += floor()
			}
		}
		version++
		i++
	}
	reportPair(b, opTime, floorTime, float64(txs), 1, "transactions/op")
}

func benchSQLiteRead(b *testing.B, n int, list bool) {
	d, db, _ := sqliteBenchFile(b, n)
	keys := make([]string, n)
	args := make([]any, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("s/%06d", i)
		args[i] = fmt.Sprintf("f/%06d", i)
	}
	floorQuery := fmt.Sprintf(sqliteRowsIn, strings.TrimSuffix(strings.Repeat("?,", n), ","))
	floorArgs := args
	if list {
		floorQuery, floorArgs = sqliteList, []any{"f/", "f0", "", n}
	}
	queries := 0
	store := func() time.Duration {
		start := time.Now()
		var got int
		if list {
			recs, err := d.List(ctxBG, "s/", "", n)
			if err != nil {
				b.Fatal(err)
			}
			got, queries = len(recs), queries+1
		} else {
			results, err := d.GetMany(ctxBG, keys)
			if err != nil {
				b.Fatal(err)
			}
			got, queries = len(results), queries+(n+sqliteBatchChunk-1)/sqliteBatchChunk
		}
		if got != n {
			b.Fatalf("read %d records; want %d", got, n)
		}
		return time.Since(start)
	}
	floor := func() time.Duration {
		start := time.Now()
		rows, err := db.Query(floorQuery, floorArgs...)
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for rows.Next() {
			var cols [7]any
			if err := rows.Scan(&cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5], &cols[6]); err != nil {
				b.Fatal(err)
			}
			got++
		}
		if err := rows.Close(); err != nil || got != n {
			b.Fatalf("floor read %d rows, %v; want %d", got, err, n)
		}
		return time.Since(start)
	}
	var opTime, floorTime time.Duration
	i := 0
	for b.Loop() {
		for k := range 2 {
			if (i+k)%2 == 0 {
				opTime += store()
			} else {
				floorTime += floor()
			}
		}
		i++
	}
	reportPair(b, opTime, floorTime, float64(queries), 1, "queries/op")
}

// reportPair reports an operation's time and round trips beside its
// floor's, per operation.
func reportPair(b *testing.B, opTime, floorTime time.Duration, trips, floorTripsPerOp float64, unit string) {
	n := float64(b.N)
	b.ReportMetric(float64(opTime.Nanoseconds())/n, "ns/op")
	b.ReportMetric(float64(floorTime.Nanoseconds())/n, "floor-ns/op")
	b.ReportMetric(float64(opTime)/float64(floorTime), "ratio")
	b.ReportMetric(trips/n, unit)
	b.ReportMetric(floorTripsPerOp, "floor-"+unit)
}
