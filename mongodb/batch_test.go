package mongodb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/mongoproxy"
	"github.com/leasekit/lease/internal/mongoserver"
	"github.com/leasekit/lease/internal/testclock"
	"github.com/leasekit/lease/internal/testkit"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// mongoBatch gives a driver on a fresh collection through a proxy of its
// own (to count and break requests), and the raw collection.
func mongoBatch(t *testing.T) (*mongoDriver, *mongo.Collection, *mongoproxy.Proxy) {
	t.Helper()
	p := mongoproxy.New(t, mongoserver.Shared(t).Addr)
	coll := mongoserver.Collection(t, mongoserver.Client(t, p))
	return newTestMongoDriverOn(t, coll).(*mongoDriver), coll, p
}

// TestMongoPutManyPerItem_R12: every write of one bulkWrite has its own
// precondition and answer: a duplicate insert, a stale or missing version
// and a corrupt document are each that write's ErrConflict, a refused
// version is that write's error, and none of them changes another write's
// answer or a document it does not own.
func TestMongoPutManyPerItem_R12(t *testing.T) {
	ctx := context.Background()
	d, coll, p := mongoBatch(t)
	exp := time.UnixMilli(1_800_000_000_000).UTC()
	testkit.PutAll(t, d, exp, "held", "stale", "corrupt", "top", "zero", "moved")
	if _, err := coll.UpdateOne(ctx, byID("corrupt"), bson.D{{Key: "$set", Value: bson.D{{Key: "epoch", Value: "x"}}}}); err != nil {
		t.Fatal(err)
	}
	corruptBefore, _ := coll.FindOne(ctx, byID("corrupt")).Raw()
	rec := func(key string, epoch uint64) lease.Record {
		return lease.Record{Key: key, Owner: "new", Epoch: epoch, ExpiresAt: exp.Add(time.Minute)}
	}
	ws := []lease.Write{
		{Rec: rec("fresh", 1), Pre: lease.Precondition{Absent: true}},            // insert: version 1
		{Rec: rec("held", 2), Pre: lease.Precondition{Version: 1}},               // update at the right version
		{Rec: rec("held", 1), Pre: lease.Precondition{Absent: true}},             // duplicate _id: conflict (the 2nd insert, the 3rd write)
		{Rec: rec("stale", 2), Pre: lease.Precondition{Version: 7}},              // stale version: conflict
		{Rec: rec("corrupt", 2), Pre: lease.Precondition{Version: 1}},            // the guard refuses a corrupt document: conflict
		{Rec: rec("top", 2), Pre: lease.Precondition{Version: math.MaxInt64}},    // no version above it: refused alone
		{Rec: rec("zero", 2), Pre: lease.Precondition{Version: 0}},               // no document has version 0: conflict
		{Rec: rec("missing", 2), Pre: lease.Precondition{Version: 1}},            // no document: conflict
		{Rec: rec("other", 1), Pre: lease.Precondition{Absent: true}},            // still written after all of the above
		{Rec: rec("moved", 2), Pre: lease.Precondition{Version: 1}},              // a good update beside the conflicts
		{Rec: rec("stale", 2), Pre: lease.Precondition{Version: math.MaxUint64}}, // out of range: refused alone
	}
	finds := p.Seen("find")
	results, err := d.PutMany(ctx, ws)
	if err != nil || len(results) != len(ws) {
		t.Fatalf("PutMany = %d results, %v; want %d, nil", len(results), err, len(ws))
	}
	if p.Seen("find") != finds+1 {
		t.Errorf("PutMany with unmatched updates made %d finds; want 1 to tell which matched", p.Seen("find")-finds)
	}
	wants := []struct {
		version uint64
		err     error
	}{{1, nil}, {2, nil}, {0, lease.ErrConflict}, {0, lease.ErrConflict}, {0, lease.ErrConflict}, {0, testkit.ErrOther},
		{0, lease.ErrConflict}, {0, lease.ErrConflict}, {1, nil}, {2, nil}, {0, testkit.ErrOther}}
	for i, w := range wants {
		r := results[i]
		switch {
		case w.err == testkit.ErrOther && (r.Err == nil || errors.Is(r.Err, lease.ErrConflict)):
			t.Errorf("write %d (%s): %+v; want an error that is not ErrConflict", i, ws[i].Rec.Key, r)
		case w.err != testkit.ErrOther && (!errors.Is(r.Err, w.err) || r.Version != w.version):
			t.Errorf("write %d (%s): %+v; want version %d, error %v", i, ws[i].Rec.Key, r, w.version, w.err)
		}
	}
	for key, want := range map[string]uint64{"fresh": 1, "held": 2, "stale": 1, "top": 1, "zero": 1, "other": 1, "moved": 2} {
		got, v, err := d.Get(ctx, key)
		if err != nil || got.Epoch != want || v != want {
			t.Errorf("after the batch, %s = %+v v%d, %v; want epoch and version %d", key, got, v, err, want)
		}
	}
	if after, _ := coll.FindOne(ctx, byID("corrupt")).Raw(); !bytes.Equal(after, corruptBefore) {
		t.Errorf("the corrupt document changed: %v -> %v (R10)", corruptBefore, after)
	}
	if _, _, err := d.Get(ctx, "missing"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("missing after the batch: %v; want ErrNotFound", err)
	}

	// A batch whose updates all match needs no read to tell.
	finds = p.Seen("find")
	results, err = d.PutMany(ctx, []lease.Write{{Rec: rec("held", 3), Pre: lease.Precondition{Version: 2}}, {Rec: rec("moved", 3), Pre: lease.Precondition{Version: 2}}})
	if err != nil || results[0] != (lease.PutResult{Version: 3}) || results[1] != (lease.PutResult{Version: 3}) {
		t.Fatalf("all-matching batch: %+v, %v", results, err)
	}
	if p.Seen("find") != finds {
		t.Errorf("an all-matching batch made %d finds; want none", p.Seen("find")-finds)
	}
}

