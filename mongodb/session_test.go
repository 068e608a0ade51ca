package mongodb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/mongoproxy"
	"github.com/leasekit/lease/internal/mongoserver"
	"github.com/leasekit/lease/internal/testkit"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// sessionID is a valid session id made from n.
func sessionID(n int) string { return fmt.Sprintf("%032x", n) }

// newSessionDriver makes a driver on a fresh collection and returns it
// with its key and session collections.
func newSessionDriver(t *testing.T) (lease.SessionDriver, *mongo.Collection, *mongo.Collection) {
	t.Helper()
	coll := mongoserver.Collection(t, mongoserver.SharedClient(t))
	d, ok := newTestMongoDriverOn(t, coll).(lease.SessionDriver)
	if !ok {
		t.Fatal("the mongodb driver is not a lease.SessionDriver")
	}
	return d, coll, coll.Database().Collection(coll.Name() + sessionCollectionSuffix)
}

// TestMongoSessionPut_R24: session records keep the compare-and-swap of
// key records: Absent creates only where no record has the id (R18: never
// an upsert), a stale version is ErrConflict and writes nothing, versions
// strictly increase, and what is read back is what was written, in
// milliseconds (a BSON date).
func TestMongoSessionPut_R24(t *testing.T) {
	ctx := context.Background()
	d, _, sessions := newSessionDriver(t)
	if !lease.DriverCapabilities(d).Sessions {
		t.Fatal("the mongodb driver does not state Capabilities.Sessions (R24)")
	}
	id := sessionID(1)
	testkit.WantErr(t, "GetSession of nothing", getSessionErr(d, id), lease.ErrNotFound)

	live := lease.SessionRecord{ID: id, Owner: "alice", ExpiresAt: t0.Add(1500 * time.Microsecond), State: lease.SessionLive}
	v1, err := d.PutSession(ctx, live, lease.Precondition{Absent: true})
	if err != nil || v1 != 1 {
		t.Fatalf("create: %d, %v; want version 1", v1, err)
	}
	wantSession(t, d, live, v1)
	ended := lease.SessionRecord{ID: id, Owner: "bob", ExpiresAt: t0, State: lease.SessionEndedUnclean}
	_, err = d.PutSession(ctx, ended, lease.Precondition{Absent: true})
	testkit.WantErr(t, "create over an existing session (R18)", err, lease.ErrConflict)
	wantSession(t, d, live, v1)

	renewed := live
	renewed.ExpiresAt = t0.Add(time.Minute)
	v2, err := d.PutSession(ctx, renewed, lease.Precondition{Version: v1})
	if err != nil || v2 <= v1 {
		t.Fatalf("renew at version %d: %d, %v; want a larger version", v1, v2, err)
	}
	wantSession(t, d, renewed, v2)
	for _, stale := range []uint64{0, v1, v2 + 1} {
		_, err := d.PutSession(ctx, ended, lease.Precondition{Version: stale})
		testkit.WantErr(t, fmt.Sprintf("update at version %d of a session at %d", stale, v2), err, lease.ErrConflict)
	}
	wantSession(t, d, renewed, v2)
	v3, err := d.PutSession(ctx, ended, lease.Precondition{Version: v2})
	if err != nil || v3 <= v2 {
		t.Fatalf("end at version %d: %d, %v; want a larger version", v2, v3, err)
	}
	wantSession(t, d, ended, v3)

	// The document as mongosh shows it.
	var doc bson.M
	if err := sessions.FindOne(ctx, byID(id)).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	want := bson.M{"_id": id, "owner": "bob", "expires": bson.NewDateTimeFromTime(t0), "state": int32(3), "version": int64(v3)}
	if !reflect.DeepEqual(doc, want) {
		t.Fatalf("session document %v; want %v", doc, want)
	}

	// A record no store could write is refused, and nothing is written.
	for _, bad := range []lease.SessionRecord{
		{ID: sessionID(2), Owner: "", ExpiresAt: t0, State: lease.SessionLive},
		{ID: sessionID(2), Owner: "a b", ExpiresAt: t0, State: lease.SessionLive},
		{ID: sessionID(2), Owner: "alice", ExpiresAt: t0, State: 0},
		{ID: sessionID(2), Owner: "alice", ExpiresAt: t0, State: 4},
		{ID: strings.ToUpper(sessionID(0xabc)), Owner: "alice", ExpiresAt: t0, State: lease.SessionLive},
	} {
		if _, err := d.PutSession(ctx, bad, lease.Precondition{Absent: true}); err == nil {
			t.Errorf("PutSession(%+v) accepted", bad)
		}
	}
	if n, err := sessions.CountDocuments(ctx, bson.D{}); err != nil || n != 1 {
		t.Fatalf("%d session documents after refused writes, %v; want 1", n, err)
	}
}

