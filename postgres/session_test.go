//go:build unix

package postgres

import (
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/pgserver"
	"github.com/leasekit/lease/internal/testclock"
	"github.com/leasekit/lease/internal/testkit"
)

// sid is the test's session id number n.
func sid(n int) string { return fmt.Sprintf("%032x", n) }

// putSession creates a session or fails the test.
func putSession(t *testing.T, d *postgresDriver, id string, exp time.Time, st lease.SessionState) {
	t.Helper()
	if v, err := d.PutSession(ctxBG, lease.SessionRecord{ID: id, Owner: "holder", ExpiresAt: exp, State: st}, lease.Precondition{Absent: true}); err != nil || v != 1 {
		t.Fatalf("PutSession(%s, Absent) = %d, %v", id, v, err)
	}
}

// sessionRow returns session id's row as text, to see that it did not change.
func sessionRow(t *testing.T, d *postgresDriver, id string) string {
	t.Helper()
	var row string
	err := pgserver.SharedDB(t).QueryRow(`SELECT row(x.*)::text FROM `+d.sessions+` AS x WHERE id = $1`, id).Scan(&row)
	if err != nil {
		t.Fatalf("reading session %s: %v", id, err)
	}
	return row
}

// TestPostgresSessions_R18_R24: session records round-trip with their
// owner, expiry (to the microsecond) and state; Absent creates only where
// no record has the id (never an upsert, R18); a version is a
// compare-and-swap, a stale one ErrConflict, and versions increase (R24);
// nothing is written on conflict; bad records are refused before the
// server sees them, and an id no store makes is not found.
func TestPostgresSessions_R18_R24(t *testing.T) {
	d := newTestPostgresDriver(t)
	if !d.Capabilities().Sessions {
		t.Fatal("Capabilities().Sessions is false; want true (R24)")
	}
	id := sid(1)
	for _, missing := range []string{id, "", "nope", strings.ToUpper(sid(2)), "a\x00b"} {
		if _, _, err := d.GetSession(ctxBG, missing); !errors.Is(err, lease.ErrNotFound) {
			t.Fatalf("GetSession(%q) of nothing = %v; want ErrNotFound", missing, err)
		}
	}
	rec := lease.SessionRecord{ID: id, Owner: "node-1", ExpiresAt: t0.Add(1234567 * time.Microsecond), State: lease.SessionLive}
	v1, err := d.PutSession(ctxBG, rec, lease.Precondition{Absent: true})
	if err != nil || v1 != 1 {
		t.Fatalf("create: %d, %v; want version 1", v1, err)
	}
	if got, v, err := d.GetSession(ctxBG, id); err != nil || got != rec || v != v1 {
		t.Fatalf("GetSession = %+v %d %v; want %+v %d", got, v, err, rec, v1)
	}
	before := sessionRow(t, d, id)
	other := lease.SessionRecord{ID: id, Owner: "node-2", ExpiresAt: t0.Add(time.Hour), State: lease.SessionLive}
	if _, err := d.PutSession(ctxBG, other, lease.Precondition{Absent: true}); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("a second create of %s = %v; want ErrConflict (never an upsert, R18)", id, err)
	}
	if after := sessionRow(t, d, id); after != before {
		t.Fatalf("the refused create changed the row: %s -> %s", before, after)
	}

	// Renew, end clean, end unclean: each a compare-and-swap on the last version.
	version := v1
	for i, st := range []lease.SessionState{lease.SessionLive, lease.SessionEndedClean, lease.SessionEndedUnclean} {
		rec.ExpiresAt = rec.ExpiresAt.Add(time.Duration(i+1) * time.Second)
		rec.State = st
		v, err := d.PutSession(ctxBG, rec, lease.Precondition{Version: version})
		if err != nil || v <= version {
			t.Fatalf("write %d (%s) at version %d = %d, %v; want a larger version", i, st, version, v, err)
		}
		if got, gv, err := d.GetSession(ctxBG, id); err != nil || got != rec || gv != v {
			t.Fatalf("GetSession after write %d = %+v %d %v; want %+v %d", i, got, gv, err, rec, v)
		}
		version = v
	}
	before = sessionRow(t, d, id)
	for _, stale := range []uint64{v1, version - 1, version + 1, 0, math.MaxInt64 + 1, math.MaxUint64} {
		if _, err := d.PutSession(ctxBG, other, lease.Precondition{Version: stale}); !errors.Is(err, lease.ErrConflict) {
			t.Errorf("write at stale version %d = %v; want ErrConflict", stale, err)
		}
	}
	missing := lease.SessionRecord{ID: sid(3), Owner: "node-1", ExpiresAt: t0, State: lease.SessionLive}
	if _, err := d.PutSession(ctxBG, missing, lease.Precondition{Version: 1}); !errors.Is(err, lease.ErrConflict) {
		t.Errorf("a version write of a session with no record = %v; want ErrConflict", err)
	}
	if after := sessionRow(t, d, id); after != before {
		t.Fatalf("the refused writes changed the row: %s -> %s", before, after)
	}

	// Records no table can hold: refused, naming the field, nothing written.
	for name, bad := range map[string]lease.SessionRecord{
		"id":     {ID: "ABC", Owner: "o", ExpiresAt: t0, State: lease.SessionLive},
		"owner":  {ID: sid(4), Owner: "a b", ExpiresAt: t0, State: lease.SessionLive},
		"state":  {ID: sid(4), Owner: "o", ExpiresAt: t0},
		"expiry": {ID: sid(4), Owner: "o", ExpiresAt: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC), State: lease.SessionLive},
	} {
		_, err := d.PutSession(ctxBG, bad, lease.Precondition{Absent: true})
		if err == nil || errors.Is(err, lease.ErrConflict) || errors.Is(err, lease.ErrCorrupt) || !strings.Contains(err.Error(), name) {
			t.Errorf("PutSession with a bad %s = %v; want a refusal naming it", name, err)
		}
	}
	if _, err := d.PutSession(ctxBG, rec, lease.Precondition{Version: math.MaxInt64}); err == nil || errors.Is(err, lease.ErrConflict) {
		t.Errorf("a write at version MaxInt64 = %v; want a refusal", err)
	}
	if n := pgCount(t, pgserver.SharedDB(t), `SELECT count(*) FROM `+d.sessions); n != 1 {
		t.Fatalf("the sessions table has %d rows; want 1", n)
	}
}

