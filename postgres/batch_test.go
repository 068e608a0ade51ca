package postgres

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/pgserver"
	"github.com/leasekit/lease/internal/testclock"
	"github.com/leasekit/lease/internal/testkit"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"
)

// TestPostgresBatch_R12: one PutMany statement applies each write as Put
// would, alone: fresh inserts and current versions land, an existing key
// and a stale version conflict, a corrupt row is not overwritten, a
// record the table cannot hold fails alone; GetMany answers per key. It
// runs on keys the joined statement carries and on keys with a newline,
// which go in arrays.
func TestPostgresBatch_R12(t *testing.T) {
	for _, prefix := range []string{"", "two\nlines/"} {
		t.Run(fmt.Sprintf("prefix=%q", prefix), func(t *testing.T) {
			testPostgresBatch(t, newTestPostgresDriver(t), prefix)
		})
	}
}

func testPostgresBatch(t *testing.T, d *postgresDriver, prefix string) {
	rec := func(key string, epoch uint64) lease.Record {
		return lease.Record{Key: prefix + key, Owner: "o", Epoch: epoch, ExpiresAt: t0}
	}
	for _, k := range []string{"held", "stale", "corrupt"} {
		if _, err := d.Put(ctxBG, rec(k, 1), lease.Precondition{Absent: true}); err != nil {
			t.Fatal(err)
		}
	}
	pgExec(t, `ALTER TABLE `+d.table+` DROP CONSTRAINT `+d.table+`_owner_check`,
		`UPDATE `+d.table+` SET owner = 'has space' WHERE key = `+pgQuote(prefix+"corrupt"))
	corruptBefore := pgRow(t, d.table, prefix+"corrupt")
	ws := []lease.Write{
		{Rec: rec("new", 1), Pre: lease.Precondition{Absent: true}},
		{Rec: rec("held", 2), Pre: lease.Precondition{Absent: true}},
		{Rec: rec("held", 2), Pre: lease.Precondition{Version: 1}},
		{Rec: rec("stale", 2), Pre: lease.Precondition{Version: 7}},
		{Rec: rec("corrupt", 2), Pre: lease.Precondition{Version: 1}},
		{Rec: lease.Record{Key: prefix + "bad", Owner: "o", Epoch: 0, ExpiresAt: t0}, Pre: lease.Precondition{Absent: true}},
		{Rec: rec("new2", 1), Pre: lease.Precondition{Absent: true}},
	}
	ws[2].Rec.Key = prefix + "held2" // one key per batch; "held2" does not exist: conflict
	results, err := d.PutMany(ctxBG, ws)
	if err != nil {
		t.Fatalf("PutMany: %v", err)
	}
	want := []struct {
		version  uint64
		conflict bool
	}{{1, false}, {0, true}, {0, true}, {0, true}, {0, true}, {0, false}, {1, false}}
	for i, w := range want {
		r := results[i]
		if r.Version != w.version || errors.Is(r.Err, lease.ErrConflict) != w.conflict || (w.version == 0 && r.Err == nil) {
			t.Errorf("write %d (%s): %+v; want version %d, conflict %v", i, ws[i].Rec.Key, r, w.version, w.conflict)
		}
	}
	if after := pgRow(t, d.table, prefix+"corrupt"); after != corruptBefore {
		t.Errorf("corrupt row changed: %s -> %s", corruptBefore, after)
	}
	var keys []string
	for _, k := range []string{"new", "missing", "corrupt", "held", "new"} {
		keys = append(keys, prefix+k)
	}
	got, err := d.GetMany(ctxBG, keys)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Err != nil || got[0].Rec.Key != prefix+"new" || got[0].Version != 1 || got[4] != got[0] ||
		!errors.Is(got[1].Err, lease.ErrNotFound) || !errors.Is(got[2].Err, lease.ErrCorrupt) || got[3].Err != nil || got[3].Rec.Epoch != 1 {
		t.Fatalf("GetMany: %+v", got)
	}

	// Updates at the right versions, across chunks of postgresMaxBatch,
	// with expiries that repeat out of order.
	n := postgresMaxBatch*2 + 17
	ws = ws[:0]
	for i := range n {
		w := lease.Write{Rec: rec(fmt.Sprintf("bulk/%05d", i), 1), Pre: lease.Precondition{Absent: true}}
		w.Rec.ExpiresAt = t0.Add(time.Duration(i%3) * time.Microsecond)
		ws = append(ws, w)
	}
	if results, err = d.PutMany(ctxBG, ws); err != nil {
		t.Fatal(err)
	}
	for i := range ws {
		ws[i].Rec.Epoch, ws[i].Pre = 2, lease.Precondition{Version: results[i].Version}
	}
	ws[5].Rec.Key = ws[4].Rec.Key // a key twice: applied in order, one at a time
	if results, err = d.PutMany(ctxBG, ws); err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if i == 5 {
			if !errors.Is(r.Err, lease.ErrConflict) {
				t.Errorf("second write of %s at a version the first moved: %+v; want ErrConflict", ws[i].Rec.Key, r)
			}
			continue
		}
		if r.Err != nil || r.Version != 2 {
			t.Fatalf("bulk write %d: %+v; want version 2", i, r)
		}
	}
	keys = keys[:0]
	for _, w := range ws {
		keys = append(keys, w.Rec.Key)
	}
	if got, err = d.GetMany(ctxBG, keys); err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		want := ws[i].Rec
		if i == 5 {
			want = ws[4].Rec // its write conflicted
		}
		if r.Err != nil || r.Rec.Key != want.Key || r.Rec.Owner != want.Owner || r.Rec.Epoch != want.Epoch ||
			r.Rec.Released != want.Released || !r.Rec.ExpiresAt.Equal(want.ExpiresAt) {
			t.Fatalf("bulk record %d: %+v, %v; want %+v", i, r.Rec, r.Err, want)
		}
	}
}

