package sqlite

import (
	"database/sql"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/childproc"
	"github.com/leasekit/lease/internal/testkit"
)

// sqliteCreateTableV1 is the leases table exactly as schema version 1 (the
// releases before sessions) wrote it: a copy, so that a change to
// sqliteCreateTable cannot change what the migration tests start from.
const sqliteCreateTableV1 = `CREATE TABLE leases (
	key        TEXT    NOT NULL PRIMARY KEY,
	owner      TEXT    NOT NULL,
	epoch      INTEGER NOT NULL,
	expires_ms INTEGER NOT NULL,
	released   INTEGER NOT NULL,
	version    INTEGER NOT NULL
) WITHOUT ROWID`

// v1Rows are the rows of the version-1 files the tests write: key,
// owner, epoch (as stored), expires_ms, released, version.
var v1Rows = []struct {
	key, owner                          string
	epoch, expiresMs, released, version int64
}{
	{"profile:1", "web-1", 5, 1_800_000_000_123, 0, 3},
	{"top", "web-2", -1, 1_700_000_000_000, 1, 9}, // epoch MaxUint64, released
}

// writeV1File makes path a database as schema version 1 left it: the
// table, user_version 1, WAL, and v1Rows.
func writeV1File(t testing.TB, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range []string{sqliteCreateTableV1, "PRAGMA user_version = 1", "PRAGMA journal_mode = WAL"} {
		mustExec(t, db, q)
	}
	for _, r := range v1Rows {
		mustExec(t, db, "INSERT INTO leases VALUES (?, ?, ?, ?, ?, ?)", r.key, r.owner, r.epoch, r.expiresMs, r.released, r.version)
	}
}

// wantV2Schema checks the file's schema: user_version 2, both tables in
// their shapes, the partial index, WAL.
func wantV2Schema(t testing.TB, db *sql.DB) {
	t.Helper()
	var version int
	var mode, objects string
	if err := db.QueryRow("PRAGMA user_version").Scan(&version); err != nil || version != 2 {
		t.Fatalf("user_version = %d, %v; want 2", version, err)
	}
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
	err := db.QueryRow(`SELECT group_concat(type||' '||name||' '||coalesce(tbl_name, ''), ', ') FROM
		(SELECT type, name, tbl_name FROM sqlite_master ORDER BY name)`).Scan(&objects)
	if want := "table lease_sessions lease_sessions, table leases leases, index leases_session leases"; err != nil || objects != want {
		t.Fatalf("schema objects = %q, %v; want %q", objects, err, want)
	}
	conn, err := db.Conn(ctxBG)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for table, want := range map[string][]sqliteColumn{"leases": sqliteColumns, "lease_sessions": sqliteSessionColumns} {
		cols, err := sqliteTableColumns(ctxBG, conn, table)
		if err != nil || checkSQLiteColumns(table, cols, want) != nil {
			t.Fatalf("%s has columns (%s), %v; want (%s)", table, joinColumns(cols), err, joinColumns(want))
		}
	}
}

// TestSQLiteMigratesV1File: a file of schema version 1 opens as version 2:
// every row keeps its values, version included, with session ” (kept per
// key, as before); sessions and session-attached keys then work, and the
// file opens again without another migration (R2, R24).
func TestSQLiteMigratesV1File(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	writeV1File(t, path)
	d := openSQLiteAt(t, path).(*sqliteDriver)
	db := rawSQLite(t, path)
	wantV2Schema(t, db)
	for _, r := range v1Rows {
		want := lease.Record{Key: r.key, Owner: r.owner, Epoch: uint64(r.epoch), ExpiresAt: time.UnixMilli(r.expiresMs).UTC(),
			Released: r.released == 1}
		wantRecord(t, d, want, uint64(r.version))
	}
	var typ string
	if err := db.QueryRow("SELECT group_concat(typeof(session)||':'||quote(session)) FROM leases").Scan(&typ); err != nil ||
		typ != "text:'',text:''" {
		t.Fatalf("migrated sessions = %q, %v; want '' as text in each row", typ, err)
	}
	if rec, _, err := d.Get(ctxBG, "top"); err != nil || rec.Epoch != math.MaxUint64 {
		t.Fatalf("Get(top) = %+v, %v; want epoch MaxUint64", rec, err)
	}

	sess := lease.SessionRecord{ID: sessID(1), Owner: "web-1", ExpiresAt: time.UnixMilli(1_800_000_000_000).UTC(), State: lease.SessionLive}
	mustPutSession(t, d, sess, lease.Precondition{Absent: true})
	attached := lease.Record{Key: "profile:1", Owner: "web-1", Epoch: 6, ExpiresAt: lease.SessionKeyExpiry, Session: sess.ID}
	if v, err := d.Put(ctxBG, attached, lease.Precondition{Version: 3}); err != nil || v != 4 {
		t.Fatalf("Put on a migrated row = v%d, %v; want v4", v, err)
	}
	testkit.WantErr(t, "Close", d.Close(), nil)
	again := openSQLiteAt(t, path)
	wantRecord(t, again, attached, 4)
	wantSession(t, again.(lease.SessionDriver), sess, 1)
	wantV2Schema(t, db)
}

