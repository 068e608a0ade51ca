package mongodb

import (
	"testing"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/mongoserver"
	"github.com/leasekit/lease/internal/storechild"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestStoreChild is the store child's entry point (package childproc);
// run directly it does nothing.
func TestStoreChild(t *testing.T) { storechild.Serve(t) }

// driverOpts lets the tests use FerretDB behind a serialising proxy.
func driverOpts(t mongoserver.T) []Option {
	if mongoserver.Shared(t).Ferret {
		return []Option{AllowUnsafeServer()}
	}
	return nil
}

// newTestMongoDriver makes a driver on a fresh collection of client c
// (nil: a new client through the shared path). It closes at the end.
func newTestMongoDriver(t testing.TB, c *mongo.Client) lease.Driver {
	t.Helper()
	if c == nil {
		c = mongoserver.Client(t, nil)
	}
	return newTestMongoDriverOn(t, mongoserver.Collection(t, c))
}

func newTestMongoDriverOn(t testing.TB, coll *mongo.Collection) lease.Driver {
	t.Helper()
	d, err := NewDriver(coll, driverOpts(t)...)
	if err != nil {
		t.Fatalf("NewDriver: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
