package mongodb_test

import (
	"context"
	"log"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/mongodb"
)

import _ "github.com/leasekit/lease/mongodb" // registers mongodb:// and mongodb+srv:// with lease.Open

// docs/mongodb.md's examples, compiled (they name servers of a real
// deployment, so they are not run).
func Example() {
	ctx := context.Background()
	if err := openByURL(ctx); err != nil {
		log.Print(err)
	}
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://db1:27017/?replicaSet=rs0"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)
	if err := openWithClient(client); err != nil {
		log.Print(err)
	}
}

// openByURL opens the store by its URL, through the registered scheme.
func openByURL(ctx context.Context) error {
	s, err := lease.Open(ctx, "mongodb://db1:27017,db2:27017,db3:27017/app?replicaSet=rs0&collection=leases")
	if err != nil {
		return err
	}
	return s.Close()
}

// openWithClient builds the store on a client the program already has.
func openWithClient(client *mongo.Client) error {
	d, err := mongodb.NewDriver(client.Database("app").Collection("leases")) // github.com/leasekit/lease/mongodb
	if err != nil {
		return err
	}
	s, err := lease.NewDocumentStore(d)
	if err != nil {
		return err
	}
	return s.Close()
}
