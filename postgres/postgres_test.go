//go:build unix

package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	_ "modernc.org/sqlite"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/pgproxy"
	"github.com/leasekit/lease/internal/pgserver"
	"github.com/leasekit/lease/internal/testclock"
	"github.com/leasekit/lease/internal/testkit"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// See package pgserver for the server the tests use.

// postgresStoreURL is an Open URL for table on the shared server.
func postgresStoreURL(t testing.TB, table string) string {
	u, err := url.Parse(pgserver.SharedURL(t))
	if err != nil {
		t.Fatalf("%s: %v", pgserver.EnvURL, err)
	}
	q := u.Query()
	q.Set("table", table)
	u.RawQuery = q.Encode()
	return u.String()
}

// pgExec runs statements on the shared pool, failing the test on error.
func pgExec(t testing.TB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := pgserver.SharedDB(t).Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// pgRow returns a row of table as text, to see that it did not change.
func pgRow(t testing.TB, table, key string) string {
	t.Helper()
	var row string
	err := pgserver.SharedDB(t).QueryRow(`SELECT row(l.*)::text FROM `+table+` AS l WHERE key = $1`, key).Scan(&row)
	if err != nil {
		t.Fatalf("reading %s %q: %v", table, key, err)
	}
	return row
}

// TestPostgresPut checks the driver's own contract: Absent is an insert,
// a version is a conditional update, a stale one is ErrConflict, nothing
// is written on conflict; the name is "postgres", with cross-process CAS (R11).
func TestPostgresPut(t *testing.T) {
	d := newTestPostgresDriver(t)
	if _, _, err := d.Get(ctxBG, "k"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get of nothing: %v; want ErrNotFound", err)
	}
	r1 := lease.Record{Key: "k", Owner: "a", Epoch: 1, ExpiresAt: t0}
	v1, err := d.Put(ctxBG, r1, lease.Precondition{Absent: true})
	if err != nil || v1 != 1 {
		t.Fatalf("insert: %d, %v", v1, err)
	}
	r2 := lease.Record{Key: "k", Owner: "b", Epoch: 2, ExpiresAt: t0.Add(time.Second + time.Microsecond)}
	if _, err := d.Put(ctxBG, r2, lease.Precondition{Absent: true}); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("second insert: %v; want ErrConflict", err)
	}
	v2, err := d.Put(ctxBG, r2, lease.Precondition{Version: v1})
	if err != nil || v2 != v1+1 {
		t.Fatalf("update: %d, %v", v2, err)
	}
	for _, v := range []uint64{v1, 0, math.MaxInt64, math.MaxUint64} {
		if _, err := d.Put(ctxBG, r1, lease.Precondition{Version: v}); err == nil || errors.Is(err, lease.ErrConflict) != (v != math.MaxInt64) {
			t.Fatalf("update at version %d: %v; want ErrConflict (or a refusal at MaxInt64)", v, err)
		}
	}
	got, v, err := d.Get(ctxBG, "k")
	if err != nil || v != v2 || got != (lease.Record{Key: "k", Owner: "b", Epoch: 2, ExpiresAt: r2.ExpiresAt.UTC()}) {
		t.Fatalf("Get: %+v %d %v; want %+v %d", got, v, err, r2, v2)
	}
	if d.Name() != "postgres" || !lease.DriverHasCrossProcessCAS(d.Name()) {
		t.Fatalf("Name %q: want postgres, with cross-process CAS (R11)", d.Name())
	}
}

