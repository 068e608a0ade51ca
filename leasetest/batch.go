package leasetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/leasekit/lease"
)

// The optional driver interfaces (lease.BatchDriver, lease.BatchReader,
// lease.ListDriver) are checked directly, write by write: a store uses them
// for many keys at once (R12), where a wrong answer for one key gives two
// stores the same key, and the store-level cases above cannot tell a batch
// that is wrong from one that was never used.

// optionalCase checks one optional interface; it runs only when the
// driver implements it.
type optionalCase struct {
	name       string
	implements func(lease.Driver) bool
	run        func(t *testing.T, open DriverOpener)
}

func isBatchDriver(d lease.Driver) bool { _, ok := d.(lease.BatchDriver); return ok }
func isBatchReader(d lease.Driver) bool { _, ok := d.(lease.BatchReader); return ok }
func isListDriver(d lease.Driver) bool  { _, ok := d.(lease.ListDriver); return ok }

var optionalCases = []optionalCase{
	{"PutMany each write has its own precondition, results in order", isBatchDriver, testPutManyMixed},
	{"PutMany Absent over an existing record is ErrConflict", isBatchDriver, testPutManyAbsentExisting},
	{"PutMany batches larger than a chunk keep each write's answer", isBatchDriver, testPutManyLarge},
	{"PutMany with a cancelled context reports no write done", isBatchDriver, testPutManyCancelled},
	{"GetMany fresh versions and missing keys, in order", isBatchReader, testGetMany},
	{"List prefix, byte order and paging", isListDriver, testList},
}

// runOptionalCases runs the cases of the optional interfaces d implements,
// and says which it skips.
func runOptionalCases(t *testing.T, d lease.Driver, open DriverOpener) {
	var missing []string
	for _, iface := range []struct {
		name string
		has  func(lease.Driver) bool
	}{{"BatchDriver", isBatchDriver}, {"BatchReader", isBatchReader}, {"ListDriver", isListDriver}} {
		if !iface.has(d) {
			missing = append(missing, iface.name)
		}
	}
	if len(missing) > 0 {
		t.Logf("the driver does not implement %v: their cases do not run", missing)
	}
	for _, c := range optionalCases {
		if c.implements(d) {
			t.Run(c.name, func(t *testing.T) { c.run(t, open) })
		}
	}
}

// batchRecord is a record the optional cases write: its expiry is kept
// exactly by every driver (a whole millisecond of the suite's clock).
func batchRecord(key, owner string, epoch uint64, released bool) lease.Record {
	return lease.Record{Key: key, Owner: owner, Epoch: epoch, ExpiresAt: NewClock().Now().Add(TTL), Released: released}
}

// mustPut writes rec through Put and returns its version.
func mustPut(t *testing.T, d lease.Driver, rec lease.Record, pre lease.Precondition) uint64 {
	t.Helper()
	v, err := d.Put(ctxBG, rec, pre)
	if err != nil {
		t.Fatalf("Put(%+v, %+v) = %v", rec, pre, err)
	}
	return v
}

// wantStored checks that key holds rec at version v (v == 0: any version),
// or, for a nil rec, that it has no record.
func wantStored(t *testing.T, d lease.Driver, key string, rec *lease.Record, v uint64) {
	t.Helper()
	got, gotV, err := d.Get(ctxBG, key)
	switch {
	case rec == nil && !errors.Is(err, lease.ErrNotFound):
		t.Errorf("Get(%q) = %+v v%d, %v; want ErrNotFound (nothing written)", key, got, gotV, err)
	case rec == nil:
	case err != nil || !sameState(got, *rec) || (v != 0 && gotV != v):
		t.Errorf("Get(%q) = %+v v%d, %v; want %+v v%d", key, got, gotV, err, *rec, v)
	}
}

