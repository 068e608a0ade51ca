package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
)

// sessID is the n-th session id of a test: 32 lowercase hex digits.
func sessID(n int) string { return fmt.Sprintf("5e55%028x", n) }

// openSessionDriver opens a fresh file as the SQLite SessionDriver, with a
// raw handle on the same file.
func openSessionDriver(t *testing.T) (*sqliteDriver, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leases.db")
	d := openSQLiteAt(t, path).(*sqliteDriver)
	return d, rawSQLite(t, path)
}

func mustPutSession(t *testing.T, d lease.SessionDriver, rec lease.SessionRecord, pre lease.Precondition) uint64 {
	t.Helper()
	v, err := d.PutSession(ctxBG, rec, pre)
	if err != nil {
		t.Fatalf("PutSession(%+v, %+v) = %v", rec, pre, err)
	}
	return v
}

func wantSession(t *testing.T, d lease.SessionDriver, want lease.SessionRecord, wantV uint64) {
	t.Helper()
	got, v, err := d.GetSession(ctxBG, want.ID)
	if err != nil || got != want || v != wantV || got.ExpiresAt.Location() != time.UTC {
		t.Fatalf("GetSession(%s) = %+v v%d, %v; want %+v v%d (UTC)", want.ID, got, v, err, want, wantV)
	}
}

// quoteSession is a lease_sessions row as SQL literals, to see it unchanged.
func quoteSession(t *testing.T, db *sql.DB, id string) string {
	t.Helper()
	var s string
	err := db.QueryRow(`SELECT quote(owner)||','||quote(expires_ms)||','||quote(state)||','||quote(version)
		FROM lease_sessions WHERE id = ?`, id).Scan(&s)
	if err != nil {
		t.Fatalf("reading session %s: %v", id, err)
	}
	return s
}

// TestSQLiteSessionRoundTrip_R18_R24: a session record round-trips with its
// owner, millisecond expiry and every state, also through a new handle;
// the row is typed as the layout says; Absent creates only where no record
// has the id (R18), Version is a compare-and-swap whose versions increase,
// and a failed precondition changes nothing (R24, R2).
func TestSQLiteSessionRoundTrip_R18_R24(t *testing.T) {
	d, db := openSessionDriver(t)
	if !d.Capabilities().Sessions {
		t.Fatal("Capabilities().Sessions is false; want true (R24)")
	}
	exp := time.Date(2026, 11, 30, 12, 0, 10, 123e6, time.UTC)
	rec := lease.SessionRecord{ID: sessID(1), Owner: "web-1", ExpiresAt: exp, State: lease.SessionLive}
	if _, _, err := d.GetSession(ctxBG, rec.ID); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("GetSession before any write = %v; want ErrNotFound", err)
	}
	if v := mustPutSession(t, d, rec, lease.Precondition{Absent: true}); v != 1 {
		t.Fatalf("create = v%d; want v1", v)
	}
	wantSession(t, d, rec, 1)
	var types string
	if err := db.QueryRow(`SELECT typeof(id)||typeof(owner)||typeof(expires_ms)||typeof(state)||typeof(version)
		FROM lease_sessions`).Scan(&types); err != nil || types != "texttextintegerintegerinteger" {
		t.Fatalf("column types = %q, %v; want text text integer integer integer", types, err)
	}
	if got := quoteSession(t, db, rec.ID); got != fmt.Sprintf("'web-1',%d,1,1", exp.UnixMilli()) {
		t.Fatalf("row = %s; want owner, Unix milliseconds, state 1, version 1", got)
	}

	// Absent on an existing id is a conflict, whatever its state: never an upsert.
	other := lease.SessionRecord{ID: rec.ID, Owner: "web-2", ExpiresAt: exp.Add(time.Hour), State: lease.SessionLive}
	_, err := d.PutSession(ctxBG, other, lease.Precondition{Absent: true})
	testkit.WantErr(t, "PutSession Absent on an existing id", err, lease.ErrConflict)
	wantSession(t, d, rec, 1)

	version := uint64(1)
	for i, st := range []lease.SessionState{lease.SessionLive, lease.SessionEndedUnclean, lease.SessionEndedClean} {
		next := rec
		next.ExpiresAt, next.State = exp.Add(time.Duration(i+1)*time.Second), st
		for _, stale := range []uint64{0, version - 1, version + 1, math.MaxInt64 + 1, math.MaxUint64} {
			_, err := d.PutSession(ctxBG, next, lease.Precondition{Version: stale})
			testkit.WantErr(t, fmt.Sprintf("PutSession at stale version %d (stored v%d)", stale, version), err, lease.ErrConflict)
		}
		wantSession(t, d, rec, version)
		v := mustPutSession(t, d, next, lease.Precondition{Version: version})
		if v <= version {
			t.Fatalf("PutSession at v%d = v%d; want a larger version", version, v)
		}
		rec, version = next, v
		wantSession(t, d, rec, version)
	}
	testkit.WantErr(t, "Close", d.Close(), nil)
	wantSession(t, openSQLiteAt(t, d.path).(*sqliteDriver), rec, version)
}