// TestPostgresBatchOwners: each write of a batch stores its own owner,
// whether the batch names a few owners (sent once each) or many (sent in
// arrays).
func TestPostgresBatchOwners(t *testing.T) {
	d := newTestPostgresDriver(t)
	for _, owners := range []int{3, maxJoinedOwners + 2} {
		var ws []lease.Write
		for i := range 2 * owners {
			ws = append(ws, lease.Write{
				Rec: lease.Record{Key: fmt.Sprintf("owners%d/%02d", owners, i), Owner: fmt.Sprintf("owner-%d", i%owners), Epoch: 1, ExpiresAt: t0},
				Pre: lease.Precondition{Absent: true}})
		}
		results, err := d.PutMany(ctxBG, ws)
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range ws {
			got, _, err := d.Get(ctxBG, w.Rec.Key)
			if results[i].Err != nil || err != nil || got.Owner != w.Rec.Owner {
				t.Errorf("%d owners: write %d: %+v; stored %+v, %v; want owner %q", owners, i, results[i], got, err, w.Rec.Owner)
			}
		}
	}
}

// TestPostgresListByteOrder_R14: List walks keys in byte order, with a
// prefix as an index range, even in a database whose default collation
// sorts otherwise (ICU en-US: case-insensitive, punctuation last).
func TestPostgresListByteOrder_R14(t *testing.T) {
	db, icu := pgserver.SharedDB(t), false
	name := pgserver.UniqueName("lease_icu")
	if _, err := db.Exec(`CREATE DATABASE ` + name + ` TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'`); err != nil {
		if os.Getenv(pgserver.EnvURL) == "" {
			t.Fatalf("creating a database with ICU collation: %v", err)
		}
		t.Logf("no ICU database on %s (%v): checking in the default database", pgserver.EnvURL, err)
	} else {
		shared := db
		t.Cleanup(func() { shared.Exec(`DROP DATABASE ` + name + ` WITH (FORCE)`) })
		u, _ := url.Parse(pgserver.SharedURL(t))
		u.Path = "/" + name
		cfg, err := pgx.ParseConfig(u.String())
		if err != nil {
			t.Fatal(err)
		}
		db = stdlib.OpenDB(*cfg)
		t.Cleanup(func() { db.Close() })
		icu = true
	}
	d, err := NewDriver(ctxBG, db)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	keys := []string{"b", "B", "a-b", "a.b", "a/b", "a:b", "a@b", "a_b", "aB", "ab", "a", "A", "_", "-", "9", "z~", "zz"}
	for _, k := range keys {
		if _, err := d.Put(ctxBG, lease.Record{Key: k, Owner: "o", Epoch: 1, ExpiresAt: t0}, lease.Precondition{Absent: true}); err != nil {
			t.Fatal(err)
		}
	}
	var dbOrder []string
	if err := db.QueryRow(`SELECT array_agg(k ORDER BY k)::text[] FROM unnest($1::text[]) AS k`, keys).Scan(pgTextArray(&dbOrder)); err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys) // Go compares strings bytewise
	if icu && slices.Equal(dbOrder, keys) {
		t.Fatalf("the ICU database sorts %q in byte order: the test would not show that List ignores the default collation", keys)
	}
	for _, prefix := range []string{"", "a", "A", "a/", "z", "zz", "q", "é", "\x00"} {
		var want []string
		for _, k := range keys {
			if strings.HasPrefix(k, prefix) {
				want = append(want, k)
			}
		}
		for _, limit := range []int{1, 3, 100} {
			if got := testkit.ListPaged(t, d.(lease.ListDriver), prefix, limit); !slices.Equal(got, want) {
				t.Errorf("List(%q) by %d = %q; want %q", prefix, limit, got, want)
			}
		}
	}
}

