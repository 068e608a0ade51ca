package mongodb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/childproc"
	"github.com/leasekit/lease/internal/mongoproxy"
	"github.com/leasekit/lease/internal/mongoserver"
	"github.com/leasekit/lease/internal/testclock"
	"github.com/leasekit/lease/internal/testkit"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// See package mongoserver for the server the tests use and why FerretDB
// sits behind a serialising proxy.

func init() {
	if os.Getenv(mongoUnsafeEnv) != "" {
		openOptions = []Option{AllowUnsafeServer()}
	}
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// TestMongoRace_R5 races 8 stores, each on its own mongo.Client, for one
// key over 6 rounds: exactly one wins each round, every loser gets ErrHeld
// naming the winner, and epochs go 1, 2, 3... without repeats (R2).
func TestMongoRace_R5(t *testing.T) {
	const clients, rounds = 8, 6
	coll := mongoserver.Collection(t, mongoserver.SharedClient(t))
	stores := make([]*lease.DocumentStore, clients)
	for i := range stores {
		c := mongoserver.Client(t, nil)
		d := newTestMongoDriverOn(t, c.Database(coll.Database().Name()).Collection(coll.Name()))
		s, err := lease.NewDocumentStore(d, lease.WithOwner(fmt.Sprintf("racer-%d", i)), lease.WithTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	ctx := context.Background()
	for round := 1; round <= rounds; round++ {
		grants := make([]lease.Grant, clients)
		errs := make([]error, clients)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Go(func() {
				<-start
				grants[i], errs[i] = s.Acquire(ctx, "race/key")
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				if winner >= 0 {
					t.Fatalf("round %d: two winners: %+v and %+v (R5)", round, grants[winner], grants[i])
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no winner: %v", round, errs)
		}
		g := grants[winner]
		if g.Epoch != uint64(round) {
			t.Fatalf("round %d: winner's epoch %d; want %d (R2)", round, g.Epoch, round)
		}
		for i, err := range errs {
			var he *lease.HeldError
			if i != winner && (!errors.As(err, &he) || he.Owner != g.Owner || he.Epoch != g.Epoch) {
				t.Fatalf("round %d: loser %d got %v; want ErrHeld naming %s epoch %d (R5)", round, i, err, g.Owner, g.Epoch)
			}
		}
		if err := stores[winner].Release(ctx, g); err != nil {
			t.Fatalf("round %d: release: %v", round, err)
		}
	}
}

// TestMongoAmbiguousWrites_R9 drops the reply to a write the server
// applied, for acquire, renew and release: the store re-reads and returns
// what it got. A write cut before it reached the server is a
// *StorageError that is safe to retry.
func TestMongoAmbiguousWrites_R9(t *testing.T) {
	ctx := context.Background()
	p := mongoproxy.New(t, mongoserver.Shared(t).Addr)
	d := newTestMongoDriver(t, mongoserver.Client(t, p))
	now := t0
	s, err := lease.NewDocumentStore(d, lease.WithOwner("me"), lease.WithClock(func() time.Time { return now }), lease.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := lease.NewDocumentStore(d, lease.WithOwner("other"), lease.WithClock(func() time.Time { return now }))

	t.Run("acquire", func(t *testing.T) {
		hit := p.DropReply("insert")
		g, err := s.Acquire(ctx, "a")
		testkit.RequireHit(t, hit)
		if err != nil || g.Epoch != 1 || g.Owner != "me" {
			t.Fatalf("acquire with its reply dropped: %+v, %v; want epoch 1 (R9)", g, err)
		}
		if _, err := other.Acquire(ctx, "a"); !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("another owner after the dropped reply: %v; want ErrHeld", err)
		}
		if _, err := s.Renew(ctx, g); err != nil {
			t.Fatalf("renew of the grant: %v", err)
		}
	})

	t.Run("acquire cut before the server", func(t *testing.T) {
		hit := p.Cut("insert")
		g, err := s.Acquire(ctx, "b")
		testkit.RequireHit(t, hit)
		var se *lease.StorageError
		if err != nil && !errors.As(err, &se) {
			t.Fatalf("acquire whose write never arrived: %v; want a *StorageError (R9)", err)
		}
		if err != nil { // safe to retry
			g, err = s.Acquire(ctx, "b")
		}
		if err != nil || g.Epoch != 1 {
			t.Fatalf("acquire after the cut: %+v, %v; want epoch 1", g, err)
		}
	})

	t.Run("renew", func(t *testing.T) {
		g, err := s.Acquire(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		now = now.Add(10 * time.Second)
		hit := p.DropReply("update")
		g2, err := s.Renew(ctx, g)
		testkit.RequireHit(t, hit)
		if want := now.Add(time.Minute); err != nil || g2.Epoch != g.Epoch || !g2.ExpiresAt.Equal(want) {
			t.Fatalf("renew with its reply dropped: %+v, %v; want expiry %v (R9)", g2, err, want)
		}
		if rec, err := other.Holder(ctx, "c"); err != nil || !rec.ExpiresAt.Equal(g2.ExpiresAt) {
			t.Fatalf("holder after renew: %+v, %v", rec, err)
		}
	})

	t.Run("release", func(t *testing.T) {
		g, err := s.Acquire(ctx, "d")
		if err != nil {
			t.Fatal(err)
		}
		hit := p.DropReply("update")
		err = s.Release(ctx, g)
		testkit.RequireHit(t, hit)
		if err != nil {
			t.Fatalf("release with its reply dropped: %v; want nil (R9)", err)
		}
		rec, _, err := d.Get(ctx, "d")
		if err != nil || !rec.Released || rec.Epoch != g.Epoch {
			t.Fatalf("record after release: %+v, %v; want released, epoch %d", rec, err, g.Epoch)
		}
		if g2, err := other.Acquire(ctx, "d"); err != nil || g2.Epoch != g.Epoch+1 || g2.PreviousUnclean {
			t.Fatalf("acquire after release: %+v, %v; want clean epoch %d", g2, err, g.Epoch+1)
		}
	})

	t.Run("release cut before the server", func(t *testing.T) {
		g, err := s.Acquire(ctx, "e")
		if err != nil {
			t.Fatal(err)
		}
		hit := p.Cut("update")
		err = s.Release(ctx, g)
		testkit.RequireHit(t, hit)
		if err == nil {
			if rec, _, err := d.Get(ctx, "e"); err != nil || !rec.Released {
				t.Fatalf("release reported done, record %+v, %v", rec, err) // R7: never report an unpersisted release
			}
			return
		}
		if !errors.Is(err, lease.ErrStorage) {
			t.Fatalf("release whose write never arrived: %v; want ErrStorage", err)
		}
		if err := s.Release(ctx, g); err != nil { // the store kept the grant (R7)
			t.Fatalf("retried release: %v", err)
		}
	})
}

// TestMongoCorruptDocuments_R10 plants documents no store could have
// written: every operation refuses them with ErrCorrupt and leaves them as
// they were.
func TestMongoCorruptDocuments_R10(t *testing.T) {
	ctx := context.Background()
	coll := mongoserver.Collection(t, mongoserver.SharedClient(t))
	d := newTestMongoDriverOn(t, coll)
	s, _ := lease.NewDocumentStore(d, lease.WithOwner("me"))
	exp := bson.NewDateTimeFromTime(time.Now().Add(-time.Hour))
	good := func(id string) bson.D {
		return bson.D{{Key: "_id", Value: id}, {Key: "owner", Value: "x"}, {Key: "epoch", Value: int64(3)},
			{Key: "expires", Value: exp}, {Key: "released", Value: true}, {Key: "version", Value: int64(2)}}
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
		out := bson.D{}
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
		{"string epoch", set(good("c1"), "epoch", "3")},
		{"missing owner", drop(good("c2"), "owner")},
		{"negative version", set(good("c3"), "version", int64(-1))},
		{"double epoch", set(good("c4"), "epoch", 3.0)},
		{"string expires", set(good("c5"), "expires", "tomorrow")},
		{"missing released", drop(good("c6"), "released")},
		{"epoch zero", set(good("c7"), "epoch", int64(0))},
		{"empty owner", set(good("c8"), "owner", "")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.doc[0].Value.(string)
			if _, err := coll.InsertOne(ctx, tc.doc); err != nil {
				t.Fatal(err)
			}
			before, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Raw()
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Acquire(ctx, key)
			if !errors.Is(err, lease.ErrCorrupt) || !errors.Is(err, lease.ErrStorage) {
				t.Errorf("Acquire: %v; want a *StorageError matching ErrCorrupt (R10)", err)
			}
			if _, err := s.Holder(ctx, key); !errors.Is(err, lease.ErrCorrupt) {
				t.Errorf("Holder: %v; want ErrCorrupt (R10)", err)
			}
			if err := s.Release(ctx, lease.Grant{Key: key, Owner: "x", Epoch: 3}); !errors.Is(err, lease.ErrCorrupt) {
				t.Errorf("Release: %v; want ErrCorrupt (R10)", err)
			}
			after, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Raw()
			if err != nil || !bytes.Equal(before, after) {
				t.Errorf("document changed: %v -> %v (%v)", before, after, err)
			}
		})
	}
}

// TestMongoEpochRange_R2 stores the whole uint64 range of epochs and
// refuses to wrap at math.MaxUint64.
func TestMongoEpochRange_R2(t *testing.T) {
	ctx := context.Background()
	d := newTestMongoDriver(t, mongoserver.SharedClient(t))
	exp := t0.Add(time.Minute)
	for i, epoch := range []uint64{1, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64 - 1, math.MaxUint64} {
		key := fmt.Sprintf("e%d", i)
		want := lease.Record{Key: key, Owner: "o", Epoch: epoch, ExpiresAt: exp, Released: true}
		if _, err := d.Put(ctx, want, lease.Precondition{Absent: true}); err != nil {
			t.Fatal(err)
		}
		got, v, err := d.Get(ctx, key)
		if err != nil || got.Epoch != epoch || v != 1 || !sameState(got, want) {
			t.Fatalf("epoch %d: read back %+v version %d, %v", epoch, got, v, err)
		}
	}
	s, _ := lease.NewDocumentStore(d, lease.WithOwner("me"), lease.WithClock(func() time.Time { return t0 }))
	if _, err := s.Acquire(ctx, "e4"); !errors.Is(err, lease.ErrEpochExhausted) {
		t.Fatalf("acquire at MaxUint64: %v; want ErrEpochExhausted", err)
	}
	g, err := s.Acquire(ctx, "e3")
	if err != nil || g.Epoch != math.MaxUint64 {
		t.Fatalf("acquire at MaxUint64-1: %+v, %v; want epoch MaxUint64", g, err)
	}
}

// TestMongoPut checks the driver's own contract: Absent is an insert, a
// version is a conditional update, a stale one is ErrConflict, and
// nothing is written on conflict.
func TestMongoPut(t *testing.T) {
	ctx := context.Background()
	d := newTestMongoDriver(t, mongoserver.SharedClient(t))
	if _, _, err := d.Get(ctx, "k"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get of nothing: %v; want ErrNotFound", err)
	}
	r1 := lease.Record{Key: "k", Owner: "a", Epoch: 1, ExpiresAt: t0}
	v1, err := d.Put(ctx, r1, lease.Precondition{Absent: true})
	if err != nil || v1 != 1 {
		t.Fatalf("insert: %d, %v", v1, err)
	}
	r2 := lease.Record{Key: "k", Owner: "b", Epoch: 2, ExpiresAt: t0.Add(time.Second)}
	if _, err := d.Put(ctx, r2, lease.Precondition{Absent: true}); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("second insert: %v; want ErrConflict", err)
	}
	v2, err := d.Put(ctx, r2, lease.Precondition{Version: v1})
	if err != nil || v2 <= v1 {
		t.Fatalf("update: %d, %v", v2, err)
	}
	if _, err := d.Put(ctx, r1, lease.Precondition{Version: v1}); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("stale update: %v; want ErrConflict", err)
	}
	got, v, err := d.Get(ctx, "k")
	if err != nil || v != v2 || !sameState(got, r2) {
		t.Fatalf("Get: %+v %d %v; want %+v %d", got, v, err, r2, v2)
	}
	if d.Name() != "mongodb" || !lease.DriverHasCrossProcessCAS(d.Name()) {
		t.Fatalf("Name %q: want mongodb, with cross-process CAS (R11)", d.Name())
	}
}

// TestMongoCancelledContext: a cancelled ctx stops every call.
func TestMongoCancelledContext(t *testing.T) {
	d := newTestMongoDriver(t, mongoserver.SharedClient(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := d.Get(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get: %v; want context.Canceled", err)
	}
	if _, err := d.Put(ctx, lease.Record{Key: "k", Owner: "a", Epoch: 1}, lease.Precondition{Absent: true}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put: %v; want context.Canceled", err)
	}
	if _, _, err := d.Get(context.Background(), "k"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("after the cancelled Put: %v; want nothing written", err)
	}
}

// TestMongoCloseKeepsCallersClient: closing a driver made from the
// caller's collection leaves the caller's client connected; later calls
// fail with ErrClosed.
func TestMongoCloseKeepsCallersClient(t *testing.T) {
	c := mongoserver.Client(t, nil)
	coll := mongoserver.Collection(t, c)
	d, err := NewDriver(coll, driverOpts(t)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := d.Get(ctx, "k"); !errors.Is(err, lease.ErrClosed) {
		t.Fatalf("Get after Close: %v; want ErrClosed", err)
	}
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "still-connected"}}); err != nil {
		t.Fatalf("caller's client after driver Close: %v", err)
	}
}

// TestMongoOpen opens stores from mongodb:// URLs: the database from the
// path, the collection from ?collection=, the driver's own options kept,
// and Close disconnects the client Open made.
func TestMongoOpen(t *testing.T) {
	srv := mongoserver.Shared(t)
	if srv.Ferret {
		// Open refuses FerretDB itself (no way to pass AllowUnsafeServer)...
		if _, err := lease.Open(context.Background(), srv.URI); err == nil || !strings.Contains(err.Error(), "FerretDB") {
			t.Fatalf("Open on FerretDB: %v; want a refusal", err)
		}
		// ...so the rest goes through the serialising proxy with it.
		openOptions = []Option{AllowUnsafeServer()}
		t.Cleanup(func() { openOptions = nil })
	}
	coll := mongoserver.Collection(t, mongoserver.SharedClient(t)).Name()
	url := mongoStoreURL(t, coll) + "&appName=opened"
	ctx := context.Background()
	s, err := lease.Open(ctx, url, lease.WithOwner("opened"))
	if err != nil {
		t.Fatalf("Open(%q): %v", url, err)
	}
	g, err := s.Acquire(ctx, "opened/key")
	if err != nil {
		t.Fatal(err)
	}
	var doc bson.M
	err = mongoserver.SharedClient(t).Database("lease_test").Collection(coll).FindOne(ctx, bson.D{{Key: "_id", Value: "opened/key"}}).Decode(&doc)
	if err != nil || doc["owner"] != "opened" || doc["epoch"] != int64(g.Epoch) {
		t.Fatalf("document in lease_test.%s: %v, %v", coll, doc, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The driver lease.Open got (and closes with the store) owns its client.
	d, err := openURL(ctx, url)
	if err != nil {
		t.Fatalf("openURL(%q): %v", url, err)
	}
	md := d.(*mongoDriver)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := md.coll.Database().Client().Ping(ctx, nil); !errors.Is(err, mongo.ErrClientDisconnected) {
		t.Fatalf("openURL's client after Close: %v; want disconnected", err)
	}
}

func TestSplitMongoURL(t *testing.T) {
	cases := []struct {
		in, uri, db, coll string
	}{
		{"mongodb://h:1", "mongodb://h:1", "lease", "leases"},
		{"mongodb://h:1/", "mongodb://h:1/", "lease", "leases"},
		{"mongodb://h:1/app", "mongodb://h:1/app", "app", "leases"},
		{"mongodb://u:p%2Fw@h:1,h2:2/app?replicaSet=rs0&collection=locks&w=1",
			"mongodb://u:p%2Fw@h:1,h2:2/app?replicaSet=rs0&w=1", "app", "locks"},
		{"mongodb+srv://h.example/?Collection=x%2Ey", "mongodb+srv://h.example/", "lease", "x.y"},
	}
	for _, tc := range cases {
		u, err := splitMongoURL(tc.in)
		if err != nil || u.uri != tc.uri || u.db != tc.db || u.coll != tc.coll {
			t.Errorf("splitMongoURL(%q) = %+v, %v; want %q, %q, %q", tc.in, u, err, tc.uri, tc.db, tc.coll)
		}
	}
	for _, bad := range []string{"mongodb://h/?collection=", "mongodb://h/?collection=a$b", "postgres://h/",
		"mongodb://h/a%2Fb", "mongodb://h/a.b", "mongodb://h/a%00", "mongodb://h/" + strings.Repeat("d", 64)} {
		if _, err := splitMongoURL(bad); err == nil {
			t.Errorf("splitMongoURL(%q) accepted", bad)
		}
	}
}

// mongoUnsafeEnv tells a store child (package childproc) to let Open accept FerretDB behind the parent's
// serialising proxy.
const mongoUnsafeEnv = "LEASE_TEST_MONGO_UNSAFE"

// TestMongoProcessRace_R5 runs the shared cross-process race on MongoDB: 8
// separate OS processes (this test binary re-executed, each opening its
// store with Open and its own client) race for one key over 6 rounds,
// with takeovers after expiry: exactly one wins each round, the others get
// ErrHeld naming it, and epochs go 1, 2, 3... without repeats (R2).
func TestMongoProcessRace_R5(t *testing.T) {
	if mongoserver.Shared(t).Ferret {
		t.Setenv(mongoUnsafeEnv, "1")
	}
	childproc.StoreRace(t, mongoStoreURL(t, mongoserver.Collection(t, mongoserver.SharedClient(t)).Name()), true)
}

// mongoStoreURL is an Open URL for collection coll of database lease_test,
// through the shared serialising proxy for FerretDB.
func mongoStoreURL(t testing.TB, coll string) string {
	srv := mongoserver.Shared(t)
	base := srv.URI
	if srv.Ferret {
		base = mongoserver.URIVia(srv, mongoserver.SharedProxy(t, srv).Addr())
	}
	scheme, rest, _ := strings.Cut(base, "://")
	hostsAndPath, query, _ := strings.Cut(rest, "?")
	hosts, _, _ := strings.Cut(hostsAndPath, "/")
	return scheme + "://" + hosts + "/lease_test?collection=" + coll + "&" + query
}

// TestMongoOwnerEndingInNewlineFailsClosed_R10: a held document whose
// owner gains a final newline behind its holder's back (same version) is
// corrupt: the update guard must not match it, so Renew and Release fail
// with ErrCorrupt and the document stays as it was. In MongoDB's regular
// expressions `$` matches before a final newline, so the guard anchors
// with `\z`; FerretDB (Go's regexp) is checked to accept it too.
func TestMongoOwnerEndingInNewlineFailsClosed_R10(t *testing.T) {
	ctx := context.Background()
	coll := mongoserver.Collection(t, mongoserver.SharedClient(t))
	d := newTestMongoDriverOn(t, coll)
	for i, owner := range []string{"alice\n", "alice\n\n", "\nalice", "alice\r\n"} {
		key := fmt.Sprintf("nl%d", i)
		s := testkit.NewDocStore(t, d, testclock.New(), "alice")
		g := testkit.MustAcquire(t, s, key)
		set := bson.D{{Key: "$set", Value: bson.D{{Key: "owner", Value: owner}}}}
		if _, err := coll.UpdateOne(ctx, byID(key), set); err != nil {
			t.Fatal(err)
		}
		before, err := coll.FindOne(ctx, byID(key)).Raw()
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Renew(ctx, g)
		testkit.WantErr(t, fmt.Sprintf("Renew with owner %q", owner), err, lease.ErrCorrupt)
		testkit.WantErr(t, fmt.Sprintf("Release with owner %q", owner), s.Release(ctx, g), lease.ErrCorrupt)
		after, err := coll.FindOne(ctx, byID(key)).Raw()
		if err != nil || !bytes.Equal(before, after) {
			t.Fatalf("owner %q: document changed: %v -> %v (%v)", owner, before, after, err)
		}
	}
	// The guard's pattern, as PCRE (MongoDB) reads it: there `$` also
	// matches before a final newline. FerretDB reads it as Go does.
	pattern := mongoOwnerPattern(t)
	pcre := regexp.MustCompile(strings.ReplaceAll(pattern, "$", `(?:\n?\z)`))
	for _, owner := range []string{"alice\n", "\nalice", "alice\r\n"} {
		if pcre.MatchString(owner) {
			t.Errorf("the guard's pattern %q matches owner %q as MongoDB reads it", pattern, owner)
		}
	}
	if !pcre.MatchString("alice") {
		t.Errorf("the guard's pattern %q does not match a good owner", pattern)
	}
	// On this server it compiles, and matches only the good owner.
	byOwner := bson.D{{Key: "owner", Value: bson.D{{Key: "$regex", Value: pattern}}}}
	n, err := coll.CountDocuments(ctx, byOwner)
	if err != nil {
		t.Fatalf("the guard's pattern on this server: %v", err)
	}
	if n != 0 {
		t.Fatalf("the guard's pattern matched %d owners that end in or begin with a newline", n)
	}
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "good"}, {Key: "owner", Value: "alice"}}); err != nil {
		t.Fatal(err)
	}
	if n, err := coll.CountDocuments(ctx, byOwner); err != nil || n != 1 {
		t.Fatalf("the guard's pattern matched %d good owners, %v; want 1", n, err)
	}
}

// mongoOwnerPattern is the owner pattern of the driver's update guard.
func mongoOwnerPattern(t *testing.T) string {
	t.Helper()
	for _, e := range mongoUpdateFilter("k", 1) {
		if e.Key != "owner" {
			continue
		}
		for _, op := range e.Value.(bson.D) {
			if op.Key == "$regex" {
				return op.Value.(string)
			}
		}
	}
	t.Fatal("the update guard has no owner pattern")
	return ""
}

// TestMongoRefusesFerretDB: NewDriver refuses FerretDB, which does
// not apply a conditional update atomically, unless AllowUnsafeServer is
// given; a server that is not FerretDB is accepted as is.
func TestMongoRefusesFerretDB(t *testing.T) {
	coll := mongoserver.Collection(t, mongoserver.SharedClient(t))
	d, err := NewDriver(coll)
	if !mongoserver.Shared(t).Ferret {
		if err != nil {
			t.Fatalf("NewDriver on MONGODB_URI: %v", err)
		}
		d.Close()
		return
	}
	if err == nil || !strings.Contains(err.Error(), "FerretDB") || !strings.Contains(err.Error(), "atomic") {
		t.Fatalf("NewDriver on FerretDB: %v; want a refusal naming FerretDB and atomicity", err)
	}
	d, err = NewDriver(coll, AllowUnsafeServer())
	if err != nil {
		t.Fatalf("with AllowUnsafeServer: %v", err)
	}
	d.Close()
	if err := mongoserver.Client(t, nil).Ping(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// TestMongoCorruptHeldDocument_R10: a document that its holder's
// store has in its table is corrupted behind its back (same version).
// Renew and Release fail with lease.ErrCorrupt and leave it as it is (R10).
// A field wrapped in an array is corrupt too: a query operator matches an
// array when it matches one element, so the guard must refuse arrays.
func TestMongoCorruptHeldDocument_R10(t *testing.T) {
	ctx := context.Background()
	coll := mongoserver.Collection(t, mongoserver.SharedClient(t))
	d := newTestMongoDriverOn(t, coll)
	for i, set := range []bson.D{
		{{Key: "epoch", Value: "1"}},
		{{Key: "owner", Value: ""}},
		{{Key: "owner", Value: "a b"}},
		{{Key: "epoch", Value: int64(0)}},
		{{Key: "released", Value: int32(1)}},
		{{Key: "expires", Value: "soon"}},
		{{Key: "owner", Value: bson.A{"alice"}}},
		{{Key: "epoch", Value: bson.A{int64(1)}}},
		{{Key: "released", Value: bson.A{false}}},
		{{Key: "expires", Value: bson.A{bson.NewDateTimeFromTime(time.Now())}}},
		{{Key: "version", Value: bson.A{int64(1)}}},
		{{Key: "session", Value: bson.A{""}}},
	} {
		key := fmt.Sprintf("k%d", i)
		s := testkit.NewDocStore(t, d, testclock.New(), "alice")
		g := testkit.MustAcquire(t, s, key)
		if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: key}}, bson.D{{Key: "$set", Value: set}}); err != nil {
			t.Fatal(err)
		}
		before, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Renew(ctx, g)
		testkit.WantErr(t, fmt.Sprintf("Renew after $set %v", set), err, lease.ErrCorrupt)
		testkit.WantErr(t, fmt.Sprintf("Release after $set %v", set), s.Release(ctx, g), lease.ErrCorrupt)
		after, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Raw()
		if err != nil || !bytes.Equal(before, after) {
			t.Fatalf("$set %v: document changed: %v -> %v (%v)", set, before, after, err)
		}
	}
}
