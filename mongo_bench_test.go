package lease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// BenchmarkMongo runs each store operation beside its floor: the same
// number of raw findOne/insertOne/updateOne calls on the same server,
// through the same proxy (which serialises requests for FerretDB and
// counts them for the roundtrips/op metric).
func BenchmarkMongo(b *testing.B) {
	srv := testMongo(b)
	p := newWireProxy(b, srv.addr)
	c := testMongoClient(b, p)
	ctx := context.Background()
	newStore := func(b *testing.B) (*DocumentStore, *mongo.Collection) {
		d := newTestMongoDriverOn(b, testCollection(b, c))
		s, err := NewDocumentStore(d, WithOwner("bench"), WithTTL(time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		return s, d.(*mongoDriver).coll // the floor uses the driver's write and read concerns
	}
	must := func(b *testing.B, err error) {
		if err != nil {
			b.Fatal(err)
		}
	}

	b.Run("acquire/store", func(b *testing.B) { // a new key: find, insert
		s, _ := newStore(b)
		measureMongo(b, p, func(i int) error { _, err := s.Acquire(ctx, fmt.Sprintf("k%d", i)); return err })
	})
	b.Run("acquire/floor", func(b *testing.B) {
		_, coll := newStore(b)
		measureMongo(b, p, func(i int) error {
			key := fmt.Sprintf("k%d", i)
			if err := coll.FindOne(ctx, byID(key)).Err(); err != mongo.ErrNoDocuments {
				return err
			}
			_, err := coll.InsertOne(ctx, append(byID(key), benchFields(1)...))
			return err
		})
	})

	b.Run("renew/store", func(b *testing.B) { // one conditional update
		s, _ := newStore(b)
		g, err := s.Acquire(ctx, "k")
		must(b, err)
		measureMongo(b, p, func(int) error { g, err = s.Renew(ctx, g); return err })
	})
	b.Run("renew/floor", func(b *testing.B) {
		_, coll := newStore(b)
		_, err := coll.InsertOne(ctx, append(byID("k"), benchFields(1)...))
		must(b, err)
		measureMongo(b, p, func(i int) error { return benchUpdate(ctx, coll, "k", int64(i+1)) })
	})

	b.Run("release/store", func(b *testing.B) { // one conditional update
		s, _ := newStore(b)
		grants := make([]Grant, b.N)
		for i := range grants {
			var err error
			grants[i], err = s.Acquire(ctx, fmt.Sprintf("k%d", i))
			must(b, err)
		}
		measureMongo(b, p, func(i int) error { return s.Release(ctx, grants[i]) })
	})
	b.Run("release/floor", func(b *testing.B) {
		_, coll := newStore(b)
		for i := range b.N {
			_, err := coll.InsertOne(ctx, append(byID(fmt.Sprintf("k%d", i)), benchFields(1)...))
			must(b, err)
		}
		measureMongo(b, p, func(i int) error { return benchUpdate(ctx, coll, fmt.Sprintf("k%d", i), 1) })
	})

	b.Run("cycle/store", func(b *testing.B) { // acquire a released key, renew, release: find + 3 updates
		s, _ := newStore(b)
		g, err := s.Acquire(ctx, "k")
		must(b, err)
		must(b, s.Release(ctx, g))
		measureMongo(b, p, func(int) error {
			g, err := s.Acquire(ctx, "k")
			if err == nil {
				g, err = s.Renew(ctx, g)
			}
			if err == nil {
				err = s.Release(ctx, g)
			}
			return err
		})
	})
	b.Run("cycle/floor", func(b *testing.B) {
		_, coll := newStore(b)
		_, err := coll.InsertOne(ctx, append(byID("k"), benchFields(1)...))
		must(b, err)
		v := int64(1)
		measureMongo(b, p, func(int) error {
			if err := coll.FindOne(ctx, byID("k")).Err(); err != nil {
				return err
			}
			for range 3 {
				if err := benchUpdate(ctx, coll, "k", v); err != nil {
					return err
				}
				v++
			}
			return nil
		})
	})
}

// measureMongo runs op b.N times and reports the server round trips it made.
func measureMongo(b *testing.B, p *wireProxy, op func(i int) error) {
	b.Helper()
	before := p.Seen("find") + p.Seen("insert") + p.Seen("update")
	b.ResetTimer()
	for i := range b.N {
		if err := op(i); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	after := p.Seen("find") + p.Seen("insert") + p.Seen("update")
	b.ReportMetric(float64(after-before)/float64(b.N), "roundtrips/op")
}

func byID(key string) bson.D { return bson.D{{Key: "_id", Value: key}} }

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
