package sqlite

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testclock"
	"github.com/leasekit/lease/internal/testkit"
)

// sqliteBatch opens a fresh file and returns its driver and a raw handle.
func sqliteBatch(t *testing.T) (*sqliteDriver, func(query string, args ...any)) {
	t.Helper()
	d := openTestSQLite(t).(*sqliteDriver)
	db := rawSQLite(t, d.path)
	return d, func(query string, args ...any) { mustExec(t, db, query, args...) }
}

// TestSQLitePutManyPerItem_R12: every write of a batch has its own
// precondition and answer; a conflict, a corrupt row or a refused version
// never changes another write's answer, and only the writes that succeed
// change their rows.
func TestSQLitePutManyPerItem_R12(t *testing.T) {
	d, exec := sqliteBatch(t)
	exp := time.UnixMilli(1_800_000_000_000).UTC()
	testkit.PutAll(t, d, exp, "held", "stale", "corrupt", "top", "zero")
	exec("UPDATE leases SET epoch = 'x' WHERE key = 'corrupt'") // same version, unparsable
	rec := func(key string, epoch uint64) lease.Record {
		return lease.Record{Key: key, Owner: "new", Epoch: epoch, ExpiresAt: exp.Add(time.Minute)}
	}
	ws := []lease.Write{
		{Rec: rec("fresh", 1), Pre: lease.Precondition{Absent: true}},            // insert: version 1
		{Rec: rec("held", 1), Pre: lease.Precondition{Absent: true}},             // insert on an existing key: conflict
		{Rec: rec("held", 2), Pre: lease.Precondition{Version: 1}},               // update at the right version
		{Rec: rec("stale", 2), Pre: lease.Precondition{Version: 7}},              // stale version: conflict
		{Rec: rec("corrupt", 2), Pre: lease.Precondition{Version: 1}},            // the guard refuses a corrupt row: conflict
		{Rec: rec("top", 2), Pre: lease.Precondition{Version: math.MaxInt64}},    // no version above it: refused alone
		{Rec: rec("zero", 2), Pre: lease.Precondition{Version: 0}},               // no row has version 0: conflict
		{Rec: rec("missing", 2), Pre: lease.Precondition{Version: 1}},            // no row: conflict
		{Rec: rec("fresh", 2), Pre: lease.Precondition{Version: 1}},              // the batch's own insert, then an update
		{Rec: rec("held", 3), Pre: lease.Precondition{Version: 1}},               // its version moved on within the batch: conflict
		{Rec: rec("other", 1), Pre: lease.Precondition{Absent: true}},            // still written after all of the above
		{Rec: rec("stale", 2), Pre: lease.Precondition{Version: math.MaxUint64}}, // out of range: conflict
	}
	results, err := d.PutMany(ctxBG, ws)
	if err != nil || len(results) != len(ws) {
		t.Fatalf("PutMany = %d results, %v; want %d, nil", len(results), err, len(ws))
	}
	type want struct {
		version uint64
		err     error // nil, ErrConflict, or testkit.ErrOther: any error but a conflict
	}
	wants := []want{{1, nil}, {0, lease.ErrConflict}, {2, nil}, {0, lease.ErrConflict}, {0, lease.ErrConflict}, {0, testkit.ErrOther},
		{0, lease.ErrConflict}, {0, lease.ErrConflict}, {2, nil}, {0, lease.ErrConflict}, {1, nil}, {0, lease.ErrConflict}}
	for i, w := range wants {
		r := results[i]
		switch {
		case w.err == testkit.ErrOther && (r.Err == nil || errors.Is(r.Err, lease.ErrConflict)):
			t.Errorf("write %d (%s): %+v; want an error that is not ErrConflict", i, ws[i].Rec.Key, r)
		case w.err != testkit.ErrOther && (!errors.Is(r.Err, w.err) || r.Version != w.version):
			t.Errorf("write %d (%s): %+v; want version %d, error %v", i, ws[i].Rec.Key, r, w.version, w.err)
		}
	}
	for key, wantEpoch := range map[string]uint64{"fresh": 2, "held": 2, "stale": 1, "top": 1, "zero": 1, "other": 1} {
		got, _, err := d.Get(ctxBG, key)
		if err != nil || got.Epoch != wantEpoch {
			t.Errorf("after the batch, %s = %+v, %v; want epoch %d", key, got, err, wantEpoch)
		}
	}
	if _, _, err := d.Get(ctxBG, "corrupt"); !errors.Is(err, lease.ErrCorrupt) {
		t.Errorf("the corrupt row after the batch: %v; want it left corrupt (R10)", err)
	}
	if _, _, err := d.Get(ctxBG, "missing"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("missing after the batch: %v; want ErrNotFound", err)
	}
}