// TestSQLiteConcurrentV1Open: processes open the same version-1 file at
// the same instant (a fleet upgraded together), 10 rounds: every open
// succeeds, the file is migrated once, whole, and keeps its rows beside
// each process's new one (R11; issue 28).
func TestSQLiteConcurrentV1Open(t *testing.T) {
	const procs, rounds = 4, 10
	children := make([]*childproc.Child, procs)
	for i := range children {
		children[i] = startOpenChild(t, fmt.Sprintf("upgrader-%d", i))
	}
	dir := t.TempDir()
	for round := range rounds {
		path := filepath.Join(dir, fmt.Sprintf("round%d.db", round))
		writeV1File(t, path)
		// Every child is blocked reading stdin: these lines are the barrier.
		for _, c := range children {
			c.Send(t, "open "+path)
		}
		for _, c := range children {
			if got := c.Recv(t); got != "ok" {
				t.Errorf("round %d: %s: %s", round, c.Name, got)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		db := rawSQLite(t, path)
		wantV2Schema(t, db)
		var rows int
		var old string
		if err := db.QueryRow("SELECT count(*) FROM leases").Scan(&rows); err != nil || rows != procs+len(v1Rows) {
			t.Fatalf("round %d: %d rows, %v; want %d", round, rows, err, procs+len(v1Rows))
		}
		r := v1Rows[0]
		want := fmt.Sprintf("%s %d %d %d %d ''", r.owner, r.epoch, r.expiresMs, r.released, r.version)
		if err := db.QueryRow("SELECT concat_ws(' ', owner, epoch, expires_ms, released, version, quote(session)) FROM leases WHERE key = ?",
			r.key).Scan(&old); err != nil || old != want {
			t.Fatalf("round %d: the version-1 row reads %q, %v; want %q", round, old, err, want)
		}
		db.Close()
	}
	childproc.StopAll(t, children)
}

// TestSQLiteSchemaRefusals: files whose tables or user_version this
// library did not write are refused with an error that says what is
// wrong, and left exactly as they were (the directory's bytes compared),
// including a version-1 file whose migration fails half-way.
func TestSQLiteSchemaRefusals(t *testing.T) {
	badSessions := strings.Replace(sqliteCreateSessions, "state      INTEGER", "state      TEXT", 1)
	cases := []struct {
		name  string
		stmts []string
		want  string
	}{
		{"lease_sessions of another shape", []string{sqliteCreateTable, badSessions, "PRAGMA user_version = 2"},
			"the lease_sessions table has columns (id TEXT PRIMARY KEY, owner TEXT, expires_ms INTEGER, state TEXT, version INTEGER), " +
				"want (id TEXT PRIMARY KEY, owner TEXT, expires_ms INTEGER, state INTEGER, version INTEGER)"},
		{"lease_sessions keyed by another column", []string{sqliteCreateTable,
			"CREATE TABLE lease_sessions (id TEXT, owner TEXT, expires_ms INTEGER, state INTEGER, version INTEGER PRIMARY KEY)",
			"PRAGMA user_version = 2"}, "version INTEGER PRIMARY KEY), want (id TEXT PRIMARY KEY"},
		{"version 2 without lease_sessions", []string{sqliteCreateTable, "PRAGMA user_version = 2"}, "no lease_sessions table"},
		{"version 2 with a version-1 leases table", []string{sqliteCreateTableV1, sqliteCreateSessions, "PRAGMA user_version = 2"},
			"the leases table has columns (key TEXT PRIMARY KEY, owner TEXT, epoch INTEGER, expires_ms INTEGER, released INTEGER, version INTEGER), want"},
		{"version 1 with a lease_sessions table", []string{sqliteCreateTableV1, sqliteCreateSessions, "PRAGMA user_version = 1"},
			"schema version 1 has no lease_sessions table, but the file has one"},
		{"version 1 with a version-2 leases table", []string{sqliteCreateTable, "PRAGMA user_version = 1"},
			"session TEXT), want (key TEXT PRIMARY KEY, owner TEXT, epoch INTEGER, expires_ms INTEGER, released INTEGER, version INTEGER)"},
		{"lease_sessions without leases", []string{sqliteCreateSessions}, "no leases table"},
		{"unknown user_version", []string{sqliteCreateTable, sqliteCreateSessions, "PRAGMA user_version = -2"}, "not a lease schema version"},
		{"migration fails half-way", []string{sqliteCreateTableV1, "CREATE TABLE other (x)", "CREATE INDEX leases_session ON other (x)",
			"PRAGMA user_version = 1"}, "migrating schema version 1 to 2: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "leases.db")
			db := rawSQLite(t, path)
			for _, s := range tc.stmts {
				mustExec(t, db, s)
			}
			testkit.WantErr(t, "closing the raw handle", db.Close(), nil)
			wantOpenRefused(t, dir, path, tc.want)
		})
	}
}
