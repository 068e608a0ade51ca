package mongoserver

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestURIVia(t *testing.T) {
	ext := Server{URI: "mongodb://u:p@h1:1,h2:2/db?replicaSet=rs0", External: true}
	if got, want := URIVia(ext, "127.0.0.1:9"), "mongodb://u:p@127.0.0.1:9/db?replicaSet=rs0&directConnection=true&serverMonitoringMode=poll"; got != want {
		t.Errorf("URIVia = %q; want %q", got, want)
	}
	ext.URI = "mongodb://h1:1"
	if got, want := URIVia(ext, "127.0.0.1:9"), "mongodb://127.0.0.1:9/?directConnection=true&serverMonitoringMode=poll"; got != want {
		t.Errorf("URIVia = %q; want %q", got, want)
	}
	ferret := Server{URI: "mongodb://127.0.0.1:5/?serverMonitoringMode=poll", Addr: "127.0.0.1:5", Ferret: true}
	if got, want := URIVia(ferret, "127.0.0.1:9"), "mongodb://127.0.0.1:9/?serverMonitoringMode=poll"; got != want {
		t.Errorf("URIVia(FerretDB) = %q; want %q", got, want)
	}
}

// TestSharedServer: the server starts (or MONGODB_URI answers), a fresh
// collection takes a document through the shared client, and the probe
// found FerretDB exactly when it built FerretDB.
func TestSharedServer(t *testing.T) {
	s := Shared(t)
	if !s.External && !s.Ferret {
		t.Fatalf("a server the harness started is not FerretDB: %+v", s)
	}
	coll := Collection(t, SharedClient(t))
	ctx := context.Background()
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "k"}}); err != nil {
		t.Fatal(err)
	}
	if n, err := coll.CountDocuments(ctx, bson.D{}); err != nil || n != 1 {
		t.Fatalf("CountDocuments = %d, %v; want 1", n, err)
	}
	if other := Collection(t, SharedClient(t)); other.Name() == coll.Name() {
		t.Fatalf("two Collections share the name %q", coll.Name())
	}
}