// pgTextArray scans a text[] through database/sql.
func pgTextArray(dst *[]string) sql.Scanner {
	return scanFunc(func(src any) error {
		m := pgtype.NewMap()
		s, ok := src.(string)
		if !ok {
			return fmt.Errorf("text[] arrived as %T", src)
		}
		return m.Scan(pgtype.TextArrayOID, pgtype.TextFormatCode, []byte(s), dst)
	})
}

type scanFunc func(src any) error

func (f scanFunc) Scan(src any) error { return f(src) }

// TestPostgresHoldersAndReleaseAll_R13_R14: Holders lists the live
// holders by prefix in byte order through the driver's index range, and
// ReleaseAll frees every key a store holds for a clean takeover.
func TestPostgresHoldersAndReleaseAll_R13_R14(t *testing.T) {
	d := newTestPostgresDriver(t)
	clock := testclock.New()
	a, b := testkit.NewDocStore(t, d, clock, "alice"), testkit.NewDocStore(t, d, clock, "bob")
	for _, k := range []string{"p/b", "p/A", "p/a-1", "q/x"} {
		testkit.MustAcquire(t, a, k)
	}
	testkit.WantErr(t, "Release", b.Release(ctxBG, testkit.MustAcquire(t, b, "p/released")), nil)
	clock.Advance(testkit.TTL / 2)
	testkit.MustAcquire(t, b, "p/later")
	clock.Advance(testkit.TTL / 2) // alice's grants expire now; bob's p/later is live
	var got []string
	for rec, err := range b.Holders(ctxBG, "p/") {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rec.Key+"="+rec.Owner)
	}
	if want := []string{"p/later=bob"}; !slices.Equal(got, want) {
		t.Fatalf("Holders(p/) after alice's expiry = %q; want %q", got, want)
	}
	clock.Set(testclock.New().Now())
	got = got[:0]
	for rec, err := range b.Holders(ctxBG, "") {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rec.Key)
	}
	if want := []string{"p/A", "p/a-1", "p/b", "p/later", "q/x"}; !slices.Equal(got, want) {
		t.Fatalf("Holders(\"\") = %q; want %q, in byte order", got, want)
	}
	testkit.WantErr(t, "ReleaseAll", a.ReleaseAll(ctxBG), nil)
	for _, k := range []string{"p/b", "p/A", "p/a-1", "q/x"} {
		if g := testkit.MustAcquire(t, b, k); g.Epoch != 2 || g.PreviousUnclean {
			t.Fatalf("acquire of %s after ReleaseAll = %+v; want a clean epoch 2", k, g)
		}
	}
}