// TestPostgresReadableTable: psql shows the table as it is: typed columns,
// the epoch as a number over the whole uint64 range, the expiry as a
// timestamptz to the microsecond (R2).
func TestPostgresReadableTable(t *testing.T) {
	d := newTestPostgresDriver(t)
	exp := time.Date(2026, 3, 1, 12, 0, 30, 123456000, time.UTC)
	epochs := []uint64{1, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64 - 1, math.MaxUint64}
	for i, epoch := range epochs {
		rec := lease.Record{Key: fmt.Sprintf("e%d", i), Owner: "o", Epoch: epoch, ExpiresAt: exp, Released: i%2 == 0}
		if _, err := d.Put(ctxBG, rec, lease.Precondition{Absent: true}); err != nil {
			t.Fatal(err)
		}
		got, v, err := d.Get(ctxBG, rec.Key)
		if err != nil || got != rec || v != 1 {
			t.Fatalf("epoch %d: read back %+v version %d, %v; want %+v", epoch, got, v, err, rec)
		}
		var text, types, expires string
		err = pgserver.SharedDB(t).QueryRow(`SELECT epoch::text, concat_ws(' ', pg_typeof(key), pg_typeof(owner), pg_typeof(epoch),
			pg_typeof(expires), pg_typeof(released), pg_typeof(version)), to_char(expires AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')
			FROM `+d.table+` WHERE key = $1`, rec.Key).Scan(&text, &types, &expires)
		if err != nil || text != fmt.Sprint(epoch) || expires != "2026-03-01 12:00:30.123456" ||
			types != "text text numeric timestamp with time zone boolean bigint" {
			t.Fatalf("epoch %d as SQL sees it: %s (%s) expires %s, %v", epoch, text, types, expires, err)
		}
	}
	s := testkit.NewDocStore(t, d, testclock.New(), "me")
	if _, err := s.Acquire(ctxBG, "e4"); !errors.Is(err, lease.ErrEpochExhausted) {
		t.Fatalf("acquire at MaxUint64: %v; want ErrEpochExhausted", err)
	}
}

// TestPostgresCorruptRows_R10 plants rows no store writes. The table's
// own constraints refuse them in the first place; with the constraints
// dropped (a table edited by hand), every operation refuses them with
// ErrCorrupt and leaves them as they were, and Holders reports them.
func TestPostgresCorruptRows_R10(t *testing.T) {
	d := newTestPostgresDriver(t)
	tbl := d.table
	plants := []struct{ key, values string }{
		{"null-owner", `NULL, 3, now(), true, 2`},
		{"negative-version", `'x', 3, now(), true, -1`},
		{"infinite-expiry", `'x', 3, 'infinity', false, 2`},
		{"epoch-zero", `'x', 0, now(), true, 2`},
		{"epoch-above-uint64", `'x', 18446744073709551616, now(), true, 2`},
		{"null-released", `'x', 3, now(), NULL, 2`},
		{"empty-owner", `'x', 3, now(), true, 2`},
		{"null-epoch", `'x', NULL, now(), true, 2`},
	}
	plants[6].values = `'', 3, now(), true, 2`
	insert := func(key, values string) error {
		_, err := pgserver.SharedDB(t).Exec(fmt.Sprintf(`INSERT INTO %s (key, owner, epoch, expires, released, version) VALUES ($1, %s)`, tbl, values), key)
		return err
	}
	for _, p := range plants {
		if err := insert(p.key, p.values); !isPostgresCode(err, "23502", "23514") {
			t.Errorf("planting %s in a table the driver made: %v; want a NOT NULL or CHECK violation", p.key, err)
		}
	}
	// A hand-edited table without the constraints: the driver still refuses.
	pgExec(t, fmt.Sprintf(`DO $$ DECLARE c text; BEGIN
		FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = '%[1]s'::regclass AND contype = 'c' LOOP
			EXECUTE format('ALTER TABLE %[1]s DROP CONSTRAINT %%I', c);
		END LOOP; END $$`, tbl),
		`ALTER TABLE `+tbl+` ALTER owner DROP NOT NULL, ALTER epoch DROP NOT NULL, ALTER expires DROP NOT NULL,
			ALTER released DROP NOT NULL, ALTER version DROP NOT NULL`)
	s := testkit.NewDocStore(t, d, testclock.New(), "me")
	for _, p := range plants {
		t.Run(p.key, func(t *testing.T) {
			if err := insert(p.key, p.values); err != nil {
				t.Fatal(err)
			}
			before := pgRow(t, tbl, p.key)
			_, err := s.Acquire(ctxBG, p.key)
			if !errors.Is(err, lease.ErrCorrupt) || !errors.Is(err, lease.ErrStorage) {
				t.Errorf("Acquire: %v; want a *StorageError matching ErrCorrupt (R10)", err)
			}
			if _, err := s.Holder(ctxBG, p.key); !errors.Is(err, lease.ErrCorrupt) {
				t.Errorf("Holder: %v; want ErrCorrupt (R10)", err)
			}
			if err := s.Release(ctxBG, lease.Grant{Key: p.key, Owner: "x", Epoch: 3}); !errors.Is(err, lease.ErrCorrupt) {
				t.Errorf("Release: %v; want ErrCorrupt (R10)", err)
			}
			// The guarded UPDATE leaves it even with the right version.
			if _, err := d.Put(ctxBG, lease.Record{Key: p.key, Owner: "me", Epoch: 4, ExpiresAt: t0}, lease.Precondition{Version: 2}); !errors.Is(err, lease.ErrConflict) {
				t.Errorf("Put over it at its version: %v; want ErrConflict", err)
			}
			if after := pgRow(t, tbl, p.key); after != before {
				t.Errorf("row changed: %s -> %s", before, after)
			}
			var errs []error
			for _, err := range s.Holders(ctxBG, p.key) {
				errs = append(errs, err)
			}
			if len(errs) != 1 || !errors.Is(errs[0], lease.ErrCorrupt) {
				t.Errorf("Holders(%q) = %v; want one ErrCorrupt", p.key, errs)
			}
		})
	}
}