// TestMongoJudgeUpdate checks how an update of a bulkWrite is judged from
// its document read afterwards: below v+1 or another write's contents at
// v+1 is a conflict; this write's contents at v+1 is success; a document
// that moved past v+1, or one that does not parse, is unknown.
func TestMongoJudgeUpdate(t *testing.T) {
	exp := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC) // sub-millisecond: BSON dates keep ms
	w := lease.Write{Rec: lease.Record{Key: "k", Owner: "me", Epoch: 4, ExpiresAt: exp}, Pre: lease.Precondition{Version: 5}}
	doc := func(owner string, version int64) bson.Raw {
		b, err := bson.Marshal(append(bson.D{{Key: "_id", Value: "k"}}, mongoFields(lease.Record{Owner: owner, Epoch: 4, ExpiresAt: exp}, uint64(version))...))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	corrupt, _ := bson.Marshal(bson.D{{Key: "_id", Value: "k"}, {Key: "version", Value: int64(6)}, {Key: "owner", Value: 1}})
	for _, tc := range []struct {
		name string
		raw  bson.Raw
		want string // "ok", "conflict" or "unknown"
	}{
		{"no document", nil, "conflict"},
		{"still at v", doc("me", 5), "conflict"},
		{"below v", doc("me", 2), "conflict"},
		{"ours at v+1", doc("me", 6), "ok"},
		{"another's at v+1", doc("you", 6), "conflict"},
		{"past v+1", doc("me", 7), "unknown"},
		{"corrupt at v+1", corrupt, "unknown"},
	} {
		r := judgeUpdate(w, tc.raw)
		got := "unknown"
		switch {
		case r.Err == nil && r.Version == 6:
			got = "ok"
		case errors.Is(r.Err, lease.ErrConflict):
			got = "conflict"
		case r.Err == nil:
			got = fmt.Sprintf("version %d", r.Version)
		}
		if got != tc.want {
			t.Errorf("%s: %+v (%s); want %s", tc.name, r, got, tc.want)
		}
	}
}