// TestPostgresRecordSession_R24: every way of writing and reading a key
// keeps its Session exactly: Put (insert and update, to a session and
// back to none), PutMany through both of its statements (text-joined;
// arrays for a batch of more than maxJoinedOwners runs of sessions), with
// sessions and none mixed, Get, GetMany and List. A session of another
// form is refused before the server sees it.
func TestPostgresRecordSession_R24(t *testing.T) {
	d := newTestPostgresDriver(t)
	exp := lease.SessionKeyExpiry
	rec := lease.Record{Key: "k", Owner: "o", Epoch: 1, ExpiresAt: exp, Session: sid(1)}
	v, err := d.Put(ctxBG, rec, lease.Precondition{Absent: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, session := range []string{sid(2), "", sid(1)} {
		rec.Session, rec.Epoch = session, rec.Epoch+1
		if v, err = d.Put(ctxBG, rec, lease.Precondition{Version: v}); err != nil {
			t.Fatalf("update to session %q: %v", session, err)
		}
		if got, gv, err := d.Get(ctxBG, "k"); err != nil || got != rec || gv != v {
			t.Fatalf("Get after the update to %q = %+v %d %v; want %+v %d", session, got, gv, err, rec, v)
		}
	}
	for _, bad := range []string{"x", strings.ToUpper(sid(0xabc)), sid(1) + "0"} {
		r := rec
		r.Session = bad
		if _, err := d.Put(ctxBG, r, lease.Precondition{Version: v}); err == nil || errors.Is(err, lease.ErrConflict) || !strings.Contains(err.Error(), "session") {
			t.Errorf("Put with session %q = %v; want a refusal naming the session", bad, err)
		}
		if res, err := d.PutMany(ctxBG, []lease.Write{{Rec: r, Pre: lease.Precondition{Version: v}}}); err != nil || res[0].Err == nil || errors.Is(res[0].Err, lease.ErrConflict) {
			t.Errorf("PutMany with session %q = %+v, %v; want the write refused", bad, res, err)
		}
	}

	var alternating []string // more runs than putJoined takes
	for i := range maxJoinedOwners + 2 {
		alternating = append(alternating, sid(i+1), "")
	}
	for _, batch := range []struct {
		name, prefix string
		sessions     []string
	}{
		{"joined", "j/", []string{"", sid(1), sid(1), "", sid(2), sid(2), sid(2), "", sid(3)}},
		{"arrays", "a/", alternating},
	} {
		t.Run(batch.name, func(t *testing.T) {
			sessions := batch.sessions
			var ws []lease.Write
			for i, s := range sessions {
				ws = append(ws, lease.Write{Rec: lease.Record{Key: fmt.Sprintf("%s%d", batch.prefix, i), Owner: "o", Epoch: 1,
					ExpiresAt: exp, Session: s}, Pre: lease.Precondition{Absent: true}})
			}
			wantBatch(t, d, ws)
			for i := range ws { // every write an update, each to another session
				ws[i].Rec.Session, ws[i].Rec.Epoch = sessions[(i+4)%len(sessions)], 2
				ws[i].Pre = lease.Precondition{Version: 1}
			}
			wantBatch(t, d, ws)
		})
	}
}

// wantBatch applies ws, all of which must land, and reads every record
// back through Get, GetMany and List exactly as written.
func wantBatch(t *testing.T, d *postgresDriver, ws []lease.Write) {
	t.Helper()
	res, err := d.PutMany(ctxBG, ws)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, len(ws))
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("write %d: %v", i, r.Err)
		}
		keys[i] = ws[i].Rec.Key
	}
	many, err := d.GetMany(ctxBG, keys)
	if err != nil {
		t.Fatal(err)
	}
	prefix := keys[0][:len(keys[0])-1]
	listed, err := d.List(ctxBG, prefix, "", 100)
	if err != nil || len(listed) != len(ws) {
		t.Fatalf("List(%q) = %d records, %v; want %d", prefix, len(listed), err, len(ws))
	}
	byKey := make(map[string]lease.Record)
	for _, r := range listed {
		byKey[r.Key] = r
	}
	for i, w := range ws {
		got, _, err := d.Get(ctxBG, w.Rec.Key)
		if err != nil || got != w.Rec || many[i].Err != nil || many[i].Rec != w.Rec || byKey[w.Rec.Key] != w.Rec {
			t.Fatalf("%q read back as Get %+v (%v), GetMany %+v (%v), List %+v; want %+v",
				w.Rec.Key, got, err, many[i].Rec, many[i].Err, byKey[w.Rec.Key], w.Rec)
		}
	}
}

