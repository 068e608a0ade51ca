package mongodb

import (
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/mongoserver"
	"github.com/leasekit/lease/internal/testkit"
	"github.com/leasekit/lease/leasetest"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestContract runs the conformance suite (package leasetest) on this
// driver: TestDriver over one driver on a fresh collection of the shared
// client, and TestStore over stores that each have a driver of their own
// on one collection, as separate processes do. See package
// mongoserver for the server (FerretDB behind a serialising proxy unless
// MONGODB_URI is set).
func TestContract(t *testing.T) {
	t.Run("driver", func(t *testing.T) { leasetest.TestDriver(t, openTestMongo) })
	t.Run("drivers", func(t *testing.T) { leasetest.TestStore(t, openMongoStore) })
	t.Run("R11 capabilities", func(t *testing.T) { testkit.WantCapabilities(t, openTestMongo(t)) })
}

// openTestMongo opens a driver on a fresh collection of the shared client.
func openTestMongo(t *testing.T) lease.Driver {
	t.Helper()
	return newTestMongoDriverOn(t, mongoserver.Collection(t, mongoserver.SharedClient(t)))
}

// openMongoStore opens a store with a driver of its own on the test's one
// collection.
func openMongoStore(t *testing.T, clock func() time.Time, owner string) lease.Store {
	t.Helper()
	coll := leasetest.Shared(t, func() *mongo.Collection { return mongoserver.Collection(t, mongoserver.SharedClient(t)) })
	d := newTestMongoDriverOn(t, coll)
	s, err := lease.NewDocumentStore(d, lease.WithOwner(owner), lease.WithClock(clock), lease.WithTTL(leasetest.TTL))
	if err != nil {
		t.Fatalf("NewDocumentStore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