// TestSQLitePutManyChunks: a batch larger than a chunk is committed one
// chunk per transaction (one fsync each), and answers across the chunk
// boundaries are each write's own (R12).
func TestSQLitePutManyChunks(t *testing.T) {
	d, _ := sqliteBatch(t)
	const n = 2*sqliteBatchChunk + 1
	exp := time.UnixMilli(1_800_000_000_000).UTC()
	conflict := map[int]bool{0: true, sqliteBatchChunk - 1: true, sqliteBatchChunk: true, 2 * sqliteBatchChunk: true}
	var existing []string
	for i := range conflict {
		existing = append(existing, fmt.Sprintf("k%04d", i))
	}
	testkit.PutAll(t, d, exp, existing...)
	ws := make([]lease.Write, n)
	for i := range ws {
		ws[i] = lease.Write{Rec: lease.Record{Key: fmt.Sprintf("k%04d", i), Owner: "o", Epoch: 1, ExpiresAt: exp}, Pre: lease.Precondition{Absent: true}}
	}
	before := d.commits.Load()
	results, err := d.PutMany(ctxBG, ws)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.commits.Load() - before; got != 3 {
		t.Errorf("%d writes took %d transactions; want 3 (chunks of %d)", n, got, sqliteBatchChunk)
	}
	for i, r := range results {
		if conflict[i] != errors.Is(r.Err, lease.ErrConflict) || (!conflict[i] && (r.Err != nil || r.Version != 1)) {
			t.Errorf("write %d: %+v; want conflict %v", i, r, conflict[i])
		}
	}
	got, err := d.List(ctxBG, "k", "", 2*n)
	if err != nil || len(got) != n {
		t.Fatalf("List after the batch: %d records, %v; want %d", len(got), err, n)
	}
}

