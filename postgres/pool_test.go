//go:build unix

package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/pgserver"
	"github.com/leasekit/lease/internal/testkit"
)

// TestPostgresOpenURLParameters: postgres.Open itself (not only
// lease.Open) takes ?table= and ?max_conns= from the URL without sending
// them to the server, which would refuse them ("unrecognized configuration
// parameter"); options win over the URL; the pool is bounded by default.
func TestPostgresOpenURLParameters(t *testing.T) {
	table := pgserver.FreshTable(t)
	open := func(url string, opts ...Option) *postgresDriver {
		t.Helper()
		d, err := Open(ctxBG, url, opts...)
		if err != nil {
			t.Fatalf("Open(%s): %v", url, err)
		}
		t.Cleanup(func() { d.Close() })
		return d.(*postgresDriver)
	}
	base := postgresStoreURL(t, table)
	cases := []struct {
		url        string
		opts       []Option
		table      string
		connBounds int
	}{
		{base, nil, table, DefaultMaxConns},
		{base + "&max_conns=3", nil, table, 3},
		{base + "&max_conns=3", []Option{MaxConns(7), Table("other_" + table)}, "other_" + table, 7},
	}
	for _, c := range cases {
		d := open(c.url, c.opts...)
		if got := d.db.Stats().MaxOpenConnections; d.table != c.table || got != c.connBounds {
			t.Errorf("Open(%s): table %q, at most %d connections; want %q, %d", c.url, d.table, got, c.table, c.connBounds)
		}
		if _, err := d.Put(ctxBG, lease.Record{Key: fmt.Sprint(c.connBounds), Owner: "o", Epoch: 1, ExpiresAt: t0},
			lease.Precondition{Absent: true}); err != nil {
			t.Fatalf("Put through Open(%s): %v", c.url, err)
		}
	}
	if n := pgCount(t, pgserver.SharedDB(t), `SELECT count(*) FROM `+table); n != 2 {
		t.Errorf("%d rows in %s; want the 2 written through ?table=", n, table)
	}
	if _, err := Open(ctxBG, base, MaxConns(0)); err == nil || !strings.Contains(err.Error(), "at least 1") {
		t.Errorf("Open with MaxConns(0): %v; want a refusal", err)
	}
	if _, err := NewDriver(ctxBG, pgserver.SharedDB(t), MaxConns(5)); err == nil || !strings.Contains(err.Error(), "SetMaxOpenConns") {
		t.Errorf("NewDriver with MaxConns: %v; want a refusal saying how to size the caller's pool", err)
	}
}

// pgCount runs a count query.
func pgCount(t testing.TB, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(ctxBG, query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestPostgresWeakenedSessionStaysDurable_R2: a session of the caller's
// pool set to synchronous_commit=off after the driver's connect-time
// check does not weaken the driver's writes: each insert, update and
// batch commits with synchronous_commit=on, set for its own transaction
// by the statement itself, and the session keeps its own setting. A
// trigger records the setting in force while each row is written. Both
// of pgx's protocols: the simple one is what PgBouncer needs.
func TestPostgresWeakenedSessionStaysDurable_R2(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) { testWeakenedSession(t, mode) })
	}
}

