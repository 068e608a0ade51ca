package mongoproxy_test

import (
	"context"
	"sync"
	"testing"

	"github.com/leasekit/lease/internal/mongoproxy"
	"github.com/leasekit/lease/internal/mongoserver"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestFerretDBRacesWithoutProxy shows why the tests put FerretDB behind a
// serialising proxy (this package): talking to it directly, 8 clients racing
// updateOne({_id, version: v}) can all match, so more than one "wins" the
// same compare-and-swap. MongoDB applies such an update atomically; on a
// server from MONGODB_URI that is not FerretDB, this test checks that
// instead: exactly one winner every round.
func TestFerretDBRacesWithoutProxy(t *testing.T) {
	const clients, maxRounds = 8, 40
	s := mongoserver.Shared(t)
	direct := make([]*mongo.Collection, clients)
	name := mongoserver.Collection(t, mongoserver.SharedClient(t)).Name()
	for i := range direct {
		c, err := mongo.Connect(options.Client().ApplyURI(s.URI))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Disconnect(context.Background()) })
		direct[i] = c.Database("lease_test").Collection(name)
	}
	ctx := context.Background()
	if _, err := direct[0].InsertOne(ctx, bson.D{{Key: "_id", Value: "k"}, {Key: "version", Value: int64(1)}}); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= maxRounds; round++ {
		v := int64(round)
		var (
			mu      sync.Mutex
			winners int
			errs    []error
			start   = make(chan struct{})
			wg      sync.WaitGroup
		)
		for _, coll := range direct {
			wg.Go(func() {
				<-start
				res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "k"}, {Key: "version", Value: v}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "version", Value: v + 1}}}})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else if res.ModifiedCount == 1 {
					winners++
				}
			})
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("round %d: %v", round, errs)
		}
		switch {
		case !s.Ferret && winners != 1:
			t.Fatalf("round %d: %d winners of one compare-and-swap on a server that is not FerretDB; want 1", round, winners)
		case s.Ferret && winners > 1:
			t.Logf("round %d: %d of %d clients won the same updateOne({_id, version: %d}) on FerretDB without the proxy", round, winners, clients, v)
			return
		case winners == 0:
			t.Fatalf("round %d: nobody won", round)
		}
	}
	if s.Ferret {
		t.Fatalf("FerretDB gave exactly one winner in each of %d rounds: the race the serialising proxy guards against did not show", maxRounds)
	}
}

// TestProxySerialisesAndInjects: the same race through the proxy has
// exactly one winner a round, Seen counts the commands forwarded, and a
// Cut fault fails the next command naming it without forwarding it, while
// DropReply forwards it (the write lands) and cuts the reply.
func TestProxySerialisesAndInjects(t *testing.T) {
	const clients, rounds = 8, 5
	s := mongoserver.Shared(t)
	p := mongoproxy.New(t, s.Addr)
	name := mongoserver.Collection(t, mongoserver.SharedClient(t)).Name()
	colls := make([]*mongo.Collection, clients)
	for i := range colls {
		// No retried writes: a cut write must fail, not succeed on a second try.
		c, err := mongo.Connect(options.Client().ApplyURI(mongoserver.URIVia(s, p.Addr())).SetRetryWrites(false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Disconnect(context.Background()) })
		colls[i] = c.Database("lease_test").Collection(name)
	}
	ctx := context.Background()
	if _, err := colls[0].InsertOne(ctx, bson.D{{Key: "_id", Value: "k"}, {Key: "version", Value: int64(1)}}); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= rounds; round++ {
		v := int64(round)
		var (
			mu      sync.Mutex
			winners int
			wg      sync.WaitGroup
		)
		for _, coll := range colls {
			wg.Go(func() {
				res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "k"}, {Key: "version", Value: v}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "version", Value: v + 1}}}})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				winners += int(res.ModifiedCount)
				mu.Unlock()
			})
		}
		wg.Wait()
		if winners != 1 {
			t.Fatalf("round %d: %d winners through the proxy; want 1", round, winners)
		}
	}
	if n := p.Seen("update"); n < clients*rounds {
		t.Fatalf("Seen(update) = %d; want at least %d", n, clients*rounds)
	}

	cut := p.Cut("insert")
	if _, err := colls[1].InsertOne(ctx, bson.D{{Key: "_id", Value: "cut"}}); err == nil {
		t.Fatal("an insert through a Cut succeeded")
	}
	<-cut
	dropped := p.DropReply("insert")
	if _, err := colls[2].InsertOne(ctx, bson.D{{Key: "_id", Value: "dropped"}}); err == nil {
		t.Fatal("an insert whose reply was dropped succeeded")
	}
	<-dropped
	for id, want := range map[string]int64{"cut": 0, "dropped": 1} {
		n, err := colls[3].CountDocuments(ctx, bson.D{{Key: "_id", Value: id}})
		if err != nil || n != want {
			t.Fatalf("documents %q: %d, %v; want %d (Cut forwards nothing, DropReply forwards)", id, n, err, want)
		}
	}
}