// getSessionErr is GetSession's error.
func getSessionErr(d lease.SessionDriver, id string) error {
	_, _, err := d.GetSession(context.Background(), id)
	return err
}

// wantSession reads want's session back: want in whole milliseconds, UTC,
// at version v.
func wantSession(t *testing.T, d lease.SessionDriver, want lease.SessionRecord, v uint64) {
	t.Helper()
	want.ExpiresAt = time.UnixMilli(want.ExpiresAt.UnixMilli()).UTC()
	got, gv, err := d.GetSession(context.Background(), want.ID)
	if err != nil || got != want || gv != v {
		t.Fatalf("GetSession(%s) = %+v version %d, %v; want %+v version %d", want.ID, got, gv, err, want, v)
	}
}

// TestMongoRemoveSessions_R22 deletes only sessions that expired before
// the bound and that no key document names, released or not; a named one
// stays, and so does one expiring at the bound; limit caps the count.
func TestMongoRemoveSessions_R22(t *testing.T) {
	ctx := context.Background()
	d, _, sessions := newSessionDriver(t)
	before := t0.Add(500 * time.Microsecond) // the bound rounds up: t0 is before it, t0+1ms is not
	put := func(n int, exp time.Time, st lease.SessionState) string {
		t.Helper()
		id := sessionID(n)
		if _, err := d.PutSession(ctx, lease.SessionRecord{ID: id, Owner: "o", ExpiresAt: exp, State: st}, lease.Precondition{Absent: true}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	name := func(key, id string, released bool) {
		t.Helper()
		rec := lease.Record{Key: key, Owner: "o", Epoch: 1, ExpiresAt: lease.SessionKeyExpiry, Released: released, Session: id}
		if _, err := d.Put(ctx, rec, lease.Precondition{Absent: true}); err != nil {
			t.Fatal(err)
		}
	}
	// Named ones sort first (earliest expiry): they must not hide the rest.
	named := put(1, t0.Add(-3*time.Hour), lease.SessionEndedClean)
	name("held", named, false)
	namedReleased := put(2, t0.Add(-3*time.Hour), lease.SessionEndedUnclean)
	name("released", namedReleased, true)
	afterBound := put(3, t0.Add(time.Millisecond), lease.SessionLive)
	live := put(4, t0.Add(time.Hour), lease.SessionLive)
	var free []string
	for i := range 5 {
		free = append(free, put(10+i, t0.Add(-time.Duration(i)*time.Minute), lease.SessionState(1+i%3)))
	} // free[0] expires at t0, under a millisecond before the bound

	if n, err := d.RemoveSessions(ctx, before, 0); err != nil || n != 0 {
		t.Fatalf("RemoveSessions limit 0: %d, %v; want 0", n, err)
	}
	if n, err := d.RemoveSessions(ctx, before, 2); err != nil || n != 2 {
		t.Fatalf("RemoveSessions limit 2: %d, %v; want 2", n, err)
	}
	if n, err := d.RemoveSessions(ctx, before, 10); err != nil || n != 3 {
		t.Fatalf("RemoveSessions limit 10: %d, %v; want the 3 left", n, err)
	}
	if n, err := d.RemoveSessions(ctx, before, 10); err != nil || n != 0 {
		t.Fatalf("RemoveSessions again: %d, %v; want 0", n, err)
	}
	for _, id := range free {
		testkit.WantErr(t, "GetSession of a removed session "+id, getSessionErr(d, id), lease.ErrNotFound)
	}
	for _, id := range []string{named, namedReleased, afterBound, live} {
		if err := getSessionErr(d, id); err != nil {
			t.Errorf("session %s after RemoveSessions: %v; want it kept", id, err)
		}
	}
	if n, err := sessions.CountDocuments(ctx, bson.D{}); err != nil || n != 4 {
		t.Fatalf("%d session documents left, %v; want 4", n, err)
	}

	// Once no key names it, a session goes.
	rec, v, err := d.Get(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	rec.Session = ""
	if _, err := d.Put(ctx, rec, lease.Precondition{Version: v}); err != nil {
		t.Fatal(err)
	}
	if n, err := d.RemoveSessions(ctx, before, 10); err != nil || n != 1 {
		t.Fatalf("RemoveSessions after the key let go of %s: %d, %v; want 1", named, n, err)
	}
	testkit.WantErr(t, "GetSession of "+named, getSessionErr(d, named), lease.ErrNotFound)
}

// TestMongoRemoveSessionsPages_R22: more named expired sessions than one
// read returns come first; the unnamed one after them is still found.
func TestMongoRemoveSessionsPages_R22(t *testing.T) {
	ctx := context.Background()
	d, coll, sessions := newSessionDriver(t)
	const named = removePage + 1
	var sess, keys []any
	for i := range named {
		id := sessionID(i)
		// All at one expiry: the next page starts by id.
		sess = append(sess, append(byID(id), mongoSessionFields(lease.SessionRecord{ID: id, Owner: "o", ExpiresAt: t0, State: lease.SessionEndedClean}, 1)...))
		key := fmt.Sprintf("k%03d", i)
		keys = append(keys, append(byID(key), mongoFields(lease.Record{Key: key, Owner: "o", Epoch: 1, ExpiresAt: lease.SessionKeyExpiry, Session: id}, 1)...))
	}
	free := sessionID(named)
	sess = append(sess, append(byID(free), mongoSessionFields(lease.SessionRecord{ID: free, Owner: "o", ExpiresAt: t0, State: lease.SessionEndedClean}, 1)...))
	if _, err := sessions.InsertMany(ctx, sess); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.InsertMany(ctx, keys); err != nil {
		t.Fatal(err)
	}
	if n, err := d.RemoveSessions(ctx, t0.Add(time.Second), 1); err != nil || n != 1 {
		t.Fatalf("RemoveSessions: %d, %v; want the one unnamed session behind %d named ones", n, err, named)
	}
	testkit.WantErr(t, "GetSession of the unnamed session", getSessionErr(d, free), lease.ErrNotFound)
	if n, err := sessions.CountDocuments(ctx, bson.D{}); err != nil || n != named {
		t.Fatalf("%d session documents left, %v; want %d", n, err, named)
	}
}

// TestMongoCorruptSessionDocuments_R10 plants session documents no store
// could have written: GetSession refuses each with ErrCorrupt naming the
// session, PutSession at its version conflicts and leaves it as it is, and
// RemoveSessions leaves it.
func TestMongoCorruptSessionDocuments_R10(t *testing.T) {
	ctx := context.Background()
	d, _, sessions := newSessionDriver(t)
	good := func(id string) bson.D {
		return append(byID(id), mongoSessionFields(lease.SessionRecord{ID: id, Owner: "o", ExpiresAt: t0, State: lease.SessionLive}, 2)...)
	}
	set := func(doc bson.D, key string, v any) bson.D {
		for i := range doc {
			if doc[i].Key == key {
				doc[i].Value = v
			}
		}
		return doc
	}
	drop := func(doc bson.D, key string) bson.D {
		var out bson.D
		for _, e := range doc {
			if e.Key != key {
				out = append(out, e)
			}
		}
		return out
	}
	cases := []struct {
		name string
		doc  bson.D
	}{
		{"missing owner", drop(good(sessionID(1)), "owner")},
		{"empty owner", set(good(sessionID(2)), "owner", "")},
		{"owner with a space", set(good(sessionID(3)), "owner", "a b")},
		{"string expires", set(good(sessionID(4)), "expires", "soon")},
		{"state 0", set(good(sessionID(5)), "state", int32(0))},
		{"state 4", set(good(sessionID(6)), "state", int32(4))},
		{"state 257", set(good(sessionID(7)), "state", int32(257))},
		{"int64 state", set(good(sessionID(8)), "state", int64(1))},
		{"string state", set(good(sessionID(9)), "state", "live")},
		{"missing version", drop(good(sessionID(10)), "version")},
		{"version 0", set(good(sessionID(11)), "version", int64(0))},
		{"int32 version", set(good(sessionID(12)), "version", int32(2))},
		{"owner in an array", set(good(sessionID(13)), "owner", bson.A{"o"})},
		{"expires in an array", set(good(sessionID(14)), "expires", bson.A{bson.NewDateTimeFromTime(t0)})},
		{"state in an array", set(good(sessionID(15)), "state", bson.A{int32(1)})},
		{"version in an array", set(good(sessionID(16)), "version", bson.A{int64(2)})},
		{"upper-case id", good(strings.ToUpper(sessionID(0xabc)))},
		{"short id", good("abc")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := tc.doc[0].Value.(string)
			if _, err := sessions.InsertOne(ctx, tc.doc); err != nil {
				t.Fatal(err)
			}
			before, err := sessions.FindOne(ctx, byID(id)).Raw()
			if err != nil {
				t.Fatal(err)
			}
			err = getSessionErr(d, id)
			testkit.WantErr(t, "GetSession", err, lease.ErrCorrupt)
			if err != nil && (strings.Count(err.Error(), id) != 1 || !isOneLine(err) || strings.Count(err.Error(), "lease:") != 1) {
				t.Errorf("GetSession: %q; want one line, one lease: prefix, naming %s once", err, id)
			}
			if lease.ValidateSessionID(id) == nil {
				rec := lease.SessionRecord{ID: id, Owner: "o", ExpiresAt: t0, State: lease.SessionEndedUnclean}
				_, err = d.PutSession(ctx, rec, lease.Precondition{Version: 2})
				testkit.WantErr(t, "PutSession at its version", err, lease.ErrConflict)
			}
			if _, err := d.RemoveSessions(ctx, t0.Add(time.Hour), 100); err != nil {
				t.Fatalf("RemoveSessions: %v", err)
			}
			after, err := sessions.FindOne(ctx, byID(id)).Raw()
			if err != nil || !bytes.Equal(before, after) {
				t.Errorf("document changed: %v -> %v (%v)", before, after, err)
			}
		})
	}
}

// TestMongoKeySession_R24: a key record's Session is kept exactly by Put,
// PutMany, Get, GetMany and List, and a document from before sessions
// (no session field) reads as "" and takes updates.
func TestMongoKeySession_R24(t *testing.T) {
	ctx := context.Background()
	coll := mongoserver.Collection(t, mongoserver.SharedClient(t))
	d := newTestMongoDriverOn(t, coll).(*mongoDriver)
	id, id2 := sessionID(0xfeed), sessionID(0xbeef)
	attached := lease.Record{Key: "a", Owner: "o", Epoch: 1, ExpiresAt: lease.SessionKeyExpiry, Session: id}
	v, err := d.Put(ctx, attached, lease.Precondition{Absent: true})
	if err != nil {
		t.Fatal(err)
	}
	wantKey(t, d, attached, v)
	perKey := attached
	perKey.Session, perKey.ExpiresAt = "", t0
	if v, err = d.Put(ctx, perKey, lease.Precondition{Version: v}); err != nil {
		t.Fatal(err)
	}
	wantKey(t, d, perKey, v)

	// The batch: an insert and an update, each with a session.
	b := lease.Record{Key: "b", Owner: "o", Epoch: 1, ExpiresAt: lease.SessionKeyExpiry, Session: id2}
	again := perKey
	again.Session, again.Epoch = id, 2
	res, err := d.PutMany(ctx, []lease.Write{{Rec: b, Pre: lease.Precondition{Absent: true}}, {Rec: again, Pre: lease.Precondition{Version: v}}})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("PutMany: %+v, %v", res, err)
	}
	wantKey(t, d, b, res[0].Version)
	wantKey(t, d, again, res[1].Version)
	got, err := d.GetMany(ctx, []string{"a", "b"})
	if err != nil || got[0].Rec != withMillis(again) || got[1].Rec != b {
		t.Fatalf("GetMany: %+v, %v; want sessions %s and %s", got, err, id, id2)
	}
	list, err := d.List(ctx, "", "", 10)
	if err != nil || len(list) != 2 || list[0] != withMillis(again) || list[1] != b {
		t.Fatalf("List: %+v, %v; want sessions %s and %s", list, err, id, id2)
	}
	// sameState tells records apart by session alone: PutMany's judge
	// must not take another session's write for its own.
	other := b
	other.Session = id
	if sameState(b, other) {
		t.Fatal("sameState ignores Session")
	}

	// A document from before sessions.
	old := bson.D{{Key: "_id", Value: "old"}, {Key: "owner", Value: "o"}, {Key: "epoch", Value: int64(4)},
		{Key: "expires", Value: bson.NewDateTimeFromTime(t0)}, {Key: "released", Value: false}, {Key: "version", Value: int64(7)}}
	if _, err := coll.InsertOne(ctx, old); err != nil {
		t.Fatal(err)
	}
	oldRec := lease.Record{Key: "old", Owner: "o", Epoch: 4, ExpiresAt: t0}
	wantKey(t, d, oldRec, 7)
	oldRec.Session, oldRec.ExpiresAt = id, lease.SessionKeyExpiry
	v, err = d.Put(ctx, oldRec, lease.Precondition{Version: 7})
	if err != nil || v != 8 {
		t.Fatalf("update of a document from before sessions: %d, %v; want version 8", v, err)
	}
	wantKey(t, d, oldRec, 8)
}

// wantKey reads want's key back at version v.
func wantKey(t *testing.T, d lease.Driver, want lease.Record, v uint64) {
	t.Helper()
	got, gv, err := d.Get(context.Background(), want.Key)
	if err != nil || got != withMillis(want) || gv != v {
		t.Fatalf("Get(%q) = %+v version %d, %v; want %+v version %d", want.Key, got, gv, err, withMillis(want), v)
	}
}

// TestMongoKeyBadSession_R10: a key document whose session is not a
// string, or neither "" nor a session id, is corrupt: Get, GetMany and
// List fail with ErrCorrupt naming the key, an update at its version
// conflicts, and the document stays as it is.
func TestMongoKeyBadSession_R10(t *testing.T) {
	ctx := context.Background()
	coll := mongoserver.Collection(t, mongoserver.SharedClient(t))
	d := newTestMongoDriverOn(t, coll).(*mongoDriver)
	for i, bad := range []any{
		int32(1), nil, true, bson.A{sessionID(1)},
		"x", strings.ToUpper(sessionID(0xabc)), sessionID(1) + "0", sessionID(1) + "\n", " ",
	} {
		key := fmt.Sprintf("bad%d", i)
		rec := lease.Record{Key: key, Owner: "o", Epoch: 1, ExpiresAt: t0}
		if _, err := d.Put(ctx, rec, lease.Precondition{Absent: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := coll.UpdateOne(ctx, byID(key), bson.D{{Key: "$set", Value: bson.D{{Key: "session", Value: bad}}}}); err != nil {
			t.Fatal(err)
		}
		before, err := coll.FindOne(ctx, byID(key)).Raw()
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("session %#v", bad)
		_, _, err = d.Get(ctx, key)
		wantCorruptKey(t, what+": Get", err, key)
		res, err := d.GetMany(ctx, []string{key})
		if err != nil {
			t.Fatalf("%s: GetMany: %v", what, err)
		}
		wantCorruptKey(t, what+": GetMany", res[0].Err, key)
		_, err = d.List(ctx, key, "", 10)
		wantCorruptKey(t, what+": List", err, key)
		_, err = d.Put(ctx, rec, lease.Precondition{Version: 1})
		testkit.WantErr(t, what+": Put at its version", err, lease.ErrConflict)
		pm, err := d.PutMany(ctx, []lease.Write{{Rec: rec, Pre: lease.Precondition{Version: 1}}})
		if err != nil || !errors.Is(pm[0].Err, lease.ErrConflict) {
			t.Errorf("%s: PutMany at its version: %+v, %v; want ErrConflict", what, pm, err)
		}
		after, err := coll.FindOne(ctx, byID(key)).Raw()
		if err != nil || !bytes.Equal(before, after) {
			t.Fatalf("%s: document changed: %v -> %v (%v)", what, before, after, err)
		}
	}
}

// wantCorruptKey checks that err matches ErrCorrupt and names key.
func wantCorruptKey(t *testing.T, op string, err error, key string) {
	t.Helper()
	if !errors.Is(err, lease.ErrCorrupt) || !strings.Contains(fmt.Sprint(err), fmt.Sprintf("%q", key)) {
		t.Errorf("%s: %v; want ErrCorrupt naming %q (R10)", op, err, key)
	}
}

// TestMongoSessionUnknownOutcome_R24 drops the reply to session writes
// the server applied: each fails with an error that is not ErrConflict
// (the outcome is unknown, R9), and a re-read shows the write. On a
// replica set the MongoDB driver retries the write and the server answers
// with the first attempt's result: then the call succeeds.
func TestMongoSessionUnknownOutcome_R24(t *testing.T) {
	ctx := context.Background()
	p := mongoproxy.New(t, mongoserver.Shared(t).Addr)
	d := newTestMongoDriver(t, mongoserver.Client(t, p)).(lease.SessionDriver)
	unknown := func(op string, err error) {
		t.Helper()
		if err != nil && (errors.Is(err, lease.ErrConflict) || !isOneLine(err) || !strings.HasPrefix(err.Error(), "lease: ")) {
			t.Fatalf("%s with its reply dropped: %v; want nil or a one-line lease: error that is not ErrConflict (R9)", op, err)
		}
	}
	rec := lease.SessionRecord{ID: sessionID(7), Owner: "o", ExpiresAt: t0, State: lease.SessionLive}
	hit := p.DropReply("insert")
	_, err := d.PutSession(ctx, rec, lease.Precondition{Absent: true})
	testkit.RequireHit(t, hit)
	unknown("create", err)
	wantSession(t, d, rec, 1)

	rec.State = lease.SessionEndedClean
	hit = p.DropReply("update")
	_, err = d.PutSession(ctx, rec, lease.Precondition{Version: 1})
	testkit.RequireHit(t, hit)
	unknown("end", err)
	wantSession(t, d, rec, 2)

	hit = p.DropReply("delete")
	_, err = d.RemoveSessions(ctx, t0.Add(time.Second), 1)
	testkit.RequireHit(t, hit)
	unknown("RemoveSessions", err)
	testkit.WantErr(t, "GetSession after the delete", getSessionErr(d, rec.ID), lease.ErrNotFound)
}

// TestMongoSessionIndexes: NewDriver makes the index on the key
// documents' session field and on the session documents' expires field;
// a driver that finds them (under any name) only lists them, so that a
// user who cannot create indexes can use a collection prepared for it.
func TestMongoSessionIndexes(t *testing.T) {
	ctx := context.Background()
	p := mongoproxy.New(t, mongoserver.Shared(t).Addr)
	coll := mongoserver.Collection(t, mongoserver.Client(t, p))
	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "session", Value: 1}},
		Options: options.Index().SetName("mine")}); err != nil {
		t.Fatal(err)
	}
	created := p.Seen("createIndexes")
	newTestMongoDriverOn(t, coll)
	if n := p.Seen("createIndexes") - created; n != 1 {
		t.Fatalf("the first driver sent %d createIndexes; want 1, for the session collection", n)
	}
	newTestMongoDriverOn(t, coll)
	if n := p.Seen("createIndexes") - created; n != 1 {
		t.Fatalf("the second driver sent %d createIndexes; want none", n-1)
	}
	for _, c := range []struct {
		coll  *mongo.Collection
		field string
	}{{coll, "session"}, {coll.Database().Collection(coll.Name() + sessionCollectionSuffix), "expires"}} {
		specs, err := c.coll.Indexes().ListSpecifications(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var found []string
		for _, s := range specs {
			if isAscendingIndexOn(s.KeysDocument, c.field) {
				found = append(found, s.Name)
			}
		}
		if len(found) != 1 {
			t.Errorf("indexes of %s on {%s: 1}: %v; want one", c.coll.Name(), c.field, found)
		}
	}
}