// TestSQLiteRecordSession_R24: each key record's Session is kept exactly
// by Put (insert and update), PutMany, Get, GetMany and List, set and
// cleared, with the far-future expiry a store writes for a
// session-attached key.
func TestSQLiteRecordSession_R24(t *testing.T) {
	d, db := openSessionDriver(t)
	attached := lease.Record{Key: "a", Owner: "web-1", Epoch: 3, ExpiresAt: lease.SessionKeyExpiry, Session: sessID(7)}
	if _, err := d.Put(ctxBG, attached, lease.Precondition{Absent: true}); err != nil {
		t.Fatal(err)
	}
	wantRecord(t, d, attached, 1)
	perKey := attached
	perKey.Session, perKey.ExpiresAt = "", time.UnixMilli(1_800_000_000_000).UTC()
	if _, err := d.Put(ctxBG, perKey, lease.Precondition{Version: 1}); err != nil {
		t.Fatal(err)
	}
	wantRecord(t, d, perKey, 2)
	b := lease.Record{Key: "b", Owner: "web-2", Epoch: 1, ExpiresAt: lease.SessionKeyExpiry, Session: sessID(8), Released: true}
	res, err := d.PutMany(ctxBG, []lease.Write{{Rec: attached, Pre: lease.Precondition{Version: 2}}, {Rec: b, Pre: lease.Precondition{Absent: true}}})
	if err != nil || res[0].Err != nil || res[1].Err != nil || res[0].Version != 3 || res[1].Version != 1 {
		t.Fatalf("PutMany = %+v, %v; want v3 and v1", res, err)
	}
	wantRecord(t, d, attached, 3)
	wantRecord(t, d, b, 1)
	got, err := d.GetMany(ctxBG, []string{"b", "a"})
	if err != nil || got[0] != (lease.GetResult{Rec: b, Version: 1}) || got[1] != (lease.GetResult{Rec: attached, Version: 3}) {
		t.Fatalf("GetMany = %+v, %v", got, err)
	}
	list, err := d.List(ctxBG, "", "", 10)
	if err != nil || len(list) != 2 || list[0] != attached || list[1] != b {
		t.Fatalf("List = %+v, %v; want a and b with their sessions", list, err)
	}
	var session, typ string
	if err := db.QueryRow(`SELECT session, typeof(session) FROM leases WHERE key = 'a'`).Scan(&session, &typ); err != nil ||
		session != sessID(7) || typ != "text" {
		t.Fatalf("stored session = %q (%s), %v; want %q as text", session, typ, err, sessID(7))
	}
}

func wantRecord(t *testing.T, d lease.Driver, want lease.Record, wantV uint64) {
	t.Helper()
	got, v, err := d.Get(ctxBG, want.Key)
	if err != nil || got != want || v != wantV {
		t.Fatalf("Get(%s) = %+v v%d, %v; want %+v v%d", want.Key, got, v, err, want, wantV)
	}
}