// TestMongoPutManyChunks: a batch larger than a chunk goes as one
// bulkWrite per chunk, and answers across chunk boundaries are each
// write's own (R12).
func TestMongoPutManyChunks(t *testing.T) {
	ctx := context.Background()
	d, _, p := mongoBatch(t)
	chunk := d.chunk // mongoBatchChunk, or ferretBatchChunk on FerretDB
	n := 2*chunk + 1
	exp := time.UnixMilli(1_800_000_000_000).UTC()
	conflict := map[int]bool{0: true, chunk - 1: true, chunk: true, 2 * chunk: true}
	var existing []string
	for i := range conflict {
		existing = append(existing, fmt.Sprintf("k%04d", i))
	}
	testkit.PutAll(t, d, exp, existing...)
	ws := make([]lease.Write, n)
	for i := range ws {
		ws[i] = lease.Write{Rec: lease.Record{Key: fmt.Sprintf("k%04d", i), Owner: "o", Epoch: 1, ExpiresAt: exp}, Pre: lease.Precondition{Absent: true}}
	}
	inserts := p.Seen("insert")
	results, err := d.PutMany(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Seen("insert") - inserts; got != 3 {
		t.Errorf("%d inserts took %d insert commands; want 3 (chunks of %d)", n, got, chunk)
	}
	for i, r := range results {
		if conflict[i] != errors.Is(r.Err, lease.ErrConflict) || (!conflict[i] && (r.Err != nil || r.Version != 1)) {
			t.Errorf("write %d: %+v; want conflict %v", i, r, conflict[i])
		}
	}
	got, err := d.List(ctx, "k", "", 2*n)
	if err != nil || len(got) != n {
		t.Fatalf("List after the batch: %d records, %v; want %d", len(got), err, n)
	}
	// Renew them all: one update command per chunk, every one matched, so
	// no read to tell which.
	for i := range ws {
		ws[i].Pre = lease.Precondition{Version: 1}
		ws[i].Rec.ExpiresAt = exp.Add(time.Minute)
	}
	updates, finds := p.Seen("update"), p.Seen("find")
	results, err = d.PutMany(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Seen("update") - updates; got != 3 || p.Seen("find") != finds {
		t.Errorf("%d renewals took %d update commands and %d finds; want 3 and none", n, got, p.Seen("find")-finds)
	}
	for i, r := range results {
		if r.Err != nil || r.Version != 2 {
			t.Fatalf("renewal %d: %+v; want version 2", i, r)
		}
	}
}

// TestMongoBatchContextAndClose: a cancelled ctx stops PutMany, GetMany
// and List before they send anything; a closed driver refuses them with
// ErrClosed.
func TestMongoBatchContextAndClose(t *testing.T) {
	d, _, _ := mongoBatch(t)
	ctx, cancel := context.WithCancel(context.Background())
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
	if _, _, err := d.Get(context.Background(), "a"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("after the cancelled PutMany: %v; want nothing written", err)
	}
	testkit.WantErr(t, "Close", d.Close(), nil)
	_, err := d.PutMany(context.Background(), ws)
	testkit.WantErr(t, "PutMany after Close", err, lease.ErrClosed)
	_, err = d.GetMany(context.Background(), []string{"a"})
	testkit.WantErr(t, "GetMany after Close", err, lease.ErrClosed)
	_, err = d.List(context.Background(), "", "", 10)
	testkit.WantErr(t, "List after Close", err, lease.ErrClosed)
}

// TestMongoGetMany: each key is answered as Get would: its record and
// version, ErrNotFound, or ErrCorrupt for a document that does not parse,
// without changing the other keys' answers (R10, R12), in one find.
func TestMongoGetMany(t *testing.T) {
	ctx := context.Background()
	d, coll, p := mongoBatch(t)
	exp := time.UnixMilli(1_800_000_000_000).UTC()
	keys := []string{"g0", "g1", "g2", "g3"}
	testkit.PutAll(t, d, exp, keys...)
	if _, err := coll.UpdateOne(ctx, byID("g1"), bson.D{{Key: "$set", Value: bson.D{{Key: "released", Value: "no"}}}}); err != nil {
		t.Fatal(err)
	}
	ask := []string{"nope", "g1", "g0", "g2", "g3", "g0"}
	finds := p.Seen("find")
	results, err := d.GetMany(ctx, ask)
	if err != nil || len(results) != len(ask) {
		t.Fatalf("GetMany: %d results, %v", len(results), err)
	}
	if got := p.Seen("find") - finds; got != 1 {
		t.Errorf("GetMany of %d keys made %d finds; want 1", len(ask), got)
	}
	finds, getMores := p.Seen("find"), p.Seen("getMore")
	if _, err := d.GetMany(ctx, keys); err != nil {
		t.Fatal(err)
	}
	if f, g := p.Seen("find")-finds, p.Seen("getMore")-getMores; f != 1 || g != 0 {
		t.Errorf("GetMany of %d keys that all exist made %d finds and %d getMores; want 1 and 0", len(keys), f, g)
	}
	for i, r := range results {
		switch key := ask[i]; key {
		case "nope":
			testkit.WantErr(t, "GetMany of a missing key", r.Err, lease.ErrNotFound)
		case "g1":
			testkit.WantErr(t, "GetMany of a corrupt document", r.Err, lease.ErrCorrupt)
		default:
			want := lease.Record{Key: key, Owner: "old", Epoch: 1, ExpiresAt: exp}
			if r.Err != nil || r.Version != 1 || r.Rec != want {
				t.Errorf("GetMany(%s) = %+v; want %+v at version 1", key, r, want)
			}
		}
	}
}

// TestMongoList_R14: List pages through keys in ascending byte order,
// within the prefix, after `after`, at most limit at a time, in one find
// per page; a document that does not parse is an error matching
// ErrCorrupt that names its key (R10).
func TestMongoList_R14(t *testing.T) {
	ctx := context.Background()
	d, coll, _ := mongoBatch(t)
	exp := time.UnixMilli(1_800_000_000_000).UTC()
	keys := []string{"a/b", "a/B", "a/_", "a/-", "a/.x", "a:b", "a@b", "a/0", "a/@", "a", "b", "A", "a/a/a", "a/Z", "ab"}
	testkit.PutAll(t, d, exp, keys...)
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: int64(7)}, {Key: "owner", Value: "not a lease"}}); err != nil {
		t.Fatal(err)
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for _, tc := range []struct {
		prefix, after string
		limit         int
	}{{"", "", 100}, {"a/", "", 100}, {"a/", "a/B", 100}, {"a", "", 3}, {"a/", "a/a/a", 100}, {"z", "", 10}, {"", "", 0}, {"a/", "0", 100}, {"a/", "b", 100}, {"\xff", "", 10}} {
		var want []string
		for _, k := range sorted {
			if strings.HasPrefix(k, tc.prefix) && k > tc.after && len(want) < tc.limit {
				want = append(want, k)
			}
		}
		recs, err := d.List(ctx, tc.prefix, tc.after, tc.limit)
		var got []string
		for _, r := range recs {
			got = append(got, r.Key)
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("List(%q, %q, %d) = %q, %v; want %q", tc.prefix, tc.after, tc.limit, got, err, want)
		}
	}
	if paged := testkit.ListPaged(t, d, "", 4); !slices.Equal(paged, sorted) {
		t.Errorf("paged List = %q; want %q", paged, sorted)
	}
	if _, err := coll.UpdateOne(ctx, byID("a/a/a"), bson.D{{Key: "$set", Value: bson.D{{Key: "version", Value: "x"}}}}); err != nil {
		t.Fatal(err)
	}
	_, err := d.List(ctx, "a/", "", 100)
	testkit.WantErr(t, "List over a corrupt document", err, lease.ErrCorrupt)
	if !strings.Contains(err.Error(), `"a/a/a"`) {
		t.Errorf("List over a corrupt document: %v; want it to name the key", err)
	}
	if recs, err := d.List(ctx, "b", "", 100); err != nil || len(recs) != 1 {
		t.Errorf("List of another prefix beside a corrupt document: %v, %v; want b alone", recs, err)
	}
}