// TestPostgresTableChecks: a table of the wrong shape, a view, a key
// compared in another collation and names that are not plain identifiers
// are refused with a clear error, and left as they are.
func TestPostgresTableChecks(t *testing.T) {
	db := pgserver.SharedDB(t)
	wrong := pgserver.FreshTable(t)
	pgExec(t, `CREATE TABLE `+wrong+` (key text PRIMARY KEY, owner text, epoch bigint)`,
		`INSERT INTO `+wrong+` VALUES ('k', 'o', 1)`)
	_, err := NewDriver(ctxBG, db, Table(wrong))
	if err == nil || !strings.Contains(err.Error(), "want (key text PRIMARY KEY, owner text, epoch numeric(20,0)") {
		t.Fatalf("wrong shape: %v; want a refusal naming the columns", err)
	}
	if row := pgRow(t, wrong, "k"); row != "(k,o,1)" {
		t.Fatalf("the refused table changed: %s", row)
	}
	collated := pgserver.FreshTable(t)
	pgExec(t, strings.Replace(fmt.Sprintf(postgresCreateTable, collated), `COLLATE "C" PRIMARY KEY`, `COLLATE "POSIX" PRIMARY KEY`, 1))
	if _, err := NewDriver(ctxBG, db, Table(collated)); err == nil || !strings.Contains(err.Error(), `COLLATE "POSIX"`) {
		t.Fatalf("key in another collation: %v; want a refusal naming it", err)
	}
	view := pgserver.FreshTable(t)
	pgExec(t, `CREATE VIEW `+view+` AS SELECT 1 AS key`)
	t.Cleanup(func() { db.Exec(`DROP VIEW IF EXISTS ` + view) })
	if _, err := NewDriver(ctxBG, db, Table(view)); err == nil || !strings.Contains(err.Error(), "not a table") {
		t.Fatalf("a view: %v; want a refusal", err)
	}
	for _, bad := range []string{"", "Leases", "1x", "a-b", "a.b", `a"b`, strings.Repeat("x", 64), "lé"} {
		if _, err := NewDriver(ctxBG, db, Table(bad)); err == nil || !strings.Contains(err.Error(), "plain identifier") {
			t.Errorf("Table(%q): %v; want a refusal", bad, err)
		}
	}
	if _, err := NewDriver(ctxBG, nil); err == nil {
		t.Error("NewDriver(nil) accepted")
	}
	other, err := sql.Open("sqlite", ":memory:") // a real pool of another driver (modernc.org/sqlite, imported by this test only)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := NewDriver(ctxBG, other); err == nil || !strings.Contains(err.Error(), "pgx") {
		t.Errorf("a pool of another driver: %v; want a refusal naming pgx", err)
	}
}

