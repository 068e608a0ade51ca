package mongodb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/mongoproxy"
	"github.com/leasekit/lease/internal/mongoserver"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// BenchmarkMongo runs each store operation beside its floor: the same
// number of raw findOne/insertOne/updateOne calls on the same server,
// through the same proxy (which serialises requests for FerretDB and
// counts them). Each iteration runs the store's operation and then the
// floor's, so that the server's drift (FerretDB's SQLite files) hits both
// alike; ns/op is the store's, floor-ns/op the floor's, ratio their
// quotient.
func BenchmarkMongo(b *testing.B) {
	srv := mongoserver.Shared(b)
	p := mongoproxy.New(b, srv.Addr)
	c := mongoserver.Client(b, p)
	ctx := context.Background()
	// setup gives a store, and a collection for the floor with the
	// driver's write and read concerns.
	setup := func(b *testing.B) (*lease.DocumentStore, *mongo.Collection) {
		d := newTestMongoDriverOn(b, mongoserver.Collection(b, c))
		s, err := lease.NewDocumentStore(d, lease.WithOwner("bench"), lease.WithTTL(time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		floor := newTestMongoDriverOn(b, mongoserver.Collection(b, c)).(*mongoDriver).coll
		if _, err := floor.InsertOne(ctx, append(byID("k"), benchFields(1)...)); err != nil {
			b.Fatal(err)
		}
		return s, floor
	}

	b.Run("acquire", func(b *testing.B) { // a new key: find, insert
		s, floor := setup(b)
		benchPair(b, p,
			func(i int) error { _, err := s.Acquire(ctx, fmt.Sprintf("k%d", i)); return err },
			func(i int) error {
				key := fmt.Sprintf("k%d", i)
				if err := floor.FindOne(ctx, byID(key)).Err(); err != mongo.ErrNoDocuments {
					return err
				}
				_, err := floor.InsertOne(ctx, append(byID(key), benchFields(1)...))
				return err
			}, nil)
	})

	b.Run("renew", func(b *testing.B) { // one conditional update
		s, floor := setup(b)
		g, err := s.Acquire(ctx, "k")
		if err != nil {
			b.Fatal(err)
		}
		v := int64(1)
		benchPair(b, p,
			func(int) error { g, err = s.Renew(ctx, g); return err },
			func(int) error { v++; return benchUpdate(ctx, floor, "k", v-1) }, nil)
	})

	b.Run("release", func(b *testing.B) { // one conditional update, after an untimed acquire
		s, floor := setup(b)
		var g lease.Grant
		v := int64(1)
		benchPair(b, p,
			func(int) error { return s.Release(ctx, g) },
			func(int) error { v++; return benchUpdate(ctx, floor, "k", v-1) },
			func() (err error) {
				if g, err = s.Acquire(ctx, "k"); err == nil {
					v++
					err = benchUpdate(ctx, floor, "k", v-1)
				}
				return err
			})
	})

	b.Run("cycle", func(b *testing.B) { // acquire a released key, renew, release: find + 3 updates
		s, floor := setup(b)
		g, err := s.Acquire(ctx, "k")
		if err == nil {
			err = s.Release(ctx, g)
		}
		if err != nil {
			b.Fatal(err)
		}
		v := int64(1)
		benchPair(b, p,
			func(int) error {
				g, err := s.Acquire(ctx, "k")
				if err == nil {
					g, err = s.Renew(ctx, g)
				}
				if err == nil {
					err = s.Release(ctx, g)
				}
				return err
			},
			func(int) error {
				if err := floor.FindOne(ctx, byID("k")).Err(); err != nil {
					return err
				}
				for range 3 {
					v++
					if err := benchUpdate(ctx, floor, "k", v-1); err != nil {
						return err
					}
				}
				return nil
			}, nil)
	})
}

// benchPair runs prepare (untimed, may be nil), store and floor b.N times
// each, interleaved, and reports the time and server round trips of each.
func benchPair(b *testing.B, p *mongoproxy.Proxy, store, floor func(i int) error, prepare func() error) {
	b.Helper()
	var storeTime, floorTime time.Duration
	var storeTrips, floorTrips int
	timed := func(op func(int) error, i int, d *time.Duration, trips *int) {
		before := p.Seen("find") + p.Seen("insert") + p.Seen("update")
		start := time.Now()
		err := op(i)
		*d += time.Since(start)
		*trips += p.Seen("find") + p.Seen("insert") + p.Seen("update") - before
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		if prepare != nil {
			if err := prepare(); err != nil {
				b.Fatal(err)
			}
		}
		timed(store, i, &storeTime, &storeTrips)
		timed(floor, i, &floorTime, &floorTrips)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(storeTime.Nanoseconds())/n, "ns/op")
	b.ReportMetric(float64(floorTime.Nanoseconds())/n, "floor-ns/op")
	b.ReportMetric(float64(storeTime)/float64(floorTime), "ratio")
	b.ReportMetric(float64(storeTrips)/n, "roundtrips/op")
	b.ReportMetric(float64(floorTrips)/n, "floor-roundtrips/op")
}

// benchFields are the fields a lease document carries besides _id.
func benchFields(version int64) bson.D {
	return bson.D{{Key: "owner", Value: "bench"}, {Key: "epoch", Value: int64(1)},
		{Key: "expires", Value: bson.NewDateTimeFromTime(time.Now().Add(time.Minute))},
		{Key: "released", Value: false}, {Key: "version", Value: version}}
}

// benchUpdate is the floor's conditional update: filtered on _id and
// version, it sets every field, as the driver's Put does.
func benchUpdate(ctx context.Context, coll *mongo.Collection, key string, version int64) error {
	res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: key}, {Key: "version", Value: version}},
		bson.D{{Key: "$set", Value: benchFields(version + 1)}})
	if err == nil && res.MatchedCount != 1 {
		err = fmt.Errorf("floor update of %s at version %d matched %d", key, version, res.MatchedCount)
	}
	return err
}