// testPutManyMixed sends one batch in which each write meets or misses its
// own precondition: every answer is that write's, in the batch's order,
// and the misses write nothing.
func testPutManyMixed(t *testing.T, open DriverOpener) {
	d, ns := open(t), newNamespace()
	bd := d.(lease.BatchDriver)
	old := batchRecord(ns+"old", "alice", 3, false)
	vOld := mustPut(t, d, old, lease.Precondition{Absent: true})
	stale := batchRecord(ns+"stale", "alice", 1, false)
	vStale0 := mustPut(t, d, stale, lease.Precondition{Absent: true})
	stale.Released = true
	vStale1 := mustPut(t, d, stale, lease.Precondition{Version: vStale0})
	renewed := batchRecord(ns+"renewed", "carol", 5, false)
	vRenewed := mustPut(t, d, renewed, lease.Precondition{Absent: true})

	type want struct {
		conflict bool
		before   *lease.Record // the record a miss must leave; nil: none
		beforeV  uint64
	}
	// Keys out of byte order, so that a driver answering in key order fails.
	ws := []lease.Write{
		{Rec: batchRecord(ns+"z-new", "bob", 1, false), Pre: lease.Precondition{Absent: true}},
		{Rec: batchRecord(ns+"old", "bob", 1, false), Pre: lease.Precondition{Absent: true}},
		{Rec: batchRecord(ns+"renewed", "carol", 5, true), Pre: lease.Precondition{Version: vRenewed}},
		{Rec: batchRecord(ns+"stale", "bob", 2, false), Pre: lease.Precondition{Version: vStale0}},
		{Rec: batchRecord(ns+"missing", "bob", 1, false), Pre: lease.Precondition{Version: 1}},
		{Rec: batchRecord(ns+"a-new", "dave", 1, false), Pre: lease.Precondition{Absent: true}},
	}
	wants := []want{
		{},
		{conflict: true, before: &old, beforeV: vOld},
		{},
		{conflict: true, before: &stale, beforeV: vStale1},
		{conflict: true},
		{},
	}
	results, err := bd.PutMany(ctxBG, ws)
	if err != nil || len(results) != len(ws) {
		t.Fatalf("PutMany = %d results, %v; want %d results, no error", len(results), err, len(ws))
	}
	for i, w := range ws {
		r := results[i]
		if wants[i].conflict {
			if !errors.Is(r.Err, lease.ErrConflict) {
				t.Errorf("write %d (%s, %+v): %+v; want ErrConflict", i, w.Rec.Key, w.Pre, r)
			}
			wantStored(t, d, w.Rec.Key, wants[i].before, wants[i].beforeV)
			continue
		}
		if r.Err != nil || r.Version == 0 || (!w.Pre.Absent && r.Version <= w.Pre.Version) {
			t.Errorf("write %d (%s, %+v): %+v; want a new version above %d", i, w.Rec.Key, w.Pre, r, w.Pre.Version)
			continue
		}
		wantStored(t, d, w.Rec.Key, &w.Rec, r.Version)
	}
}

// testPutManyAbsentExisting: an Absent write over any existing record, held
// or released, is refused. A driver that makes it an upsert gives a second
// store epoch 1 of a key another store holds.
func testPutManyAbsentExisting(t *testing.T, open DriverOpener) {
	d, ns := open(t), newNamespace()
	bd := d.(lease.BatchDriver)
	for _, released := range []bool{false, true} {
		key := fmt.Sprintf("%sk-released-%v", ns, released)
		rec := batchRecord(key, "alice", 7, released)
		v := mustPut(t, d, rec, lease.Precondition{Absent: true})
		results, err := bd.PutMany(ctxBG, []lease.Write{{Rec: batchRecord(key, "bob", 1, false), Pre: lease.Precondition{Absent: true}}})
		if err != nil || len(results) != 1 || !errors.Is(results[0].Err, lease.ErrConflict) {
			t.Errorf("PutMany(Absent) over %+v = %+v, %v; want ErrConflict", rec, results, err)
		}
		wantStored(t, d, key, &rec, v)
	}
}

// largeBatch spans several requests of a driver that splits batches into
// small chunks (FerretDB's bulk writes of 50), so that answers cross chunk
// boundaries. Larger chunks (MongoDB's 1000, SQLite's 2500) are their
// drivers' own tests' business: a batch that large costs a slow backend a
// minute here, in every run.
const largeBatch = 101