func testWeakenedSession(t *testing.T, mode pgx.QueryExecMode) {
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1) // one session: the driver writes through the one the test weakens
	table := pgserver.FreshTable(t)
	d, err := NewDriver(ctxBG, db, Table(table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	audit, fn := pgserver.UniqueName("lease_audit"), pgserver.UniqueName("lease_audit_fn")
	pgExec(t, `CREATE TABLE `+audit+` (n serial, op text, key text, sync text)`,
		`CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			INSERT INTO `+audit+` (op, key, sync) VALUES (TG_OP, NEW.key, current_setting('synchronous_commit'));
			RETURN NEW; END $$`,
		`CREATE TRIGGER audit AFTER INSERT OR UPDATE ON `+table+` FOR EACH ROW EXECUTE FUNCTION `+fn+`()`)
	t.Cleanup(func() {
		pgserver.SharedDB(t).Exec(`DROP TABLE IF EXISTS ` + table)
		pgserver.SharedDB(t).Exec(`DROP TABLE IF EXISTS ` + audit)
		pgserver.SharedDB(t).Exec(`DROP FUNCTION IF EXISTS ` + fn)
	})

	if _, err := db.Exec(`SET synchronous_commit = off`); err != nil {
		t.Fatal(err)
	}
	session := func() string {
		var v string
		if err := db.QueryRow(`SELECT current_setting('synchronous_commit')`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := session(); v != "off" {
		t.Fatalf("session synchronous_commit = %s after SET; want off", v)
	}
	// A write of the session's own records what the session says, so the
	// trigger would see a driver write that inherited it.
	if _, err := db.Exec(`INSERT INTO ` + table + ` VALUES ('control', 'o', 1, now(), false, 1)`); err != nil {
		t.Fatal(err)
	}
	rec := func(key string, epoch uint64) lease.Record {
		return lease.Record{Key: key, Owner: "me", Epoch: epoch, ExpiresAt: t0}
	}
	v, err := d.Put(ctxBG, rec("put", 1), lease.Precondition{Absent: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put(ctxBG, rec("put", 2), lease.Precondition{Version: v}); err != nil {
		t.Fatal(err)
	}
	bd := d.(lease.BatchDriver)
	res, err := bd.PutMany(ctxBG, []lease.Write{
		{Rec: rec("batch-new", 1), Pre: lease.Precondition{Absent: true}},
		{Rec: rec("put", 3), Pre: lease.Precondition{Version: v + 1}},
	})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("PutMany: %+v, %v", res, err)
	}

	rows, err := pgserver.SharedDB(t).Query(`SELECT op, key, sync FROM ` + audit + ` ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var op, key, sync string
		if err := rows.Scan(&op, &key, &sync); err != nil {
			t.Fatal(err)
		}
		got = append(got, op+" "+key+" "+sync)
	}
	want := []string{"INSERT control off", "INSERT put on", "UPDATE put on", "INSERT batch-new on", "UPDATE put on"}
	if rows.Err() != nil || strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("synchronous_commit while each row was written: %q, %v; want %q (R2)", got, rows.Err(), want)
	}
	if v := session(); v != "off" {
		t.Fatalf("session synchronous_commit = %s after the driver's writes; want off still (set per transaction only)", v)
	}
}

// manyHoldsObserver counts what the test must see, or must not.
type manyHoldsObserver struct {
	tooMany  atomic.Int64 // storage calls refused with "too many clients" (53300)
	refused  atomic.Int64 // storage calls whose connection was refused (no server)
	lost     atomic.Int64 // leases lost
	gaveUp   atomic.Int64 // waits given up
	firstErr atomic.Value // the first 53300 error, for the log
}

func (o *manyHoldsObserver) Observe(e lease.Event) {
	switch e.Kind {
	case lease.EventStorage:
		if e.Err != nil && isPostgresCode(e.Err, "53300") {
			if o.tooMany.Add(1) == 1 {
				o.firstErr.Store(e.Err.Error())
			}
		}
		if e.Err != nil && errors.Is(e.Err, syscall.ECONNREFUSED) {
			o.refused.Add(1)
		}
	case lease.EventLost:
		o.lost.Add(1)
	case lease.EventWaitGaveUp:
		o.gaveUp.Add(1)
	}
}

// TestPostgresManyHoldsFewConnections_R9: 100 goroutines calling Hold and
// a HoldEach of 2,000 keys at once on a server that allows 20
// connections. With the default pool (10), the server never refuses one.
// With a pool larger than the server allows (50), starting while every
// connection slot is taken, "too many clients" (SQLSTATE 53300) comes back
// from the storage calls as a *StorageError that the loop retries: no
// error reaches a caller, every key ends held, no lease is lost. So do
// connections refused while the server is down: the Holds wait for it.
func TestPostgresManyHoldsFewConnections_R9(t *testing.T) {
	const maxConnections = 20
	srv := pgserver.Start(t, fmt.Sprintf("max_connections=%d", maxConnections))
	admin := pgConnect(t, srv)
	var setting string
	if err := admin.QueryRow(ctxBG, `SHOW max_connections`).Scan(&setting); err != nil || setting != fmt.Sprint(maxConnections) {
		t.Fatalf("max_connections = %s, %v; want %d", setting, err, maxConnections)
	}
	admin.Close(ctxBG)

	t.Run("default pool", func(t *testing.T) {
		d, s, obs := openManyHoldsStore(t, srv, "default_pool")
		if got := d.db.Stats().MaxOpenConnections; got != DefaultMaxConns {
			t.Fatalf("the pool opens at most %d connections; want %d by default", got, DefaultMaxConns)
		}
		holdManyAndCheck(t, s, d, obs, nil)
		if n := obs.tooMany.Load(); n != 0 {
			t.Errorf("%d storage calls refused with too many clients (first: %v); want none from a pool of %d on a server of %d",
				n, obs.firstErr.Load(), DefaultMaxConns, maxConnections)
		}
	})

	t.Run("pool larger than the server allows", func(t *testing.T) {
		d, s, obs := openManyHoldsStore(t, srv, "large_pool", MaxConns(50))
		d.db.SetMaxIdleConns(0) // the pool starts empty: every call needs a connection the server must give
		d.db.SetMaxIdleConns(50)
		occupiers := occupyAllConnections(t, srv)
		holdManyAndCheck(t, s, d, obs, func() {
			testkit.WaitFor(t, "3 storage calls refused with too many clients", func() bool { return obs.tooMany.Load() >= 3 })
			// Free 5 slots only: fewer than the pool would open.
			for _, c := range occupiers[:5] {
				c.Close(ctxBG)
			}
		})
		t.Logf("%d storage calls refused with too many clients and retried; first: %v", obs.tooMany.Load(), obs.firstErr.Load())
	})

	t.Run("server refusing connections", func(t *testing.T) {
		d, s, obs := openManyHoldsStore(t, srv, "refused")
		srv.Stop()
		holdManyAndCheck(t, s, d, obs, func() {
			testkit.WaitFor(t, "3 storage calls with their connection refused", func() bool { return obs.refused.Load() >= 3 })
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%d storage calls with their connection refused, retried", obs.refused.Load())
	})
}

// openManyHoldsStore opens a driver with opts on table of srv, and a
// store on it that reports to an observer.
func openManyHoldsStore(t *testing.T, srv *pgserver.Server, table string, opts ...Option) (*postgresDriver, *lease.DocumentStore, *manyHoldsObserver) {
	t.Helper()
	d, err := Open(ctxBG, srv.URL()+"&application_name=lease_many&table="+table, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	obs := &manyHoldsObserver{}
	s, err := lease.NewDocumentStore(d, lease.WithOwner("many-"+table), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return d.(*postgresDriver), s, obs
}

// occupyAllConnections connects to srv until it refuses with too many
// clients and no connection of the lease pool is left; the test closes
// them.
func occupyAllConnections(t *testing.T, srv *pgserver.Server) []*pgx.Conn {
	t.Helper()
	var conns []*pgx.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close(ctxBG)
		}
	})
	for {
		c, err := pgx.Connect(ctxBG, srv.URL())
		if err == nil {
			conns = append(conns, c)
			continue
		}
		if !isPostgresCode(err, "53300") {
			t.Fatalf("connecting to fill the server: %v", err)
		}
		if len(conns) == 0 {
			t.Fatal("the server refused the first connection")
		}
		// The pool's closed connections may still hold slots while their
		// backends exit: fill those too.
		var left int
		if err := conns[0].QueryRow(ctxBG, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'lease_many'`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			return conns
		}
	}
}

// holdManyAndCheck runs 100 Holds and a HoldEach of 2,000 keys at once
// on s, calls during (if not nil) once they started, and checks that no
// error reached a caller, that every key is held by a live Held whose
// grant is the row in the table, and that ReleaseAll frees them all.
func holdManyAndCheck(t *testing.T, s *lease.DocumentStore, d *postgresDriver, obs *manyHoldsObserver, during func()) {
	t.Helper()
	ctx := testkit.Patient(t) // a guard against a hang, not a measure: as long as the test may run
	const holds, each = 100, 2000
	var (
		mu    sync.Mutex
		helds = map[string]*lease.Held{}
		errs  []error
		wg    sync.WaitGroup
	)
	record := func(key string, h *lease.Held, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
			return
		}
		helds[key] = h
	}
	for i := range holds {
		wg.Go(func() {
			key := fmt.Sprintf("hold/%d", i)
			h, err := lease.Hold(ctx, s, key)
			record(key, h, err)
		})
	}
	keys := make([]string, each)
	for i := range keys {
		keys[i] = fmt.Sprintf("each/%d", i)
	}
	wg.Go(func() {
		for r := range lease.HoldEach(ctx, s, keys) {
			record(r.Key, r.Held, r.Err)
		}
	})
	if during != nil {
		during()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("%d errors reached the callers; want none: %.2000v", len(errs), err)
	}
	if len(helds) != holds+each {
		t.Fatalf("%d keys held; want %d", len(helds), holds+each)
	}
	rows, err := d.db.QueryContext(ctx, `SELECT key, owner, epoch::text FROM `+d.table+` WHERE NOT released`)
	if err != nil {
		t.Fatal(err)
	}
	inTable := map[string]string{}
	for rows.Next() {
		var key, owner, epoch string
		if err := rows.Scan(&key, &owner, &epoch); err != nil {
			t.Fatal(err)
		}
		inTable[key] = owner + "@" + epoch
	}
	rows.Close()
	for key, h := range helds {
		g := h.Grant()
		if err := h.Context().Err(); err != nil {
			t.Errorf("%s: its Held ended: %v", key, context.Cause(h.Context()))
		}
		if want := fmt.Sprintf("%s@%d", g.Owner, g.Epoch); inTable[key] != want {
			t.Errorf("%s: the table says %q; want the Held's grant %s", key, inTable[key], want)
		}
	}
	if n, m := obs.lost.Load(), obs.gaveUp.Load(); n != 0 || m != 0 {
		t.Errorf("%d leases lost, %d waits given up; want none", n, m)
	}
	if err := s.ReleaseAll(ctx); err != nil {
		t.Fatalf("ReleaseAll: %v", err)
	}
	live := 0 // by their session (R22, R23): ReleaseAll ended it in one write
	for _, err := range s.Holders(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		live++
	}
	if live != 0 {
		t.Fatalf("%d keys still held after ReleaseAll", live)
	}
}