// TestPostgresRemoveSessions_R22: RemoveSessions deletes only sessions
// that expired before the time given (strictly) and that no key row names
// (released or not), at most limit of them, and says how many; a session
// stops being named when its last key moves to another. Its statement can
// find a session's keys through the partial index on session.
func TestPostgresRemoveSessions_R22(t *testing.T) {
	d := newTestPostgresDriver(t)
	cut := t0
	expired := []string{sid(1), sid(2), sid(3), sid(4), sid(5)}
	for _, id := range expired {
		putSession(t, d, id, cut.Add(-time.Microsecond), lease.SessionEndedClean)
	}
	named, namedReleased, atCut, later := sid(6), sid(7), sid(8), sid(9)
	putSession(t, d, named, cut.Add(-time.Hour), lease.SessionEndedUnclean)
	putSession(t, d, namedReleased, cut.Add(-time.Hour), lease.SessionLive)
	putSession(t, d, atCut, cut, lease.SessionLive)
	putSession(t, d, later, cut.Add(time.Hour), lease.SessionLive)
	keyOf := func(key, session string, released bool) uint64 {
		v, err := d.Put(ctxBG, lease.Record{Key: key, Owner: "o", Epoch: 1, ExpiresAt: lease.SessionKeyExpiry, Session: session,
			Released: released}, lease.Precondition{Absent: true})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	v := keyOf("a", named, false)
	keyOf("b", namedReleased, true)
	keyOf("c", "", false)

	if n, err := d.RemoveSessions(ctxBG, cut, 0); n != 0 || err != nil {
		t.Fatalf("RemoveSessions with limit 0 = %d, %v; want 0", n, err)
	}
	if n, err := d.RemoveSessions(ctxBG, cut, 2); n != 2 || err != nil {
		t.Fatalf("RemoveSessions with limit 2 = %d, %v; want 2", n, err)
	}
	if n, err := d.RemoveSessions(ctxBG, cut, 100); n != 3 || err != nil {
		t.Fatalf("RemoveSessions of the rest = %d, %v; want 3", n, err)
	}
	if n, err := d.RemoveSessions(ctxBG, cut, 100); n != 0 || err != nil {
		t.Fatalf("RemoveSessions again = %d, %v; want 0", n, err)
	}
	for _, id := range expired {
		if _, _, err := d.GetSession(ctxBG, id); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("expired unnamed session %s: %v; want it removed", id, err)
		}
	}
	for _, id := range []string{named, namedReleased, atCut, later} {
		if _, _, err := d.GetSession(ctxBG, id); err != nil {
			t.Errorf("session %s: %v; want it kept", id, err)
		}
	}
	// Key a moves to no session: its old session is no longer named.
	if _, err := d.Put(ctxBG, lease.Record{Key: "a", Owner: "o", Epoch: 2, ExpiresAt: t0}, lease.Precondition{Version: v}); err != nil {
		t.Fatal(err)
	}
	if n, err := d.RemoveSessions(ctxBG, cut, 100); n != 1 || err != nil {
		t.Fatalf("RemoveSessions after key a left its session = %d, %v; want 1", n, err)
	}
	if _, _, err := d.GetSession(ctxBG, named); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("session %s once no key names it: %v; want it removed", named, err)
	}
	if _, err := d.RemoveSessions(ctxBG, time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC), 1); err == nil {
		t.Fatal("RemoveSessions before a time PostgreSQL cannot hold succeeded")
	}

	// The plan: with sequential scans priced out, the key check is an
	// index scan of the partial index, so that a table of many keys is
	// not read once per expired session.
	plan := explainWithoutSeqScans(t, d.removeSessions, cut, 10)
	if !strings.Contains(plan, d.table+"_session_idx") {
		t.Fatalf("RemoveSessions' plan does not use the index on session:\n%s", plan)
	}
}

