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
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// BenchmarkMongoBatch measures the batch driver methods beside their
// floors on the same server, through the same proxy (which serialises
// requests for FerretDB and counts them), alternating within each
// iteration (see benchPair):
//
//	putmany-renew-1000  PutMany of 1000 renewals; floor: raw unordered bulkWrites
//	                    of the same 1000 updates filtered on _id and version, as
//	                    many as the driver sends (1 on MongoDB, 20 on FerretDB)
//	getmany-1000        GetMany of 1000 keys; floor: one raw find {_id: {$in: keys}}
//	list-1000           List of 1000 records; floor: one raw sorted range find
//
// roundtrips/op counts find, insert and update commands per operation.
func BenchmarkMongoBatch(b *testing.B) {
	const n = 1000
	srv := mongoserver.Shared(b)
	p := mongoproxy.New(b, srv.Addr)
	c := mongoserver.Client(b, p)
	ctx := context.Background()
	setup := func(b *testing.B) (*mongoDriver, *mongo.Collection, time.Time) {
		d := newTestMongoDriverOn(b, mongoserver.Collection(b, c)).(*mongoDriver)
		floor := newTestMongoDriverOn(b, mongoserver.Collection(b, c)).(*mongoDriver)
		exp := time.Now().Add(time.Minute)
		for _, drv := range []*mongoDriver{d, floor} {
			ws := make([]lease.Write, n)
			for i := range ws {
				ws[i] = lease.Write{Rec: lease.Record{Key: fmt.Sprintf("k%06d", i), Owner: "bench", Epoch: 1, ExpiresAt: exp}, Pre: lease.Precondition{Absent: true}}
			}
			if _, err := drv.PutMany(ctx, ws); err != nil {
				b.Fatal(err)
			}
		}
		return d, floor.coll, exp
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
	}

	b.Run("putmany-renew-1000", func(b *testing.B) {
		d, floor, exp := setup(b)
		version := uint64(1)
		ws := make([]lease.Write, n)
		models := make([]mongo.WriteModel, n)
		benchPair(b, p,
			func(int) error {
				exp = exp.Add(time.Millisecond)
				for i := range ws {
					ws[i] = lease.Write{Rec: lease.Record{Key: keys[i], Owner: "bench", Epoch: 1, ExpiresAt: exp}, Pre: lease.Precondition{Version: version}}
				}
				results, err := d.PutMany(ctx, ws)
				for _, r := range results {
					if err == nil {
						err = r.Err
					}
				}
				return err
			},
			func(int) error {
				v := int64(version)
				for i := range models {
					models[i] = mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: keys[i]}, {Key: "version", Value: v}}).
						SetUpdate(bson.D{{Key: "$set", Value: benchFields(v + 1)}})
				}
				version++
				for start := 0; start < n; start += d.chunk { // as many bulkWrites as the driver sends
					chunk := models[start:min(start+d.chunk, n)]
					res, err := floor.BulkWrite(ctx, chunk, options.BulkWrite().SetOrdered(false))
					if err == nil && res.MatchedCount != int64(len(chunk)) {
						err = fmt.Errorf("floor bulkWrite matched %d of %d", res.MatchedCount, len(chunk))
					}
					if err != nil {
						return err
					}
				}
				return nil
			}, nil)
	})

	b.Run("getmany-1000", func(b *testing.B) {
		d, floor, _ := setup(b)
		benchPair(b, p,
			func(int) error {
				results, err := d.GetMany(ctx, keys)
				if err == nil && (len(results) != n || results[n-1].Err != nil) {
					err = fmt.Errorf("GetMany: %d results", len(results))
				}
				return err
			},
			func(int) error {
				return findAll(ctx, floor, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: keys}}}}, options.Find().SetBatchSize(n))
			}, nil)
	})

	b.Run("list-1000", func(b *testing.B) {
		d, floor, _ := setup(b)
		benchPair(b, p,
			func(int) error {
				recs, err := d.List(ctx, "k", "", n)
				if err == nil && len(recs) != n {
					err = fmt.Errorf("List: %d records", len(recs))
				}
				return err
			},
			func(int) error {
				rng := bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: "k"}, {Key: "$lt", Value: "l"}}}}
				return findAll(ctx, floor, rng, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(n).SetBatchSize(n))
			}, nil)
	})
}

// findAll runs a raw find and reads every document, as the floor.
func findAll(ctx context.Context, coll *mongo.Collection, filter bson.D, opts *options.FindOptionsBuilder) error {
	cur, err := coll.Find(ctx, filter, opts)
	if err != nil {
		return err
	}
	defer cur.Close(ctx)
	got := 0
	for cur.Next(ctx) {
		got++
	}
	if err := cur.Err(); err != nil {
		return err
	}
	if got != 1000 {
		return fmt.Errorf("floor find read %d documents", got)
	}
	return nil
}