// testPutManyLarge: in a batch that spans chunks, every write still gets
// its own answer in its own place.
func testPutManyLarge(t *testing.T, open DriverOpener) {
	d, ns := open(t), newNamespace()
	bd := d.(lease.BatchDriver)
	key := func(i int) string { return fmt.Sprintf("%sk%05d", ns, i) }
	first := make([]lease.Write, largeBatch)
	for i := range first {
		first[i] = lease.Write{Rec: batchRecord(key(i), "alice", 1, false), Pre: lease.Precondition{Absent: true}}
	}
	created, err := bd.PutMany(ctxBG, first)
	if err != nil || len(created) != largeBatch {
		t.Fatalf("PutMany of %d new records = %d results, %v", largeBatch, len(created), err)
	}
	for i, r := range created {
		if r.Err != nil {
			t.Fatalf("write %d of %d new records: %v", i, largeBatch, r.Err)
		}
	}
	// Even writes update with their version; odd ones are Absent over an
	// existing record.
	second := make([]lease.Write, largeBatch)
	for i := range second {
		pre := lease.Precondition{Version: created[i].Version}
		if i%2 == 1 {
			pre = lease.Precondition{Absent: true}
		}
		second[i] = lease.Write{Rec: batchRecord(key(i), "alice", 1, true), Pre: pre}
	}
	results, err := bd.PutMany(ctxBG, second)
	if err != nil || len(results) != largeBatch {
		t.Fatalf("PutMany of %d mixed writes = %d results, %v", largeBatch, len(results), err)
	}
	for i, r := range results {
		ok := r.Err == nil && r.Version > created[i].Version
		if i%2 == 1 {
			ok = errors.Is(r.Err, lease.ErrConflict)
		}
		if !ok {
			t.Fatalf("write %d of %d (precondition %+v): %+v; want it answered alone", i, largeBatch, second[i].Pre, r)
		}
	}
	for _, i := range []int{0, 1, 49, 50, 51, largeBatch - 1} {
		want := first[i].Rec
		v := created[i].Version
		if i%2 == 0 {
			want, v = second[i].Rec, results[i].Version
		}
		wantStored(t, d, key(i), &want, v)
	}
}

// testPutManyCancelled: a batch sent with an ended context may fail as a
// whole or write by write, but never reports a write done.
func testPutManyCancelled(t *testing.T, open DriverOpener) {
	d, ns := open(t), newNamespace()
	ctx, cancel := context.WithCancel(ctxBG)
	cancel()
	results, err := d.(lease.BatchDriver).PutMany(ctx, []lease.Write{
		{Rec: batchRecord(ns+"k", "alice", 1, false), Pre: lease.Precondition{Absent: true}},
	})
	if err == nil && (len(results) != 1 || results[0].Err == nil) {
		t.Fatalf("PutMany with a cancelled context = %+v, nil; want an error", results)
	}
}

// testGetMany: GetMany answers each key as Get would, in the order asked,
// with the version of the latest write: a version one write old makes the
// store's next compare-and-swap fail, or worse, pass on a stale state.
func testGetMany(t *testing.T, open DriverOpener) {
	d, ns := open(t), newNamespace()
	br := d.(lease.BatchReader)
	twice := batchRecord(ns+"twice", "alice", 1, false)
	v := mustPut(t, d, twice, lease.Precondition{Absent: true})
	twice.Released = true
	vTwice := mustPut(t, d, twice, lease.Precondition{Version: v})
	once := batchRecord(ns+"once", "bob", 4, false)
	vOnce := mustPut(t, d, once, lease.Precondition{Absent: true})

	keys := []string{ns + "twice", ns + "missing", ns + "once"}
	check := func(step string, want []*lease.Record, versions []uint64) {
		t.Helper()
		results, err := br.GetMany(ctxBG, keys)
		if err != nil || len(results) != len(keys) {
			t.Fatalf("%s: GetMany = %d results, %v; want %d", step, len(results), err, len(keys))
		}
		for i, r := range results {
			switch {
			case want[i] == nil && !errors.Is(r.Err, lease.ErrNotFound):
				t.Errorf("%s: GetMany answer %d (%s) = %+v; want ErrNotFound", step, i, keys[i], r)
			case want[i] != nil && (r.Err != nil || r.Version != versions[i] || !sameState(r.Rec, *want[i])):
				t.Errorf("%s: GetMany answer %d (%s) = %+v; want %+v v%d, as Get says", step, i, keys[i], r, *want[i], versions[i])
			}
		}
	}
	check("after two writes", []*lease.Record{&twice, nil, &once}, []uint64{vTwice, 0, vOnce})

	// The versions it returns are the ones a compare-and-swap needs.
	results, _ := br.GetMany(ctxBG, keys[2:])
	once.Epoch = 5
	if len(results) == 1 {
		if v, err := d.Put(ctxBG, once, lease.Precondition{Version: results[0].Version}); err != nil {
			t.Errorf("Put with GetMany's version %d = %v; want it to succeed", results[0].Version, err)
		} else {
			vOnce = v
		}
	}
	created := batchRecord(ns+"missing", "carol", 1, false)
	vCreated := mustPut(t, d, created, lease.Precondition{Absent: true})
	check("after a third write and a new record", []*lease.Record{&twice, &created, &once}, []uint64{vTwice, vCreated, vOnce})
}

