package mongodb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/manybench"
	"github.com/leasekit/lease/internal/mongoproxy"
	"github.com/leasekit/lease/internal/mongoserver"
)

// The many-keys benchmarks (package manybench) on a fresh collection,
// through a proxy of its own so that the proxy's counts are the
// benchmark's, at 100 and 1,000 keys (and 10,000 on a MongoDB):
// FerretDB, the test server unless MONGODB_URI is set, runs N <= 1,000
// only, and the per-key baseline at 100 only. The driver sends FerretDB ferretBatchChunk writes per
// bulkWrite, so chunked-roundtrips/op is computed, not measured: what the
// same PutMany and GetMany calls cost on a real MongoDB, which takes
// mongoBatchChunk a command.
var manyMongo = manybench.Backend{Name: "mongodb", Sizes: []int{100, 1000, 10000}, Open: openMongoMany, Skip: ferretTooSlow}

// Each benchmark is package manybench's of the same name: see there for
// what it measures and reports. (Startup and HeldSteady run on SQLite and
// PostgreSQL: 100,000 keys on FerretDB would take hours.)

func BenchmarkManyRenewal(b *testing.B)    { manybench.Renewal(b, manyMongo) }
func BenchmarkManyReleaseAll(b *testing.B) { manybench.ReleaseAll(b, manyMongo) }
func BenchmarkManyTakeover(b *testing.B)   { manybench.Takeover(b, manyMongo) }
func BenchmarkManyWaiting(b *testing.B)    { manybench.Waiting(b, manyMongo) }

// ferretTooSlow keeps FerretDB, the stand-in test server, to N <= 1,000.
func ferretTooSlow(b *testing.B, n int) string {
	if n > 1000 && mongoserver.Shared(b).Ferret {
		return "FerretDB scans its collection on every update: 10,000 keys would take hours a period; set MONGODB_URI to a MongoDB to run it"
	}
	return ""
}

// openMongoMany opens a driver on a fresh collection, through a proxy of
// its own. Its floor is n raw updateOne's filtered on _id and version, on
// documents of their own (another collection of the same size), in
// unordered bulkWrites of as many updates as the driver sends that server
// in one, with the driver's write concern. Its session floor is one raw
// updateOne of one session document, filtered on _id and version, in a
// sessions collection of its own.
//
// FerretDB scans the collection for each update: about 2 ms per update at
// 100 documents, 15 ms at 1,000 on a quiet machine (over 100 ms on a
// loaded one), so renewing 1,000 keys one by one takes 15 s to minutes. Its
// stores therefore grant a 10 minute TTL (at 30 s the per-key renewals
// of 1,000 keys could not keep up), and it runs the per-key baseline at
// 100 keys only.
func openMongoMany(b *testing.B, n int) manybench.Rig {
	srv := mongoserver.Shared(b)
	noPerKey := ""
	if srv.Ferret && n > 100 {
		noPerKey = "FerretDB updates a key in 15 ms to over 100 ms at 1,000 keys: a per-key round takes minutes; set MONGODB_URI to a MongoDB to run it"
		n = 0 // no floor rows either: only the per-key baseline uses them
	}
	p := mongoproxy.New(b, srv.Addr)
	client := mongoserver.Client(b, p)
	d := newTestMongoDriverOn(b, mongoserver.Collection(b, client))
	chunk := mongoBatchChunk
	if srv.Ferret {
		chunk = ferretBatchChunk
	}
	journal := true
	wc := &writeconcern.WriteConcern{W: writeconcern.WCMajority, Journal: &journal}
	coll := mongoserver.Collection(b, client).Clone(options.Collection().SetWriteConcern(wc))
	ctx := context.Background()
	docs := make([]any, n)
	for i := range docs {
		docs[i] = append(bson.D{{Key: "_id", Value: manybench.FloorKey(i)}}, benchFields(1)...)
	}
	for at := 0; at < n; at += chunk {
		if _, err := coll.InsertMany(ctx, docs[at:min(at+chunk, n)]); err != nil {
			b.Fatal(err)
		}
	}
	version := int64(1)
	models := make([]mongo.WriteModel, n)
	floor := func(b *testing.B) time.Duration {
		start := time.Now()
		for i := range models {
			models[i] = mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: "_id", Value: manybench.FloorKey(i)}, {Key: "version", Value: version}}).
				SetUpdate(bson.D{{Key: "$set", Value: benchFields(version + 1)}})
		}
		for at := 0; at < n; at += chunk {
			chunk := models[at:min(at+chunk, n)]
			res, err := coll.BulkWrite(ctx, chunk, options.BulkWrite().SetOrdered(false))
			if err == nil && res.MatchedCount != int64(len(chunk)) {
				err = fmt.Errorf("floor bulkWrite matched %d of %d", res.MatchedCount, len(chunk))
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		version++
		return time.Since(start)
	}
	ttl := lease.DefaultTTL
	if srv.Ferret {
		ttl = 10 * time.Minute
	}
	return manybench.Rig{Driver: d, TTL: ttl, Floor: floor, SessionFloor: mongoSessionFloor(b, coll, wc), NoPerKey: noPerKey,
		Chunk: mongoBatchChunk, Wire: func() int { return wireTrips(p) }, Relays: p.Relays}
}

// mongoSessionFloor writes a session document into the sessions
// collection beside coll, and returns its floor: one updateOne of it,
// filtered on _id and version, with the driver's write concern, wc.
func mongoSessionFloor(b *testing.B, coll *mongo.Collection, wc *writeconcern.WriteConcern) func(*testing.B) time.Duration {
	ctx := context.Background()
	sessions := coll.Database().Collection(coll.Name()+sessionCollectionSuffix, options.Collection().SetWriteConcern(wc))
	fields := func(version int64) bson.D {
		return bson.D{{Key: "owner", Value: "floor"}, {Key: "expires", Value: bson.NewDateTimeFromTime(time.Now().Add(lease.DefaultTTL))},
			{Key: "state", Value: int32(lease.SessionLive)}, {Key: "version", Value: version}}
	}
	if _, err := sessions.InsertOne(ctx, append(bson.D{{Key: "_id", Value: manybench.FloorSession}}, fields(1)...)); err != nil {
		b.Fatal(err)
	}
	version := int64(1)
	return func(b *testing.B) time.Duration {
		start := time.Now()
		res, err := sessions.UpdateOne(ctx, bson.D{{Key: "_id", Value: manybench.FloorSession}, {Key: "version", Value: version}},
			bson.D{{Key: "$set", Value: fields(version + 1)}})
		if err == nil && res.MatchedCount != 1 {
			err = fmt.Errorf("matched %d", res.MatchedCount)
		}
		if err != nil {
			b.Fatalf("the session floor's update at version %d: %v", version, err)
		}
		version++
		return time.Since(start)
	}
}

// wireTrips is how many data commands p has forwarded, each one round
// trip.
func wireTrips(p *mongoproxy.Proxy) int {
	n := 0
	for _, cmd := range []string{"find", "getMore", "insert", "update", "delete"} {
		n += p.Seen(cmd)
	}
	return n
}