// TestSQLiteRemoveSessions_R22: RemoveSessions deletes only sessions
// expired before the given time that no key record names (released or
// not), at most limit of them per call, reports how many, leaves rows it
// cannot parse (R10), and checks the keys through the partial index.
func TestSQLiteRemoveSessions_R22(t *testing.T) {
	d, db := openSessionDriver(t)
	before := time.Date(2026, 11, 30, 12, 0, 0, 500_000, time.UTC) // half a millisecond past 12:00
	put := func(n int, exp time.Time, st lease.SessionState) string {
		mustPutSession(t, d, lease.SessionRecord{ID: sessID(n), Owner: "web-1", ExpiresAt: exp, State: st}, lease.Precondition{Absent: true})
		return sessID(n)
	}
	name := func(key, id string, released bool) {
		rec := lease.Record{Key: key, Owner: "web-1", Epoch: 1, ExpiresAt: lease.SessionKeyExpiry, Session: id, Released: released}
		if _, err := d.Put(ctxBG, rec, lease.Precondition{Absent: true}); err != nil {
			t.Fatal(err)
		}
	}
	gone := []string{
		put(1, before.Add(-time.Hour), lease.SessionEndedClean),
		put(2, before.Add(-time.Minute), lease.SessionEndedUnclean),
		put(3, before.Truncate(time.Millisecond), lease.SessionLive), // 12:00:00.000 is before 12:00:00.0005
	}
	kept := []string{
		put(10, before.Add(-time.Hour), lease.SessionEndedClean),   // named by a held key
		put(11, before.Add(-time.Hour), lease.SessionEndedClean),   // named by a released key
		put(12, before.Add(time.Millisecond), lease.SessionLive),   // not expired before
		put(13, before.Add(-time.Hour), lease.SessionEndedUnclean), // corrupted below
	}
	name("held", kept[0], false)
	name("released", kept[1], true)
	mustExec(t, db, "UPDATE lease_sessions SET state = 0 WHERE id = ?", kept[3])

	var plan []string
	rows, err := db.Query("EXPLAIN QUERY PLAN "+sqliteRemoveSessions, ceilMilli(before), 10)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	rows.Close()
	if !strings.Contains(strings.Join(plan, "; "), "USING COVERING INDEX leases_session") {
		t.Errorf("RemoveSessions' plan %q does not read the index leases_session", plan)
	}

	for _, limit := range []int{0, -1} {
		if n, err := d.RemoveSessions(ctxBG, before, limit); n != 0 || err != nil {
			t.Fatalf("RemoveSessions(limit %d) = %d, %v; want 0", limit, n, err)
		}
	}
	if n, err := d.RemoveSessions(ctxBG, before, 2); n != 2 || err != nil {
		t.Fatalf("RemoveSessions(limit 2) = %d, %v; want 2", n, err)
	}
	if n, err := d.RemoveSessions(ctxBG, before, 2); n != 1 || err != nil {
		t.Fatalf("second RemoveSessions(limit 2) = %d, %v; want the last 1", n, err)
	}
	if n, err := d.RemoveSessions(ctxBG, before, 2); n != 0 || err != nil {
		t.Fatalf("third RemoveSessions = %d, %v; want 0", n, err)
	}
	for _, id := range gone {
		if _, _, err := d.GetSession(ctxBG, id); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("GetSession(%s) after removal = %v; want ErrNotFound", id, err)
		}
	}
	for _, id := range kept {
		var n int
		if err := db.QueryRow("SELECT count(*) FROM lease_sessions WHERE id = ?", id).Scan(&n); err != nil || n != 1 {
			t.Errorf("session %s: %d rows, %v; want it kept", id, n, err)
		}
	}
}

// TestSQLiteSessionClosed: a closed driver refuses the session calls
// with ErrClosed.
func TestSQLiteSessionClosed(t *testing.T) {
	d, _ := openSessionDriver(t)
	testkit.WantErr(t, "Close", d.Close(), nil)
	_, _, err := d.GetSession(ctxBG, sessID(1))
	testkit.WantErr(t, "GetSession", err, lease.ErrClosed)
	_, err = d.PutSession(ctxBG, lease.SessionRecord{ID: sessID(1), Owner: "a", State: lease.SessionLive}, lease.Precondition{Absent: true})
	testkit.WantErr(t, "PutSession", err, lease.ErrClosed)
	_, err = d.RemoveSessions(ctxBG, time.Now(), 1)
	testkit.WantErr(t, "RemoveSessions", err, lease.ErrClosed)
}