// testList: List yields the records under a prefix in ascending byte order
// (no collation, no LIKE wildcards), pages by `after` and `limit`, and
// includes released records (Holders filters them, R14).
func testList(t *testing.T, open DriverOpener) {
	d, ns := open(t), newNamespace()
	ld := d.(lease.ListDriver)
	under := []string{"p/B", "p/a", "p/a-b", "p/a.b", "p/a/b", "p/a:b", "p/a@b", "p/a_b", "p/ab", "p/ab/c", "p/b"}
	outside := []string{"p", "pa", "q/a", "o/z"}
	stored := map[string]lease.Record{}
	// Written in reverse, so that a driver returning insertion order fails.
	for i, k := range slices.Backward(slices.Concat(under, outside)) {
		rec := batchRecord(ns+k, "alice", uint64(i+1), i%3 == 0)
		mustPut(t, d, rec, lease.Precondition{Absent: true})
		stored[rec.Key] = rec
	}
	keysOf := func(names []string) []string {
		var keys []string
		for _, n := range names {
			keys = append(keys, ns+n)
		}
		slices.Sort(keys) // Go compares strings bytewise
		return keys
	}
	list := func(prefix, after string, limit int) []string {
		t.Helper()
		recs, err := ld.List(ctxBG, prefix, after, limit)
		if err != nil {
			t.Fatalf("List(%q, %q, %d) = %v", prefix, after, limit, err)
		}
		if len(recs) > limit {
			t.Errorf("List(%q, %q, %d) returned %d records; want at most %d", prefix, after, limit, len(recs), limit)
		}
		var keys []string
		for _, r := range recs {
			if want, ok := stored[r.Key]; !ok || !sameState(r, want) {
				t.Errorf("List(%q, %q, %d) yields %+v; want the stored %+v", prefix, after, limit, r, want)
			}
			keys = append(keys, r.Key)
		}
		return keys
	}
	wantKeys := func(what string, got, want []string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s = %q; want %q", what, got, want)
		}
	}
	all := keysOf(under)
	wantKeys("List of the prefix", list(ns+"p/", "", 100), all)
	wantKeys(`List of a prefix ending in "_" (not a wildcard)`, list(ns+"p/a_", "", 100), keysOf([]string{"p/a_b"}))
	wantKeys("List of a prefix that is a key", list(ns+"p/a", "", 100), keysOf([]string{"p/a", "p/a-b", "p/a.b", "p/a/b", "p/a:b", "p/a@b", "p/a_b", "p/ab", "p/ab/c"}))
	wantKeys("List after a key", list(ns+"p/", ns+"p/a.b", 100), all[slices.Index(all, ns+"p/a.b")+1:])
	wantKeys("List after a key before the prefix", list(ns+"p/", ns+"o/z", 100), all)
	wantKeys("List after the prefix's last key", list(ns+"p/", ns+"p/b", 100), nil)
	wantKeys("List of a prefix nothing has", list(ns+"nothing/", "", 100), nil)
	wantKeys("List with limit 0", list(ns+"p/", "", 0), nil)
	var paged []string
	for after := ""; ; {
		page := list(ns+"p/", after, 3)
		paged = append(paged, page...)
		if len(page) < 3 || len(paged) > len(all) {
			break
		}
		after = page[len(page)-1]
	}
	wantKeys("List by pages of 3", paged, all)
}