// TestPostgresPutManyPlanStaysLinear: on a fresh table that has never been
// analyzed (day one), the plan PostgreSQL runs for a PutMany statement
// visits no node more often than the statement has writes, for inserts
// and for updates. A guard whose estimate says "one row of the table" once
// made the planner loop over the whole batch for every row of the table:
// a second per 2,500 inserts on a table of 12,500 rows. The plans are the
// ones the server ran, as auto_explain reports them.
func TestPostgresPutManyPlanStaysLinear(t *testing.T) {
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var plans []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		plans = append(plans, n.Message)
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1) // one session, with auto_explain loaded
	for _, q := range []string{`LOAD 'auto_explain'`, `SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_analyze = on`, `SET auto_explain.log_format = json`, `SET client_min_messages = log`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v (the test needs a superuser: the server the tests start)", q, err)
		}
	}
	table := pgserver.FreshTable(t)
	drv, err := NewDriver(ctxBG, db, Table(table))
	if err != nil {
		t.Fatal(err)
	}
	d := drv.(*postgresDriver)
	const n = 1000
	if _, err := db.Exec(`INSERT INTO `+pgx.Identifier{table}.Sanitize()+` (key, owner, epoch, expires, released, version)
		SELECT 'other:' || i, 'o', 1, now(), false, 1 FROM generate_series(1, $1) AS i`, 10*n); err != nil {
		t.Fatal(err)
	}
	ws := make([]lease.Write, n)
	for i := range ws {
		ws[i] = lease.Write{Rec: lease.Record{Key: fmt.Sprintf("k%d", i), Owner: "o", Epoch: 1, ExpiresAt: t0},
			Pre: lease.Precondition{Absent: true}}
	}
	for round := range 3 { // inserts, then updates twice
		mu.Lock()
		plans = nil
		mu.Unlock()
		results, err := d.PutMany(ctxBG, ws)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range results {
			if r.Err != nil {
				t.Fatalf("round %d: write %d: %v", round, i, r.Err)
			}
			ws[i].Pre = lease.Precondition{Version: r.Version}
			ws[i].Rec.Epoch++
		}
		mu.Lock()
		got := slices.Clone(plans)
		mu.Unlock()
		checked := 0
		for _, p := range got {
			if !strings.Contains(p, "unnest") {
				continue
			}
			checked++
			if loops := maxPlanLoops(t, p); loops > n {
				t.Errorf("round %d: a plan node ran %d times for %d writes:\n%s", round, loops, n, p)
			}
		}
		if checked == 0 {
			t.Fatalf("round %d: auto_explain reported no plan of the PutMany statement (got %d notices)", round, len(got))
		}
	}
}

// maxPlanLoops returns the most "Actual Loops" of any node in an
// auto_explain JSON message ("duration: … plan:\n{…}").
func maxPlanLoops(t *testing.T, msg string) int {
	t.Helper()
	i := strings.Index(msg, "{")
	if i < 0 {
		t.Fatalf("no JSON plan in %q", msg)
	}
	var doc struct{ Plan json.RawMessage }
	if err := json.Unmarshal([]byte(msg[i:]), &doc); err != nil {
		t.Fatalf("plan: %v\n%s", err, msg)
	}
	var walk func(raw json.RawMessage) int
	walk = func(raw json.RawMessage) int {
		var node struct {
			Loops int               `json:"Actual Loops"`
			Plans []json.RawMessage `json:"Plans"`
		}
		if err := json.Unmarshal(raw, &node); err != nil {
			t.Fatalf("plan node: %v", err)
		}
		most := node.Loops
		for _, p := range node.Plans {
			most = max(most, walk(p))
		}
		return most
	}
	return walk(doc.Plan)
}

// TestNamesAKeyTwice: a batch naming a key twice is found whether or not
// its keys come in order (PutMany then writes one at a time).
func TestNamesAKeyTwice(t *testing.T) {
	batch := func(keys ...string) []lease.Write {
		ws := make([]lease.Write, len(keys))
		for i, k := range keys {
			ws[i].Rec.Key = k
		}
		return ws
	}
	for _, c := range []struct {
		keys []string
		want bool
	}{
		{nil, false},
		{[]string{"a"}, false},
		{[]string{"a", "b", "c"}, false},
		{[]string{"a", "b", "b", "c"}, true},
		{[]string{"c", "a", "b"}, false},
		{[]string{"a", "c", "b", "a"}, true},
		{[]string{"a", "b", "c", "a"}, true},
	} {
		if got := namesAKeyTwice(batch(c.keys...)); got != c.want {
			t.Errorf("namesAKeyTwice(%q) = %v; want %v", c.keys, got, c.want)
		}
	}
}