// TestSQLitePutManyLockedIsNotWritten: a batch that cannot get the write
// lock (another process holds it past the busy timeout) reports an error
// for every write, none of them a conflict, and writes nothing; once the
// lock is free the same batch succeeds (R9: safe to retry).
func TestSQLitePutManyLockedIsNotWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	drv, err := openSQLite(path, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	d := drv.(*sqliteDriver)
	locker, err := rawSQLite(t, path).Conn(ctxBG)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	if _, err := locker.ExecContext(ctxBG, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	ws := []lease.Write{{Rec: lease.Record{Key: "a", Owner: "o", Epoch: 1}, Pre: lease.Precondition{Absent: true}},
		{Rec: lease.Record{Key: "b", Owner: "o", Epoch: 1}, Pre: lease.Precondition{Absent: true}}}
	results, err := d.PutMany(ctxBG, ws)
	if err != nil {
		t.Fatalf("PutMany: %v; want per-write errors", err)
	}
	for i, r := range results {
		if r.Err == nil || errors.Is(r.Err, lease.ErrConflict) || !strings.Contains(r.Err.Error(), "not written") {
			t.Errorf("write %d under another's lock: %+v; want an error saying it was not written", i, r)
		}
	}
	if _, err := locker.ExecContext(ctxBG, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if got, err := d.List(ctxBG, "", "", 10); err != nil || len(got) != 0 {
		t.Fatalf("rows after the refused batch: %v, %v; want none", got, err)
	}
	results, err = d.PutMany(ctxBG, ws)
	if err != nil || results[0].Err != nil || results[1].Err != nil {
		t.Fatalf("the retried batch: %+v, %v", results, err)
	}
}

// TestSQLiteBatchContextAndClose: a cancelled ctx stops PutMany, GetMany
// and List before they touch the file; a closed driver refuses them with
// ErrClosed.
func TestSQLiteBatchContextAndClose(t *testing.T) {
	d, _ := sqliteBatch(t)
	ctx, cancel := context.WithCancel(ctxBG)
	cancel()
	ws := []lease.Write{{Rec: lease.Record{Key: "a", Owner: "o", Epoch: 1}, Pre: lease.Precondition{Absent: true}}}
	if _, err := d.PutMany(ctx, ws); !errors.Is(err, context.Canceled) {
		t.Errorf("PutMany with a cancelled ctx: %v; want context.Canceled", err)
	}
	if _, err := d.GetMany(ctx, []string{"a"}); !errors.Is(err, context.Canceled) {
		t.Errorf("GetMany with a cancelled ctx: %v; want context.Canceled", err)
	}
	if _, err := d.List(ctx, "", "", 10); !errors.Is(err, context.Canceled) {
		t.Errorf("List with a cancelled ctx: %v; want context.Canceled", err)
	}
	if _, _, err := d.Get(ctxBG, "a"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("after the cancelled PutMany: %v; want nothing written", err)
	}
	testkit.WantErr(t, "Close", d.Close(), nil)
	_, err := d.PutMany(ctxBG, ws)
	testkit.WantErr(t, "PutMany after Close", err, lease.ErrClosed)
	_, err = d.GetMany(ctxBG, []string{"a"})
	testkit.WantErr(t, "GetMany after Close", err, lease.ErrClosed)
	_, err = d.List(ctxBG, "", "", 10)
	testkit.WantErr(t, "List after Close", err, lease.ErrClosed)
}

// TestSQLiteBatchStopsWhenContextEndsMidway: a ctx that ends while a
// chunk's writes run stops the chunk at the next write and rolls it back:
// every write reports the error and none of them is in the file.
func TestSQLiteBatchStopsWhenContextEndsMidway(t *testing.T) {
	d, _ := sqliteBatch(t)
	ws := make([]lease.Write, 100)
	keys := make([]string, len(ws))
	for i := range ws {
		keys[i] = fmt.Sprintf("k%03d", i)
		ws[i] = lease.Write{Rec: lease.Record{Key: keys[i], Owner: "o", Epoch: 1}, Pre: lease.Precondition{Absent: true}}
	}
	ctx := newEndingContext(50) // ends at its 50th Err: while the writes run
	results, err := d.PutMany(ctx, ws)
	if err != nil {
		t.Fatalf("PutMany: %v; want an error per write", err)
	}
	if ctx.asked() < 50 {
		t.Fatalf("the batch asked its context %d times; want the context to end midway", ctx.asked())
	}
	for i, r := range results {
		if !errors.Is(r.Err, context.Canceled) {
			t.Fatalf("write %d: %+v; want context.Canceled", i, r)
		}
	}
	got, err := d.GetMany(ctxBG, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if !errors.Is(r.Err, lease.ErrNotFound) {
			t.Fatalf("%s after the stopped batch: %+v; want nothing written", keys[i], r)
		}
	}
}

// endingContext is a context that ends (Canceled) at its n-th Err call.
type endingContext struct {
	context.Context
	mu    sync.Mutex
	left  int
	calls int
	done  chan struct{}
}

func newEndingContext(n int) *endingContext {
	return &endingContext{Context: context.Background(), left: n, done: make(chan struct{})}
}

func (c *endingContext) Done() <-chan struct{} { return c.done }

func (c *endingContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.left--; c.left == 0 {
		close(c.done)
	}
	if c.left <= 0 {
		return context.Canceled
	}
	return nil
}

func (c *endingContext) asked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// TestSQLiteGetMany: each key is answered as Get would answer it: its
// record and version, ErrNotFound, or ErrCorrupt for a row that does not
// parse, without changing the other keys' answers (R10, R12); also
// across query chunks, for a key asked twice, and for one key asked alone
// (a statement of its own: a lone Hold's look).
func TestSQLiteGetMany(t *testing.T) {
	d, exec := sqliteBatch(t)
	exp := time.UnixMilli(1_800_000_000_000).UTC()
	var keys []string
	for i := range sqliteBatchChunk + 2 {
		keys = append(keys, fmt.Sprintf("g%04d", i))
	}
	testkit.PutAll(t, d, exp, keys...)
	exec("UPDATE leases SET released = 7 WHERE key = 'g0001'")
	exec("UPDATE leases SET version = 2, epoch = 9 WHERE key = ?", keys[sqliteBatchChunk])
	ask := append([]string{"nope", "g0001", "g0000"}, keys...)
	ask = append(ask, "g0000")
	results, err := d.GetMany(ctxBG, ask)
	if err != nil || len(results) != len(ask) {
		t.Fatalf("GetMany: %d results, %v", len(results), err)
	}
	for _, key := range []string{"nope", "g0001", "g0000", keys[sqliteBatchChunk]} {
		alone, err := d.GetMany(ctxBG, []string{key})
		if err != nil || len(alone) != 1 {
			t.Fatalf("GetMany of %s alone: %d results, %v", key, len(alone), err)
		}
		ask, results = append(ask, key), append(results, alone[0])
	}
	for i, r := range results {
		key := ask[i]
		switch {
		case key == "nope":
			testkit.WantErr(t, "GetMany of a missing key", r.Err, lease.ErrNotFound)
		case key == "g0001":
			testkit.WantErr(t, "GetMany of a corrupt row", r.Err, lease.ErrCorrupt)
		case key == keys[sqliteBatchChunk]:
			if r.Err != nil || r.Version != 2 || r.Rec.Epoch != 9 {
				t.Errorf("GetMany(%s) = %+v; want epoch 9 at version 2", key, r)
			}
		default:
			want := lease.Record{Key: key, Owner: "old", Epoch: 1, ExpiresAt: exp}
			if r.Err != nil || r.Version != 1 || r.Rec != want {
				t.Errorf("GetMany(%s) = %+v; want %+v at version 1", key, r, want)
			}
		}
	}
	if results, err := d.GetMany(ctxBG, nil); err != nil || len(results) != 0 {
		t.Errorf("GetMany(nil) = %v, %v", results, err)
	}
}

// TestSQLiteList_R14: List pages through keys in ascending byte order
// (SQLite's BINARY collation compares bytes), within the prefix, after
// `after`, at most limit at a time; a row that does not parse is an error
// matching ErrCorrupt that names its key (R10).
func TestSQLiteList_R14(t *testing.T) {
	d, exec := sqliteBatch(t)
	exp := time.UnixMilli(1_800_000_000_000).UTC()
	// Byte order differs from case-insensitive and from "natural" order:
	// '-' < '.' < '/' < '0' < ':' < '@' < 'A' < 'Z' < '_' < 'a'.
	keys := []string{"a/b", "a/B", "a/_", "a/-", "a/.x", "a:b", "a@b", "a/0", "a/@", "a", "b", "A", "a/a/a", "a/Z", "ab"}
	testkit.PutAll(t, d, exp, keys...)
	sorted := slices.Clone(keys)
	slices.Sort(sorted) // Go compares strings bytewise
	for _, tc := range []struct {
		prefix, after string
		limit         int
	}{{"", "", 100}, {"a/", "", 100}, {"a/", "a/B", 100}, {"a", "", 3}, {"a/", "a/a/a", 100}, {"z", "", 10}, {"", "", 0}, {"a/", "", -1}} {
		var want []string
		for _, k := range sorted {
			if strings.HasPrefix(k, tc.prefix) && k > tc.after && len(want) < tc.limit {
				want = append(want, k)
			}
		}
		recs, err := d.List(ctxBG, tc.prefix, tc.after, tc.limit)
		var got []string
		for _, r := range recs {
			got = append(got, r.Key)
			if r.Owner != "old" || r.Epoch != 1 || !r.ExpiresAt.Equal(exp) {
				t.Errorf("List record %+v", r)
			}
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("List(%q, %q, %d) = %q, %v; want %q", tc.prefix, tc.after, tc.limit, got, err, want)
		}
	}
	// Paging by the last key reads every key once, in order.
	if paged := testkit.ListPaged(t, d, "", 4); !slices.Equal(paged, sorted) {
		t.Errorf("paged List = %q; want %q", paged, sorted)
	}
	exec("UPDATE leases SET version = 'x' WHERE key = 'a/a/a'")
	_, err := d.List(ctxBG, "a/", "", 100)
	testkit.WantErr(t, "List over a corrupt row", err, lease.ErrCorrupt)
	if !strings.Contains(err.Error(), `"a/a/a"`) {
		t.Errorf("List over a corrupt row: %v; want it to name the key", err)
	}
	if recs, err := d.List(ctxBG, "b", "", 100); err != nil || len(recs) != 1 {
		t.Errorf("List of another prefix beside a corrupt row: %v, %v; want b alone", recs, err)
	}
}

// applyThenFail wraps an SQLite driver so that every write lands in the
// file but its answer is lost: Put returns an error after writing, and
// PutMany applies the whole batch and then returns a non-nil error (every
// outcome unknown). Reads go through untouched.
type applyThenFail struct {
	*sqliteDriver
	lost    int // writes whose answer was lost
	batches int // PutMany calls
}

var errAnswerLost = errors.New("injected: the write was applied, its answer lost")

func (a *applyThenFail) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	_, err := a.sqliteDriver.Put(ctx, rec, pre)
	a.lost++
	return 0, fmt.Errorf("%w (the answer was %v)", errAnswerLost, err) // %v: even a conflict is unknown now
}

func (a *applyThenFail) PutMany(ctx context.Context, ws []lease.Write) ([]lease.PutResult, error) {
	_, err := a.sqliteDriver.PutMany(ctx, ws)
	a.lost += len(ws)
	a.batches++
	return nil, fmt.Errorf("%w (the answer was %v)", errAnswerLost, err)
}

// TestSQLiteAmbiguousBatchSettles_R9_R12: ReleaseAll over a driver whose
// writes land but whose answers are lost, batched or not. The store
// settles each key by re-reading: the keys it still held are released
// (durable, as R7 requires: the file shows it), the keys another owner took
// meanwhile answer ErrLost and keep the new holder's record (R12, R13).
func TestSQLiteAmbiguousBatchSettles_R9_R12(t *testing.T) {
	d, _ := sqliteBatch(t)
	lossy := &applyThenFail{sqliteDriver: d}
	clock := testclock.New()
	mine := testkit.NewDocStore(t, lossy, clock, "mine")
	var keys []string
	for i := range 20 {
		keys = append(keys, fmt.Sprintf("p/%02d", i))
	}
	for _, k := range keys {
		if _, err := d.Put(ctxBG, lease.Record{Key: k, Owner: "seed", Epoch: 1, ExpiresAt: clock.Now(), Released: true},
			lease.Precondition{Absent: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys {
		g, err := mine.Acquire(ctxBG, k) // each acquire's answer is lost too, and settled
		if err != nil || g.Epoch != 2 {
			t.Fatalf("Acquire(%s) through lost answers = %+v, %v; want epoch 2 (R9)", k, g, err)
		}
	}
	clock.Advance(testkit.TTL) // every grant of mine expires; another owner takes three keys
	thief := testkit.NewDocStore(t, d, clock, "thief")
	stolen := map[string]bool{keys[0]: true, keys[7]: true, keys[19]: true}
	for k := range stolen {
		if g := testkit.MustAcquire(t, thief, k); g.Epoch != 3 || !g.PreviousUnclean {
			t.Fatalf("thief's takeover of %s = %+v", k, g)
		}
	}
	lostBefore, batchesBefore := lossy.lost, lossy.batches
	err := mine.ReleaseAll(ctxBG)
	if lossy.lost == lostBefore || lossy.batches == batchesBefore {
		t.Fatalf("ReleaseAll made %d writes in %d batches through the lossy driver; want its writes in a batch",
			lossy.lost-lostBefore, lossy.batches-batchesBefore)
	}
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("ReleaseAll = %v; want ErrLost for the stolen keys (R13)", err)
	}
	for k := range stolen {
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", k)) {
			t.Errorf("ReleaseAll's error does not name stolen key %s: %v", k, err)
		}
	}
	results, err := d.GetMany(ctxBG, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		want := lease.Record{Key: keys[i], Owner: "mine", Epoch: 2, Released: true}
		if stolen[keys[i]] {
			want = lease.Record{Key: keys[i], Owner: "thief", Epoch: 3}
		}
		if r.Err != nil || r.Rec.Owner != want.Owner || r.Rec.Epoch != want.Epoch || r.Rec.Released != want.Released {
			t.Errorf("%s after ReleaseAll = %+v; want %+v", keys[i], r, want)
		}
	}
}
