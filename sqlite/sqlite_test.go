package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testclock"
	"github.com/leasekit/lease/internal/testfs"
	"github.com/leasekit/lease/internal/testkit"

	sqlite "modernc.org/sqlite"
)

// openTestSQLite opens a fresh database file in the test's temp dir.
func openTestSQLite(t *testing.T) lease.Driver {
	t.Helper()
	return openSQLiteAt(t, filepath.Join(t.TempDir(), "leases.db"))
}

func openSQLiteAt(t testing.TB, path string) lease.Driver {
	t.Helper()
	d, err := Open(path)
	if err != nil {
		t.Fatalf("Open(%s) = %v", path, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// rawSQLite opens path straight through database/sql, as another program
// (or the sqlite3 shell) would.
func rawSQLite(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t testing.TB, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// TestSQLiteLayout checks the table a person reads with the sqlite3 shell:
// typed columns, Unix milliseconds, the schema version, WAL, and the
// documented epoch mapping (R2).
func TestSQLiteLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	d := openSQLiteAt(t, path)
	if d.Name() != "sqlite" || !lease.DriverHasCrossProcessCAS(d.Name()) {
		t.Fatalf("Name() = %q; want sqlite, with cross-process CAS (R11)", d.Name())
	}
	exp := time.Date(2026, 11, 30, 12, 0, 10, 123e6, time.UTC)
	for _, rec := range []lease.Record{
		{Key: "small", Owner: "alice", Epoch: 5, ExpiresAt: exp},
		{Key: "top", Owner: "bob", Epoch: math.MaxUint64, ExpiresAt: exp, Released: true},
	} {
		if _, err := d.Put(ctxBG, rec, lease.Precondition{Absent: true}); err != nil {
			t.Fatalf("Put(%s): %v", rec.Key, err)
		}
	}
	db := rawSQLite(t, path)
	var version int
	var mode string
	if err := db.QueryRow("PRAGMA user_version").Scan(&version); err != nil || version != sqliteSchemaVersion {
		t.Fatalf("user_version = %d, %v; want %d", version, err, sqliteSchemaVersion)
	}
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
	rows, err := db.Query(`SELECT key, typeof(owner), typeof(epoch), typeof(expires_ms), typeof(released), typeof(version),
		owner, epoch, expires_ms, released, version FROM leases ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var key, owner string
		var types [5]string
		var epoch, ms, released, v int64
		if err := rows.Scan(&key, &types[0], &types[1], &types[2], &types[3], &types[4], &owner, &epoch, &ms, &released, &v); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %v %s %d %d %d %d", key, types, owner, epoch, ms, released, v))
	}
	want := []string{
		fmt.Sprintf("small [text integer integer integer integer] alice 5 %d 0 1", exp.UnixMilli()),
		fmt.Sprintf("top [text integer integer integer integer] bob -1 %d 1 1", exp.UnixMilli()), // MaxUint64 is stored as -1
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSQLiteEpochRange checks that every part of the uint64 range
// round-trips through the file, also through a new handle (R2).
func TestSQLiteEpochRange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	epochs := []uint64{1, 2, math.MaxInt64 - 1, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64 - 1, math.MaxUint64}
	exp := time.UnixMilli(1_800_000_000_123).UTC()
	d := openSQLiteAt(t, path)
	for i, e := range epochs {
		rec := lease.Record{Key: fmt.Sprintf("k%d", i), Owner: "alice", Epoch: e, ExpiresAt: exp}
		if _, err := d.Put(ctxBG, rec, lease.Precondition{Absent: true}); err != nil {
			t.Fatalf("Put epoch %d: %v", e, err)
		}
	}
	testkit.WantErr(t, "Close", d.Close(), nil)
	d = openSQLiteAt(t, path)
	for i, e := range epochs {
		rec, v, err := d.Get(ctxBG, fmt.Sprintf("k%d", i))
		if err != nil || rec.Epoch != e || v != 1 || !rec.ExpiresAt.Equal(exp) || rec.ExpiresAt.Location() != time.UTC {
			t.Fatalf("Get epoch %d = %+v v%d, %v; want epoch %d, expiry %v UTC", e, rec, v, err, e, exp)
		}
	}
}

// TestSQLiteEpochTopThroughStore runs a store across the top of the epoch
// range: MaxInt64 → 2^63 (the sign bit in the file), then MaxUint64, then
// ErrEpochExhausted with the row untouched (R2).
func TestSQLiteEpochTopThroughStore(t *testing.T) {
	for _, start := range []uint64{math.MaxInt64, math.MaxUint64 - 1} {
		t.Run(fmt.Sprint(start), func(t *testing.T) {
			d := openTestSQLite(t)
			clock := testclock.New()
			prev := lease.Record{Key: "k", Owner: "old", Epoch: start, ExpiresAt: clock.Now(), Released: true}
			if _, err := d.Put(ctxBG, prev, lease.Precondition{Absent: true}); err != nil {
				t.Fatal(err)
			}
			s := testkit.NewDocStore(t, d, clock, "alice")
			g := testkit.MustAcquire(t, s, "k")
			if g.Epoch != start+1 {
				t.Fatalf("epoch = %d; want %d", g.Epoch, start+1)
			}
			testkit.WantErr(t, "Release", s.Release(ctxBG, g), nil)
			if start+1 != math.MaxUint64 {
				return
			}
			_, err := s.Acquire(ctxBG, "k")
			testkit.WantErr(t, "Acquire at MaxUint64", err, lease.ErrEpochExhausted)
			rec, v, err := d.Get(ctxBG, "k")
			if err != nil || rec.Epoch != math.MaxUint64 || !rec.Released || v != 3 {
				t.Fatalf("row after the refused acquire = %+v v%d, %v; want MaxUint64, released, v3", rec, v, err)
			}
		})
	}
}

// TestSQLiteOpenRefusesBadInput checks that every bad path or file is a
// clear error and leaves the directory exactly as it was.
func TestSQLiteOpenRefusesBadInput(t *testing.T) {
	makeDB := func(stmts ...string) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, s := range stmts {
				mustExec(t, db, s)
			}
		}
	}
	writeFile := func(data string) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name    string
		path    func(dir string) string
		prepare func(t *testing.T, path string)
		want    string // in the error message
		is      error  // the error also matches this, if set
	}{
		{name: "missing directory", path: func(dir string) string { return filepath.Join(dir, "nope", "leases.db") },
			want: "directory", is: fs.ErrNotExist},
		{name: "a directory", path: func(dir string) string { return dir }, want: "is a directory"},
		{name: "a file as the directory", path: func(dir string) string { return filepath.Join(dir, "f", "leases.db") },
			prepare: func(t *testing.T, path string) { writeFile("x")(t, filepath.Dir(path)) }, want: "not a directory"},
		{name: "not a database", prepare: writeFile(strings.Repeat("these are not the pages you are looking for\n", 200)),
			want: "is not an SQLite database"},
		{name: "a few bytes", prepare: writeFile("hello"), want: "is not an SQLite database"},
		{name: "wrong table shape", prepare: makeDB(
			"CREATE TABLE leases (key TEXT PRIMARY KEY, holder TEXT, until TEXT)",
			"PRAGMA user_version = 1"), want: "want (key TEXT PRIMARY KEY, owner TEXT, epoch INTEGER"},
		{name: "wrong column type", prepare: makeDB(
			"CREATE TABLE leases (key TEXT PRIMARY KEY, owner TEXT, epoch TEXT, expires_ms INTEGER, released INTEGER, version INTEGER)",
			"PRAGMA user_version = 1"), want: "epoch TEXT"},
		{name: "leases table without a schema version", prepare: makeDB(sqliteCreateTable), want: "not made by this library"},
		{name: "newer schema version", prepare: makeDB(sqliteCreateTable, sqliteCreateSessions, "PRAGMA user_version = 3"), want: "newer than this library"},
		{name: "another program's database", prepare: makeDB(
			"CREATE TABLE users (id INTEGER PRIMARY KEY)", "PRAGMA user_version = 7"), want: "no leases table"},
		{name: "schema version without the table", prepare: makeDB(
			"CREATE TABLE other (x)", "PRAGMA user_version = 1"), want: "no leases table"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "leases.db")
			if tc.path != nil {
				path = tc.path(dir)
			}
			if tc.prepare != nil {
				tc.prepare(t, path)
			}
			err := wantOpenRefused(t, dir, path, tc.want)
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("Open = %v; want it to match %v", err, tc.is)
			}
		})
	}
	t.Run("empty path", func(t *testing.T) {
		if _, err := Open(""); err == nil || !strings.Contains(err.Error(), "empty") {
			t.Fatalf("Open(\"\") = %v; want an error about the empty path", err)
		}
	})
}

// TestSQLiteCorruptRows checks R10 against real rows: a NULL, a
// non-integer, an out-of-range value is ErrCorrupt from the driver and a
// *StorageError from the store, and the row stays exactly as it was.
func TestSQLiteCorruptRows(t *testing.T) {
	type row struct{ key, owner, epoch, expires, released, version string } // SQL literals
	ok := row{owner: "'alice'", epoch: "4", expires: "0", released: "1", version: "1"}
	with := func(key string, f func(r *row)) row { r := ok; r.key = key; f(&r); return r }
	rows := []row{
		with("epoch-text", func(r *row) { r.epoch = "'four'" }),
		with("epoch-real", func(r *row) { r.epoch = "4.5" }),
		with("epoch-blob", func(r *row) { r.epoch = "x'04'" }),
		with("epoch-zero", func(r *row) { r.epoch = "0" }), // the driver reads it; the store refuses it
		with("expires-text", func(r *row) { r.expires = "'soon'" }),
		with("released-two", func(r *row) { r.released = "2" }),
		with("released-real", func(r *row) { r.released = "0.5" }),
		with("version-zero", func(r *row) { r.version = "0" }),
		with("version-negative", func(r *row) { r.version = "-3" }),
		with("owner-blob", func(r *row) { r.owner = "x'616c696365'" }),
		with("owner-empty", func(r *row) { r.owner = "''" }), // the store refuses it
		with("epoch-null", func(r *row) { r.epoch = "NULL" }),
		with("owner-null", func(r *row) { r.owner = "NULL" }),
		with("released-null", func(r *row) { r.released = "NULL" }),
		with("version-null", func(r *row) { r.version = "NULL" }),
	}
	// Our table refuses NULLs, so the rows go into a table of the same shape
	// without NOT NULL, such as a hand-made one.
	path := filepath.Join(t.TempDir(), "leases.db")
	db := rawSQLite(t, path)
	mustExec(t, db, `CREATE TABLE leases (key TEXT PRIMARY KEY, owner TEXT, epoch INTEGER, expires_ms INTEGER,
		released INTEGER, version INTEGER)`)
	mustExec(t, db, "PRAGMA user_version = 1")
	for _, r := range rows {
		mustExec(t, db, fmt.Sprintf("INSERT INTO leases VALUES ('%s', %s, %s, %s, %s, %s)",
			r.key, r.owner, r.epoch, r.expires, r.released, r.version))
	}
	d := openSQLiteAt(t, path)
	s := testkit.NewDocStore(t, d, testclock.New(), "alice")
	for _, r := range rows {
		t.Run(r.key, func(t *testing.T) {
			before := quoteRow(t, db, r.key)
			_, _, err := d.Get(ctxBG, r.key)
			driverOK := r.key == "epoch-zero" || r.key == "owner-empty"
			if !driverOK && !errors.Is(err, lease.ErrCorrupt) {
				t.Fatalf("Get = %v; want ErrCorrupt", err)
			}
			_, err = s.Acquire(ctxBG, r.key)
			testkit.WantStorageErr(t, "Acquire", err)
			testkit.WantErr(t, "Acquire", err, lease.ErrCorrupt)
			testkit.WantErr(t, "Release", s.Release(ctxBG, lease.Grant{Key: r.key, Owner: "alice", Epoch: 4}), lease.ErrCorrupt)
			_, err = s.Renew(ctxBG, lease.Grant{Key: r.key, Owner: "alice", Epoch: 4})
			testkit.WantErr(t, "Renew", err, lease.ErrCorrupt)
			_, err = s.Holder(ctxBG, r.key)
			testkit.WantErr(t, "Holder", err, lease.ErrCorrupt)
			if after := quoteRow(t, db, r.key); after != before {
				t.Fatalf("row changed from %s to %s", before, after)
			}
		})
	}
	t.Run("non-integer epoch in the library's own table", func(t *testing.T) {
		d := openTestSQLite(t)
		path := d.(*sqliteDriver).path
		mustExec(t, rawSQLite(t, path), "INSERT INTO leases VALUES ('k', 'alice', 'x', 0, 0, 1, '')")
		_, _, err := d.Get(ctxBG, "k")
		testkit.WantErr(t, "Get", err, lease.ErrCorrupt)
		if !strings.Contains(err.Error(), `epoch is the text "x", want an integer`) {
			t.Fatalf("Get = %v; want it to say what the epoch is", err)
		}
	})
}

// wantOpenRefused opens path, in dir, with Open and with lease.Open, and
// fails the test unless both fail, Open with one line containing want,
// and dir is exactly as it was. It returns Open's error.
func wantOpenRefused(t *testing.T, dir, path, want string) error {
	t.Helper()
	before := testfs.Snapshot(t, dir)
	d, err := Open(path)
	if err == nil {
		d.Close()
		t.Fatalf("Open succeeded; want an error containing %q", want)
	}
	t.Logf("Open: %v", err)
	if !strings.Contains(err.Error(), want) || !isOneLine(err) {
		t.Fatalf("Open = %v; want one line containing %q", err, want)
	}
	if after := testfs.Snapshot(t, dir); after != before {
		t.Fatalf("the directory changed:\nbefore %s\nafter  %s", before, after)
	}
	if s, err := lease.Open(ctxBG, "sqlite:"+path); err == nil {
		s.Close()
		t.Fatal("Open(sqlite:) succeeded where Open failed")
	}
	return err
}

func quoteRow(t *testing.T, db *sql.DB, key string) string {
	t.Helper()
	var s string
	err := db.QueryRow(`SELECT quote(owner)||','||quote(epoch)||','||quote(expires_ms)||','||quote(released)||','||quote(version)
		FROM leases WHERE key = ?`, key).Scan(&s)
	if err != nil {
		t.Fatalf("reading row %q: %v", key, err)
	}
	return s
}

// TestSQLiteBusyIsStorageError checks that a write that outwaits the busy
// timeout, because another connection holds the write lock, is a
// *StorageError, never ErrHeld or ErrLost, keeps the grant, and that the
// calls succeed once the lock is free (R7, R9).
func TestSQLiteBusyIsStorageError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	d, err := openSQLite(path, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	clock := testclock.New()
	a, b := testkit.NewDocStore(t, d, clock, "alice"), testkit.NewDocStore(t, d, clock, "bob")
	g := testkit.MustAcquire(t, a, "held")

	locker, err := rawSQLite(t, path).Conn(ctxBG)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	if _, err := locker.ExecContext(ctxBG, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	_, err = b.Acquire(ctxBG, "free")
	wantBusy(t, "Acquire", err)
	clock.Advance(time.Second) // so that the renewed row differs from the stored one
	_, err = a.Renew(ctxBG, g)
	wantBusy(t, "Renew", err)
	wantBusy(t, "Release", a.Release(ctxBG, g))
	if _, err := locker.ExecContext(ctxBG, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}

	if g2 := testkit.MustAcquire(t, b, "free"); g2.Epoch != 1 {
		t.Fatalf("Acquire after the lock = %+v; want epoch 1", g2)
	}
	if again := testkit.MustAcquire(t, a, "held"); again != g {
		t.Fatalf("the grant after failed writes = %+v; want %+v still held", again, g)
	}
	testkit.WantErr(t, "Release after the lock", a.Release(ctxBG, g), nil)
}

// TestSQLiteLockWaitHonoursContext checks that a write queued behind
// another process's write lock gives up when its context ends, long before
// the five-second busy timeout, and reports a *StorageError carrying the
// context's error.
func TestSQLiteLockWaitHonoursContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	s := testkit.NewDocStore(t, openSQLiteAt(t, path), testclock.New(), "alice")
	locker, err := rawSQLite(t, path).Conn(ctxBG)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	if _, err := locker.ExecContext(ctxBG, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer locker.ExecContext(ctxBG, "ROLLBACK")
	ctx, cancel := context.WithTimeout(ctxBG, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Acquire(ctx, "k")
	if waited := time.Since(start); waited > 2*time.Second {
		t.Fatalf("Acquire waited %v for the lock; want it to stop at its deadline", waited)
	}
	testkit.WantStorageErr(t, "Acquire", err)
	testkit.WantErr(t, "Acquire", err, context.DeadlineExceeded)
}

func wantBusy(t *testing.T, op string, err error) {
	t.Helper()
	testkit.WantStorageErr(t, op, err)
	wantSQLiteBusy(t, op, err)
}

// wantSQLiteBusy fails the test unless err carries SQLITE_BUSY.
func wantSQLiteBusy(t *testing.T, op string, err error) {
	t.Helper()
	var se *sqlite.Error
	if !errors.As(err, &se) || se.Code()&0xff != 5 { // SQLITE_BUSY and its extended codes
		t.Fatalf("%s = %v; want it to carry SQLITE_BUSY", op, err)
	}
}

// TestOpenSQLiteURL checks Open's sqlite: scheme (R11): two stores on one
// file lease from each other, and closing each store closes its driver,
// leaving no descriptor on the files.
func TestOpenSQLiteURL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	a, err := lease.Open(ctxBG, "sqlite:"+path, lease.WithOwner("alice"))
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	b, err := lease.Open(ctxBG, "sqlite:"+path, lease.WithOwner("bob"))
	if err != nil {
		t.Fatalf("second Open = %v", err)
	}
	g := testkit.MustAcquire(t, a, "k")
	_, err = b.Acquire(ctxBG, "k")
	var held *lease.HeldError
	if !errors.As(err, &held) || held.Owner != "alice" || held.Epoch != g.Epoch {
		t.Fatalf("bob's Acquire = %v; want alice's grant named", err)
	}
	testkit.WantErr(t, "Release", a.Release(ctxBG, g), nil)
	if gb := testkit.MustAcquire(t, b, "k"); gb.Epoch != 2 {
		t.Fatalf("bob's epoch = %d; want 2", gb.Epoch)
	}
	if runtime.GOOS == "linux" && openFiles(t, path) == 0 {
		t.Fatal("no descriptor open on the database while stores are open; the check is broken")
	}
	testkit.WantErr(t, "Close", a.Close(), nil)
	testkit.WantErr(t, "Close", b.Close(), nil)
	if runtime.GOOS == "linux" {
		if n := openFiles(t, path); n != 0 {
			t.Fatalf("%d descriptors still open on the database after Close", n)
		}
	}
	if _, err := lease.Open(ctxBG, "sqlite:"+path, lease.WithOwner("bad owner")); !errors.Is(err, lease.ErrInvalidKey) {
		t.Fatalf("Open with a bad owner = %v; want ErrInvalidKey", err)
	}
	if runtime.GOOS == "linux" {
		if n := openFiles(t, path); n != 0 {
			t.Fatalf("%d descriptors left open by a refused Open", n)
		}
	}
}

// openFiles counts this process's descriptors on path and its -wal and -shm.
func openFiles(t *testing.T, path string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, path) {
			n++
		}
	}
	return n
}

// TestSQLiteDriverClosed checks that a closed driver refuses every call
// with ErrClosed and that Close is idempotent.
func TestSQLiteDriverClosed(t *testing.T) {
	d := openTestSQLite(t)
	testkit.WantErr(t, "Close", d.Close(), nil)
	testkit.WantErr(t, "second Close", d.Close(), nil)
	_, _, err := d.Get(ctxBG, "k")
	testkit.WantErr(t, "Get", err, lease.ErrClosed)
	_, err = d.Put(ctxBG, lease.Record{Key: "k", Owner: "a", Epoch: 1}, lease.Precondition{Absent: true})
	testkit.WantErr(t, "Put", err, lease.ErrClosed)
}

// TestSQLiteOddPath checks that a path with URI metacharacters names
// exactly that file, relative or absolute.
func TestSQLiteOddPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a b?c#d%20e&_pragma=x")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "leases?.db")
	d := openSQLiteAt(t, path)
	if _, err := d.Put(ctxBG, lease.Record{Key: "k", Owner: "alice", Epoch: 1}, lease.Precondition{Absent: true}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("stat %s = %v; want the database there", path, err)
	}
	t.Chdir(dir)
	if _, _, err := openSQLiteAt(t, "leases?.db").Get(ctxBG, "k"); err != nil {
		t.Fatalf("Get through a relative path = %v", err)
	}
}

// TestSQLiteCorruptHeldRow_R10: a row that its holder's store has in
// its table is corrupted behind its back (same version). Renew and Release
// fail with lease.ErrCorrupt and leave the row as it is; Acquire never turns it
// into a clean grant (R10).
func TestSQLiteCorruptHeldRow_R10(t *testing.T) {
	for _, set := range []string{"epoch = 'x'", "owner = ''", "owner = 'a b'", "epoch = 0", "released = 2", "expires_ms = 1.5",
		"owner = x'616c696365'", "epoch = x'01'", "epoch = 1.5", "released = '0x'", "released = 0.5", "released = x'00'",
		"expires_ms = 'soon'", "session = 'xyz'", "session = x'00'", "session = 'ABCDEF0123456789ABCDEF0123456789'", "session = 7"} {
		t.Run(set, func(t *testing.T) {
			d := openTestSQLite(t)
			if d.Name() != "sqlite" {
				t.Fatalf("Name() = %q; want sqlite", d.Name())
			}
			db := rawSQLite(t, d.(*sqliteDriver).path)
			s := testkit.NewDocStore(t, d, testclock.New(), "alice")
			g := testkit.MustAcquire(t, s, "k")
			mustExec(t, db, "UPDATE leases SET "+set+" WHERE key = 'k'")
			before := quoteRow(t, db, "k") + quoteSessionColumn(t, db, "k")
			_, err := s.Renew(ctxBG, g)
			testkit.WantStorageErr(t, "Renew", err)
			testkit.WantErr(t, "Renew", err, lease.ErrCorrupt)
			err = s.Release(ctxBG, g)
			testkit.WantStorageErr(t, "Release", err)
			testkit.WantErr(t, "Release", err, lease.ErrCorrupt)
			_, err = s.Acquire(ctxBG, "k")
			testkit.WantErr(t, "Acquire", err, lease.ErrCorrupt)
			if after := quoteRow(t, db, "k") + quoteSessionColumn(t, db, "k"); after != before {
				t.Fatalf("row changed from %s to %s", before, after)
			}
		})
	}
}