// TestPostgresConcurrentCreate: 8 pools create the same missing table at
// the same instant; every driver comes up, on one table.
func TestPostgresConcurrentCreate(t *testing.T) {
	table := pgserver.FreshTable(t)
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	start := make(chan struct{})
	for i := range errs {
		db := stdlib.OpenDB(*cfg)
		t.Cleanup(func() { db.Close() })
		if err := db.Ping(); err != nil { // connect first, so that the creates race
			t.Fatal(err)
		}
		wg.Go(func() {
			<-start
			var d lease.Driver
			if d, errs[i] = NewDriver(ctxBG, db, Table(table)); errs[i] == nil {
				_, errs[i] = d.Put(ctxBG, lease.Record{Key: fmt.Sprint(i), Owner: "o", Epoch: 1, ExpiresAt: t0}, lease.Precondition{Absent: true})
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent creation: %v", err)
	}
	var n int
	if err := pgserver.SharedDB(t).QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil || n != 8 {
		t.Fatalf("rows: %d, %v; want 8", n, err)
	}
}

// TestPostgresDurabilitySettings: the driver refuses sessions that could
// return a grant before it is durable (R2), on a live connection and by
// the rule itself.
func TestPostgresDurabilitySettings(t *testing.T) {
	u, _ := url.Parse(pgserver.SharedURL(t))
	q := u.Query()
	q.Set("options", "-c synchronous_commit=off")
	u.RawQuery = q.Encode()
	if _, err := Open(ctxBG, u.String(), Table(pgserver.FreshTable(t))); err == nil || !strings.Contains(err.Error(), "synchronous_commit is off") {
		t.Fatalf("Open with synchronous_commit=off: %v; want a refusal", err)
	}
	cases := []struct {
		commit, standbys, fsync string
		recovery                bool
		ok                      bool
	}{
		{"on", "", "on", false, true},
		{"local", "", "on", false, true}, // no synchronous standby: the same as on
		{"remote_write", "", "on", false, true},
		{"on", "standby1", "on", false, true},
		{"remote_apply", "FIRST 1 (a, b)", "on", false, true},
		{"off", "", "on", false, false},
		{"local", "standby1", "on", false, false},
		{"remote_write", "standby1", "on", false, false},
		{"on", "", "off", false, false},
		{"on", "", "on", true, false},
	}
	for _, c := range cases {
		if err := postgresDurable(c.commit, c.standbys, c.fsync, c.recovery); (err == nil) != c.ok {
			t.Errorf("synchronous_commit=%s synchronous_standby_names=%q fsync=%s recovery=%v: %v; want ok=%v",
				c.commit, c.standbys, c.fsync, c.recovery, err, c.ok)
		}
	}
}

// TestPostgresOpen opens stores from postgres:// and postgresql:// URLs:
// the table from ?table= (not sent to the server, which would refuse an
// unknown parameter), the rest of the URL pgx's own, and Close closes the
// pool Open made.
func TestPostgresOpen(t *testing.T) {
	table := pgserver.FreshTable(t)
	for i, scheme := range []string{"postgres", "postgresql"} {
		_, rest, _ := strings.Cut(postgresStoreURL(t, table), "://")
		s, err := lease.Open(ctxBG, scheme+"://"+rest+"&application_name=opened", lease.WithOwner("opened"))
		if err != nil {
			t.Fatalf("Open(%s://...): %v", scheme, err)
		}
		g, err := s.Acquire(ctxBG, fmt.Sprintf("opened/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if row := pgRow(t, table, g.Key); !strings.HasPrefix(row, fmt.Sprintf("(opened/%d,opened,1,", i)) {
			t.Fatalf("row in %s: %s", table, row)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// The driver lease.Open got (and closes with the store) owns its pool.
		d, err := openURL(ctxBG, scheme+"://"+rest)
		if err != nil {
			t.Fatal(err)
		}
		pd := d.(*postgresDriver)
		if pd.table != table {
			t.Fatalf("openURL's table = %q; want %q from the URL", pd.table, table)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if err := pd.db.Ping(); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("openURL's pool after Close: %v; want closed", err)
		}
	}
	for _, bad := range []string{"postgres://h/db?table=Bad", "postgres://h/db?table=a&table=b", "postgres://%zz"} {
		if _, err := lease.Open(ctxBG, bad); err == nil {
			t.Errorf("Open(%q) accepted", bad)
		}
	}
	if _, err := lease.Open(ctxBG, "postgres://u:secret@127.0.0.1:1/db?connect_timeout=1"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("Open of a closed port: %v; want an error without the password", err)
	}
}

// TestPostgresCloseKeepsCallersPool: closing a driver made on the
// caller's pool leaves the pool open; later calls fail with ErrClosed.
func TestPostgresCloseKeepsCallersPool(t *testing.T) {
	d := newTestPostgresDriver(t)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Get(ctxBG, "k"); !errors.Is(err, lease.ErrClosed) {
		t.Fatalf("Get after Close: %v; want ErrClosed", err)
	}
	if _, err := d.Put(ctxBG, lease.Record{Key: "k", Owner: "a", Epoch: 1}, lease.Precondition{Absent: true}); !errors.Is(err, lease.ErrClosed) {
		t.Fatalf("Put after Close: %v; want ErrClosed", err)
	}
	if err := pgserver.SharedDB(t).Ping(); err != nil {
		t.Fatalf("the caller's pool after driver Close: %v", err)
	}
}

// TestPostgresCancelledContext: a cancelled ctx stops every call and
// writes nothing.
func TestPostgresCancelledContext(t *testing.T) {
	d := newTestPostgresDriver(t)
	ctx, cancel := context.WithCancel(ctxBG)
	cancel()
	if _, _, err := d.Get(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get: %v; want context.Canceled", err)
	}
	if _, err := d.Put(ctx, lease.Record{Key: "k", Owner: "a", Epoch: 1, ExpiresAt: t0}, lease.Precondition{Absent: true}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put: %v; want context.Canceled", err)
	}
	if _, err := d.PutMany(ctx, []lease.Write{{Rec: lease.Record{Key: "k", Owner: "a", Epoch: 1, ExpiresAt: t0}, Pre: lease.Precondition{Absent: true}}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("PutMany: %v; want context.Canceled", err)
	}
	if _, err := d.GetMany(ctx, []string{"k"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("GetMany: %v; want context.Canceled", err)
	}
	if _, err := d.List(ctx, "", "", 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("List: %v; want context.Canceled", err)
	}
	if _, _, err := d.Get(ctxBG, "k"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("after the cancelled writes: %v; want nothing written", err)
	}
}

// testPostgresDBVia opens a pool to the shared server through proxy p,
// closed when the test ends.
func testPostgresDBVia(t testing.TB, p *pgproxy.Proxy) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host, cfg.Port, cfg.Fallbacks, cfg.TLSConfig = "127.0.0.1", uint16(p.Port()), nil, nil
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return db
}

// pgServerAddr is the shared server's "host:port", for a proxy.
func pgServerAddr(t testing.TB) string {
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}

// TestPostgresAmbiguousWrites_R9 drops the reply to a write the server
// committed, for acquire, renew and release: the store re-reads and
// returns what it got. A write cut before it reached the server is a
// *StorageError that is safe to retry. A batch whose reply is lost
// settles per key on a re-read.
func TestPostgresAmbiguousWrites_R9(t *testing.T) {
	p := pgproxy.New(t, pgServerAddr(t))
	d, err := NewDriver(ctxBG, testPostgresDBVia(t, p), Table(pgserver.FreshTable(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	now := t0
	clock := func() time.Time { return now }
	s, _ := lease.NewDocumentStore(d, lease.WithOwner("me"), lease.WithClock(clock), lease.WithTTL(time.Minute))
	other, _ := lease.NewDocumentStore(d, lease.WithOwner("other"), lease.WithClock(clock))
	const insert, update = "INSERT INTO", "UPDATE"

	t.Run("acquire", func(t *testing.T) {
		hit := p.DropReply(insert)
		g, err := s.Acquire(ctxBG, "a")
		testkit.RequireHit(t, hit)
		if err != nil || g.Epoch != 1 || g.Owner != "me" {
			t.Fatalf("acquire with its reply dropped: %+v, %v; want epoch 1 (R9)", g, err)
		}
		if _, err := other.Acquire(ctxBG, "a"); !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("another owner after the dropped reply: %v; want ErrHeld", err)
		}
		if _, err := s.Renew(ctxBG, g); err != nil {
			t.Fatalf("renew of the grant: %v", err)
		}
	})

	t.Run("acquire cut before the server", func(t *testing.T) {
		hit := p.Cut(insert)
		g, err := s.Acquire(ctxBG, "b")
		testkit.RequireHit(t, hit)
		if !errors.Is(err, lease.ErrStorage) {
			t.Fatalf("acquire whose write never arrived: %+v, %v; want a *StorageError (R9)", g, err)
		}
		if g, err = s.Acquire(ctxBG, "b"); err != nil || g.Epoch != 1 { // safe to retry
			t.Fatalf("acquire after the cut: %+v, %v; want epoch 1", g, err)
		}
	})

	t.Run("renew", func(t *testing.T) {
		g := testkit.MustAcquire(t, s, "c")
		now = now.Add(10 * time.Second)
		hit := p.DropReply(update)
		g2, err := s.Renew(ctxBG, g)
		testkit.RequireHit(t, hit)
		if want := now.Add(time.Minute); err != nil || g2.Epoch != g.Epoch || !g2.ExpiresAt.Equal(want) {
			t.Fatalf("renew with its reply dropped: %+v, %v; want expiry %v (R9)", g2, err, want)
		}
		if rec, err := other.Holder(ctxBG, "c"); err != nil || !rec.ExpiresAt.Equal(g2.ExpiresAt) {
			t.Fatalf("holder after renew: %+v, %v", rec, err)
		}
	})

	t.Run("renew cut before the server", func(t *testing.T) {
		g := testkit.MustAcquire(t, s, "c2")
		now = now.Add(time.Second) // else the renewed record would equal the old one
		hit := p.Cut(update)
		_, err := s.Renew(ctxBG, g)
		testkit.RequireHit(t, hit)
		if !errors.Is(err, lease.ErrStorage) || errors.Is(err, lease.ErrLost) {
			t.Fatalf("renew whose write never arrived: %v; want a *StorageError, not ErrLost (R9)", err)
		}
		if _, err := s.Renew(ctxBG, g); err != nil {
			t.Fatalf("retried renew: %v", err)
		}
	})

	t.Run("release", func(t *testing.T) {
		g := testkit.MustAcquire(t, s, "d")
		hit := p.DropReply(update)
		err := s.Release(ctxBG, g)
		testkit.RequireHit(t, hit)
		if err != nil {
			t.Fatalf("release with its reply dropped: %v; want nil (R9)", err)
		}
		if rec, _, err := d.Get(ctxBG, "d"); err != nil || !rec.Released || rec.Epoch != g.Epoch {
			t.Fatalf("record after release: %+v, %v; want released, epoch %d", rec, err, g.Epoch)
		}
		if g2, err := other.Acquire(ctxBG, "d"); err != nil || g2.Epoch != g.Epoch+1 || g2.PreviousUnclean {
			t.Fatalf("acquire after release: %+v, %v; want clean epoch %d", g2, err, g.Epoch+1)
		}
	})

	t.Run("release cut before the server", func(t *testing.T) {
		g := testkit.MustAcquire(t, s, "e")
		hit := p.Cut(update)
		err := s.Release(ctxBG, g)
		testkit.RequireHit(t, hit)
		if !errors.Is(err, lease.ErrStorage) {
			t.Fatalf("release whose write never arrived: %v; want ErrStorage (R7, R9)", err)
		}
		if rec, _, err := d.Get(ctxBG, "e"); err != nil || rec.Released {
			t.Fatalf("record after the cut release: %+v, %v; want still held", rec, err)
		}
		if err := s.Release(ctxBG, g); err != nil { // the store kept the grant (R7)
			t.Fatalf("retried release: %v", err)
		}
	})

	t.Run("batch", func(t *testing.T) {
		bd := d.(*postgresDriver)
		ws := []lease.Write{
			{Rec: lease.Record{Key: "m1", Owner: "me", Epoch: 1, ExpiresAt: t0}, Pre: lease.Precondition{Absent: true}},
			{Rec: lease.Record{Key: "a", Owner: "me", Epoch: 9, ExpiresAt: t0}, Pre: lease.Precondition{Absent: true}},
		}
		hit := p.DropReply("WITH w AS")
		_, err := bd.PutMany(ctxBG, ws)
		testkit.RequireHit(t, hit)
		if err == nil {
			t.Fatal("PutMany with its reply dropped returned results")
		}
		got, err := bd.GetMany(ctxBG, []string{"m1", "a"})
		if err != nil || got[0].Err != nil || got[0].Rec.Owner != "me" || got[1].Rec.Epoch != 1 {
			t.Fatalf("the re-read after the lost batch: %+v, %v; want m1 written and a unchanged", got, err)
		}
	})
}

// TestSplitPostgresURL: Open takes the table from ?table= and the pool's
// bound from ?max_conns=, and passes the rest of the URL on unchanged in
// meaning: multi-host lists, escaped passwords, Unix socket directories.
func TestSplitPostgresURL(t *testing.T) {
	cases := []struct {
		in, conn string
		opts     urlOptions
	}{
		{"postgres://h/db", "postgres://h/db", urlOptions{}},                             // no table: DefaultTable, or a Table option
		{"host=h dbname=db table=x", "host=h dbname=db table=x", urlOptions{}},           // a key=value string goes to pgx as it is
		{"postgres://h/db?max_conns=3", "postgres://h/db", urlOptions{maxConns: 3}},      // the pool's bound, not a server parameter
		{"postgres://h/db?table=t&max_conns=40", "postgres://h/db", urlOptions{"t", 40}}, // both
		{"postgres://u:p%40ss@a:5432,b:5433/db?target_session_attrs=read-write&table=locks&sslmode=disable",
			"postgres://u:p%40ss@a:5432,b:5433/db?sslmode=disable&target_session_attrs=read-write", urlOptions{table: "locks"}},
		{"postgresql:///db?host=/run/postgresql&table=t", "postgresql:///db?host=%2Frun%2Fpostgresql", urlOptions{table: "t"}},
	}
	for _, c := range cases {
		conn, opts, err := splitPostgresURL(c.in)
		if err != nil || conn != c.conn || opts != c.opts {
			t.Errorf("splitPostgresURL(%q) = %q, %+v, %v; want %q, %+v", c.in, conn, opts, err, c.conn, c.opts)
		}
		if _, err := pgx.ParseConfig(conn); err != nil {
			t.Errorf("pgx cannot parse %q: %v", conn, err)
		}
	}
	for _, bad := range []string{"postgres://u:secret@h/db?table=a&table=b", "postgres://u:secret@h/db?max_conns=0",
		"postgres://u:secret@h/db?max_conns=ten", "postgres://u:secret@h/db?max_conns=", "postgres://u:secret@h/db?max_conns=1&max_conns=2",
		"postgres://u@h/db?password=secret&max_conns=0", "postgres://u@h/db?table=a&sslpassword=secret&table=b"} {
		_, _, err := splitPostgresURL(bad)
		if err == nil || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "\n") {
			t.Errorf("splitPostgresURL(%q): %v; want a one-line error without the password", bad, err)
		}
	}
}