// TestSQLiteCorruptSessionRows_R10: a session row this driver would not
// write (a bad state, a non-integer, a bad owner or id) is ErrCorrupt from
// GetSession, naming the session, on one line; a compare-and-swap on its
// version is a conflict and RemoveSessions leaves it: the row stays
// exactly as it was.
func TestSQLiteCorruptSessionRows_R10(t *testing.T) {
	d, db := openSessionDriver(t)
	cases := []struct{ set, why string }{
		{"state = 0", "state is 0"},
		{"state = 4", "state is 4"},
		{"state = 257", "state is 257"}, // 1 as a byte: not taken as live
		{"state = -1", "state is -1"},
		{"state = 'live'", `state is the text "live"`},
		{"state = 1.5", "state is the real 1.5"},
		{"state = x'01'", "state is a 1-byte blob"},
		{"owner = ''", `owner ""`},
		{"owner = 'a b'", `owner "a b"`},
		{"owner = x'61'", "owner is a 1-byte blob"},
		{"expires_ms = 'soon'", `expires_ms is the text "soon"`},
		{"expires_ms = 1.5", "expires_ms is the real 1.5"},
		{"version = 0", "version is 0"},
		{"version = 'x'", `version is the text "x"`},
		{"id = upper(id)", "not a lowercase hex digit"},
	}
	for i, tc := range cases {
		t.Run(tc.set, func(t *testing.T) {
			rec := lease.SessionRecord{ID: sessID(100 + i), Owner: "web-1", ExpiresAt: time.UnixMilli(1000).UTC(), State: lease.SessionLive}
			mustPutSession(t, d, rec, lease.Precondition{Absent: true})
			mustExec(t, db, "UPDATE lease_sessions SET "+tc.set+" WHERE id = ?", rec.ID)
			if strings.HasPrefix(tc.set, "id =") {
				rec.ID = strings.ToUpper(rec.ID)
			}
			before := quoteSession(t, db, rec.ID)
			_, _, err := d.GetSession(ctxBG, rec.ID)
			testkit.WantErr(t, "GetSession", err, lease.ErrCorrupt)
			if msg := err.Error(); !strings.Contains(msg, rec.ID) || !strings.Contains(msg, tc.why) || !isOneLine(err) ||
				strings.Count(msg, "lease:") != 1 {
				t.Fatalf("GetSession = %v; want one line naming session %s and saying %q", err, rec.ID, tc.why)
			}
			renewed := rec
			renewed.ExpiresAt = rec.ExpiresAt.Add(time.Hour)
			_, err = d.PutSession(ctxBG, renewed, lease.Precondition{Version: 1})
			testkit.WantErr(t, "PutSession on the corrupt row", err, lease.ErrConflict)
			if n, err := d.RemoveSessions(ctxBG, time.Now(), 100); n != 0 || err != nil {
				t.Fatalf("RemoveSessions = %d, %v; want the corrupt row left", n, err)
			}
			if after := quoteSession(t, db, rec.ID); after != before {
				t.Fatalf("row changed from %s to %s", before, after)
			}
		})
	}
}

// TestSQLiteCorruptSessionColumn_R10: a key row whose session is not text,
// or neither ” nor a session id, is ErrCorrupt naming the key from Get,
// GetMany and List; the guarded update does not overwrite it.
func TestSQLiteCorruptSessionColumn_R10(t *testing.T) {
	d, db := openSessionDriver(t)
	for _, set := range []string{"'xyz'", "x'00'", "upper('" + sessID(1) + "')", "7", "' '", "'" + sessID(1) + " '"} {
		t.Run(set, func(t *testing.T) {
			key := fmt.Sprintf("k%x", len(set)) + strings.Map(func(r rune) rune {
				if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
					return r
				}
				return '-'
			}, set)
			rec := lease.Record{Key: key, Owner: "web-1", Epoch: 1, ExpiresAt: lease.SessionKeyExpiry, Session: sessID(1)}
			if _, err := d.Put(ctxBG, rec, lease.Precondition{Absent: true}); err != nil {
				t.Fatal(err)
			}
			mustExec(t, db, "UPDATE leases SET session = "+set+" WHERE key = ?", key)
			before := quoteRow(t, db, key) + quoteSessionColumn(t, db, key)
			_, _, err := d.Get(ctxBG, key)
			wantCorruptKey(t, "Get", err, key)
			got, err := d.GetMany(ctxBG, []string{key})
			if err != nil {
				t.Fatal(err)
			}
			wantCorruptKey(t, "GetMany", got[0].Err, key)
			_, err = d.List(ctxBG, key, "", 10)
			wantCorruptKey(t, "List", err, key)
			rec.Epoch = 2
			_, err = d.Put(ctxBG, rec, lease.Precondition{Version: 1})
			testkit.WantErr(t, "Put over the corrupt row", err, lease.ErrConflict)
			if after := quoteRow(t, db, key) + quoteSessionColumn(t, db, key); after != before {
				t.Fatalf("row changed from %s to %s", before, after)
			}
		})
	}
}

func wantCorruptKey(t *testing.T, op string, err error, key string) {
	t.Helper()
	testkit.WantErr(t, op, err, lease.ErrCorrupt)
	if !strings.Contains(err.Error(), fmt.Sprintf("%q", key)) || !strings.Contains(err.Error(), "session") || !isOneLine(err) {
		t.Fatalf("%s = %v; want one line naming key %q and its session", op, err, key)
	}
}

func quoteSessionColumn(t *testing.T, db *sql.DB, key string) string {
	t.Helper()
	var s string
	if err := db.QueryRow("SELECT ','||quote(session) FROM leases WHERE key = ?", key).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}