// explainWithoutSeqScans is the plan of query with args, on a connection
// whose enable_seqscan is off.
func explainWithoutSeqScans(t *testing.T, query string, args ...any) string {
	t.Helper()
	conn, err := pgserver.SharedDB(t).Conn(ctxBG)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	defer conn.ExecContext(ctxBG, `RESET enable_seqscan`)
	if _, err := conn.ExecContext(ctxBG, `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.QueryContext(ctxBG, `EXPLAIN `+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// postgresCreateTableBeforeSessions is the lease table as releases before
// sessions made it.
const postgresCreateTableBeforeSessions = `CREATE TABLE IF NOT EXISTS %[1]s (
	key      text COLLATE "C" PRIMARY KEY,
	owner    text COLLATE "C" NOT NULL CHECK (octet_length(owner) BETWEEN 1 AND 256 AND owner !~ '[^!-~]'),
	epoch    numeric(20,0) NOT NULL CHECK (epoch BETWEEN 1 AND 18446744073709551615),
	expires  timestamptz NOT NULL CHECK (isfinite(expires)),
	released boolean NOT NULL,
	version  bigint NOT NULL CHECK (version >= 1)
)`

// TestPostgresUpgradeBeforeSessions: a lease table made before sessions,
// with rows, is upgraded by 8 drivers opening it at the same instant:
// every one comes up; the rows keep their values and versions, with
// no session; the table has the session column, one index on it, and a
// sessions table; the drivers write sessions and keys naming them. A
// table of the current shape whose sessions table and index were dropped
// gets them back.
func TestPostgresUpgradeBeforeSessions(t *testing.T) {
	table := pgserver.FreshTable(t)
	pgExec(t, fmt.Sprintf(postgresCreateTableBeforeSessions, table),
		`INSERT INTO `+table+` VALUES ('held', 'old', 7, '2026-03-01 12:00:30.123456+00', false, 12),
			('gone', 'old', 18446744073709551615, '2026-03-01 12:00:00+00', true, 3)`)
	rowsBefore := []string{pgRow(t, table, "held"), pgRow(t, table, "gone")}

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
		if err := db.Ping(); err != nil { // connect first, so that the upgrades race
			t.Fatal(err)
		}
		wg.Go(func() {
			<-start
			errs[i] = openAndUseSessions(db, table, i)
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent upgrade: %v", err)
	}
	for i, key := range []string{"held", "gone"} {
		if got, want := pgRow(t, table, key), strings.TrimSuffix(rowsBefore[i], ")")+`,"")`; got != want {
			t.Errorf("row %q after the upgrade: %s; want %s (session '')", key, got, want)
		}
	}
	d := newDriverOn(t, pgserver.SharedDB(t), table).(*postgresDriver)
	want := lease.Record{Key: "held", Owner: "old", Epoch: 7, ExpiresAt: time.Date(2026, 3, 1, 12, 0, 30, 123456000, time.UTC)}
	if got, v, err := d.Get(ctxBG, "held"); err != nil || got != want || v != 12 {
		t.Fatalf("Get(held) after the upgrade = %+v %d %v; want %+v 12", got, v, err, want)
	}
	db := pgserver.SharedDB(t)
	if n := pgCount(t, db, `SELECT count(*) FROM `+d.sessions); n != 8 {
		t.Errorf("%d sessions; want 8, one per driver", n)
	}
	if n := pgCount(t, db, `SELECT count(*) FROM `+table+` WHERE session <> ''`); n != 8 {
		t.Errorf("%d keys name a session; want 8", n)
	}
	if n := sessionIndexes(t, table); n != 1 {
		t.Errorf("%d indexes on session; want 1", n)
	}

	// Missing parts of a table of the current shape come back.
	pgExec(t, `DROP TABLE `+d.sessions, `DROP INDEX `+table+`_session_idx`)
	d = newDriverOn(t, db, table).(*postgresDriver)
	if n := sessionIndexes(t, table); n != 1 {
		t.Errorf("%d indexes on session after a reopen; want 1", n)
	}
	putSession(t, d, sid(100), t0, lease.SessionLive)
}

// openAndUseSessions opens a driver on table of db and writes session i
// and a key naming it.
func openAndUseSessions(db *sql.DB, table string, i int) error {
	d, err := NewDriver(ctxBG, db, Table(table))
	if err != nil {
		return err
	}
	defer d.Close()
	sd := d.(lease.SessionDriver)
	if _, err := sd.PutSession(ctxBG, lease.SessionRecord{ID: sid(i), Owner: "o", ExpiresAt: t0, State: lease.SessionLive},
		lease.Precondition{Absent: true}); err != nil {
		return err
	}
	_, err = d.Put(ctxBG, lease.Record{Key: fmt.Sprint(i), Owner: "o", Epoch: 1, ExpiresAt: lease.SessionKeyExpiry, Session: sid(i)},
		lease.Precondition{Absent: true})
	return err
}

// sessionIndexes counts the indexes of table led by its session column.
func sessionIndexes(t *testing.T, table string) int {
	t.Helper()
	return pgCount(t, pgserver.SharedDB(t), `SELECT count(*) FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE i.indrelid = '`+table+`'::regclass AND a.attname = 'session'`)
}

// TestPostgresSessionTableChecks: a sessions table of the wrong shape, or
// a view in its place, is refused with an error naming it and both
// shapes, and nothing changes: not it, and not a lease table of the shape
// before sessions beside it, which stays un-upgraded. A lease table's
// name leaves room for its sessions table's: 54 bytes pass, 55 do not.
func TestPostgresSessionTableChecks(t *testing.T) {
	db := pgserver.SharedDB(t)
	table := pgserver.FreshTable(t)
	sessions := sessionsTable(table)
	pgExec(t, fmt.Sprintf(postgresCreateTableBeforeSessions, table),
		`INSERT INTO `+table+` VALUES ('k', 'o', 1, '2026-03-01 12:00:00+00', false, 1)`,
		`CREATE TABLE `+sessions+` (id text PRIMARY KEY, owner text, expires timestamptz, state int, version bigint)`,
		`INSERT INTO `+sessions+` VALUES ('s', 'o', '2026-03-01 12:00:00+00', 1, 1)`)
	leaseRow, sessionsRow := pgRow(t, table, "k"), ""
	if err := db.QueryRow(`SELECT row(x.*)::text FROM ` + sessions + ` AS x`).Scan(&sessionsRow); err != nil {
		t.Fatal(err)
	}
	_, err := NewDriver(ctxBG, db, Table(table))
	wantText := fmt.Sprintf(`sessions table %q has columns (id text PRIMARY KEY, owner text, expires timestamp with time zone, `+
		`state integer, version bigint), want (id text PRIMARY KEY, owner text, expires timestamp with time zone, state smallint, version bigint)`, sessions)
	if err == nil || !strings.Contains(err.Error(), wantText) || strings.Count(err.Error(), "lease:") != 1 {
		t.Fatalf("a wrong sessions table: %v; want a refusal saying %s", err, wantText)
	}
	var row string
	if err := db.QueryRow(`SELECT row(x.*)::text FROM ` + sessions + ` AS x`).Scan(&row); err != nil || row != sessionsRow {
		t.Fatalf("the refused sessions table changed: %s -> %s (%v)", sessionsRow, row, err)
	}
	if got := pgRow(t, table, "k"); got != leaseRow {
		t.Fatalf("the lease table beside it changed: %s -> %s", leaseRow, got)
	}
	if n := pgCount(t, db, `SELECT count(*) FROM pg_attribute WHERE attrelid = '`+table+`'::regclass AND attname = 'session'`); n != 0 {
		t.Fatal("the lease table beside a refused sessions table was upgraded")
	}

	view := pgserver.FreshTable(t)
	pgExec(t, `CREATE VIEW `+sessionsTable(view)+` AS SELECT 1 AS id`)
	t.Cleanup(func() { db.Exec(`DROP VIEW IF EXISTS ` + sessionsTable(view)) })
	if _, err := NewDriver(ctxBG, db, Table(view)); err == nil || !strings.Contains(err.Error(), "sessions table") ||
		!strings.Contains(err.Error(), "not a table") {
		t.Fatalf("a view as the sessions table: %v; want a refusal", err)
	}
	if n := pgCount(t, db, `SELECT count(*) FROM pg_class WHERE oid = to_regclass('`+view+`')`); n != 0 {
		t.Fatal("the lease table was created beside a refused sessions table")
	}

	longest := strings.Repeat("x", 54)
	t.Cleanup(func() { db.Exec(`DROP TABLE IF EXISTS ` + longest + `, ` + sessionsTable(longest)) })
	if _, err := NewDriver(ctxBG, db, Table(longest)); err != nil {
		t.Fatalf("a 54-byte table name: %v", err)
	}
	if _, err := NewDriver(ctxBG, db, Table(longest+"x")); err == nil || !strings.Contains(err.Error(), "at most 54 bytes") {
		t.Fatalf("a 55-byte table name: %v; want a refusal saying at most 54 bytes", err)
	}
}

// dropChecks drops table's CHECK constraints and the NOT NULL of cols,
// as a hand edit might.
func dropChecks(t *testing.T, table string, cols ...string) {
	t.Helper()
	alters := make([]string, len(cols))
	for i, c := range cols {
		alters[i] = `ALTER ` + c + ` DROP NOT NULL`
	}
	pgExec(t, fmt.Sprintf(`DO $$ DECLARE c text; BEGIN
		FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = '%[1]s'::regclass AND contype = 'c' LOOP
			EXECUTE format('ALTER TABLE %[1]s DROP CONSTRAINT %%I', c);
		END LOOP; END $$`, table),
		`ALTER TABLE `+table+` `+strings.Join(alters, ", "))
}

// TestPostgresCorruptSessions_R10: rows no store writes. The tables'
// constraints refuse them; with the constraints dropped, a key row whose
// session is neither empty nor a session id reads as ErrCorrupt naming the
// row (Get, GetMany; List gives a record the store refuses; the store's
// Acquire refuses it), and a session row with a NULL or out-of-range
// column reads as ErrCorrupt naming the session; the guarded UPDATEs
// leave both as they are.
func TestPostgresCorruptSessions_R10(t *testing.T) {
	d := newTestPostgresDriver(t)
	db := pgserver.SharedDB(t)
	keyRow := func(key, session string) error {
		_, err := db.Exec(`INSERT INTO `+d.table+` (key, owner, epoch, expires, released, version, session)
			VALUES ($1, 'x', 3, now(), false, 2, `+session+`)`, key)
		return err
	}
	plantSession := func(id, values string) error {
		_, err := db.Exec(`INSERT INTO `+d.sessions+` (id, owner, expires, state, version) VALUES ($1, `+values+`)`, id)
		return err
	}
	keyPlants := map[string]string{"not-hex": `'xyz'`, "upper-hex": pgQuote(strings.ToUpper(sid(10))), "too-long": pgQuote(sid(1) + "0"), "null": `NULL`}
	sessionPlants := []struct{ name, id, values string }{
		{"null-owner", sid(1), `NULL, now(), 1, 2`}, {"empty-owner", sid(2), `'', now(), 1, 2`},
		{"null-expires", sid(3), `'x', NULL, 1, 2`}, {"infinite-expires", sid(4), `'x', 'infinity', 1, 2`},
		{"state-0", sid(5), `'x', now(), 0, 2`}, {"state-4", sid(6), `'x', now(), 4, 2`},
		{"null-state", sid(7), `'x', now(), NULL, 2`}, {"negative-version", sid(8), `'x', now(), 1, -1`},
		{"null-version", sid(9), `'x', now(), 1, NULL`},
	}
	for key, session := range keyPlants {
		if err := keyRow(key, session); !isPostgresCode(err, "23502", "23514") {
			t.Errorf("planting key %s in a table the driver made: %v; want a NOT NULL or CHECK violation", key, err)
		}
	}
	for _, p := range sessionPlants {
		if err := plantSession(p.id, p.values); !isPostgresCode(err, "23502", "23514") {
			t.Errorf("planting session %s in a table the driver made: %v; want a NOT NULL or CHECK violation", p.name, err)
		}
	}
	dropChecks(t, d.table, "session")
	dropChecks(t, d.sessions, "owner", "expires", "state", "version")
	s := testkit.NewDocStore(t, d, testclock.New(), "me")
	for key, session := range keyPlants {
		t.Run("key "+key, func(t *testing.T) {
			if err := keyRow(key, session); err != nil {
				t.Fatal(err)
			}
			before := pgRow(t, d.table, key)
			want := fmt.Sprintf(`postgres row %q: session is`, key)
			if _, _, err := d.Get(ctxBG, key); !errors.Is(err, lease.ErrCorrupt) || !strings.Contains(err.Error(), want) {
				t.Errorf("Get = %v; want ErrCorrupt saying %s", err, want)
			}
			if res, err := d.GetMany(ctxBG, []string{key}); err != nil || !errors.Is(res[0].Err, lease.ErrCorrupt) {
				t.Errorf("GetMany = %+v, %v; want ErrCorrupt for the key", res, err)
			}
			if recs, err := d.List(ctxBG, key, "", 1); err != nil || len(recs) != 1 || recs[0] != (lease.Record{Key: key}) {
				t.Errorf("List = %+v, %v; want the key alone, which the store refuses", recs, err)
			}
			if _, err := s.Acquire(ctxBG, key); !errors.Is(err, lease.ErrCorrupt) {
				t.Errorf("Acquire = %v; want ErrCorrupt (R10)", err)
			}
			if _, err := d.Put(ctxBG, lease.Record{Key: key, Owner: "me", Epoch: 4, ExpiresAt: t0}, lease.Precondition{Version: 2}); !errors.Is(err, lease.ErrConflict) {
				t.Errorf("Put over it at its version = %v; want ErrConflict", err)
			}
			if after := pgRow(t, d.table, key); after != before {
				t.Errorf("row changed: %s -> %s", before, after)
			}
		})
	}
	for _, p := range sessionPlants {
		id := p.id
		t.Run("session "+p.name, func(t *testing.T) {
			if err := plantSession(id, p.values); err != nil {
				t.Fatal(err)
			}
			before := sessionRow(t, d, id)
			if _, _, err := d.GetSession(ctxBG, id); !errors.Is(err, lease.ErrCorrupt) || !strings.Contains(err.Error(), "session "+id) {
				t.Errorf("GetSession = %v; want ErrCorrupt naming the session", err)
			}
			rec := lease.SessionRecord{ID: id, Owner: "me", ExpiresAt: t0, State: lease.SessionEndedUnclean}
			if _, err := d.PutSession(ctxBG, rec, lease.Precondition{Version: 2}); !errors.Is(err, lease.ErrConflict) {
				t.Errorf("PutSession over it at its version = %v; want ErrConflict", err)
			}
			if after := sessionRow(t, d, id); after != before {
				t.Errorf("row changed: %s -> %s", before, after)
			}
		})
	}
}