// TestMongoAmbiguousBatch_R9_R12: the proxy forwards a batch's update
// command and drops its reply, so the writes land and the client sees a
// cut connection. PutMany reports every write of the batch as unknown,
// never as a conflict or a success; a re-read shows each write applied.
// Through the store, ReleaseAll with its writes' replies dropped settles
// each key by re-reading: released, durable (R7, R9, R13).
func TestMongoAmbiguousBatch_R9_R12(t *testing.T) {
	ctx := context.Background()
	d, _, p := mongoBatch(t)
	exp := time.UnixMilli(1_800_000_000_000).UTC()
	keys := []string{"a", "b", "c"}
	testkit.PutAll(t, d, exp, keys...)
	var ws []lease.Write
	for _, k := range keys {
		ws = append(ws, lease.Write{Rec: lease.Record{Key: k, Owner: "new", Epoch: 2, ExpiresAt: exp}, Pre: lease.Precondition{Version: 1}})
	}
	hit := p.DropReply("update")
	results, err := d.PutMany(ctx, ws)
	testkit.RequireHit(t, hit)
	t.Logf("PutMany with its reply dropped: %+v, %v", results, err)
	for i := range ws {
		if err == nil && (results[i].Err == nil || errors.Is(results[i].Err, lease.ErrConflict)) {
			t.Errorf("write %d with its reply dropped: %+v; want an unknown outcome", i, results[i])
		}
	}
	reread, err := d.GetMany(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reread {
		if r.Err != nil || r.Version != 2 || r.Rec.Owner != "new" {
			t.Errorf("%s after the dropped reply: %+v; want the batch's write at version 2", keys[i], r)
		}
	}

	clock := testclock.New()
	s := testkit.NewDocStore(t, d, clock, "me")
	var held []string
	for i := range 5 {
		key := fmt.Sprintf("r%d", i)
		testkit.MustAcquire(t, s, key)
		held = append(held, key)
	}
	hit = p.DropReply("update")
	updates := p.Seen("update")
	if err := s.ReleaseAll(ctx); err != nil {
		t.Fatalf("ReleaseAll with a reply dropped: %v; want nil (R9, R13)", err)
	}
	testkit.RequireHit(t, hit)
	if got := p.Seen("update") - updates; got != 1 {
		t.Errorf("ReleaseAll of %d keys sent %d update commands; want them in 1 batch", len(held), got)
	}
	after, err := d.GetMany(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range after {
		if r.Err != nil || !r.Rec.Released || r.Rec.Owner != "me" {
			t.Errorf("%s after ReleaseAll: %+v; want released by me", held[i], r)
		}
	}
}
