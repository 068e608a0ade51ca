package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// Defaults for Open's mongodb:// URLs.
const (
	// DefaultMongoDatabase is the database Open uses when the URL names none
	// ("mongodb://host:27017" or "mongodb://host:27017/").
	DefaultMongoDatabase = "lease"
	// DefaultMongoCollection is the collection Open uses unless the URL has
	// a "collection" query parameter.
	DefaultMongoCollection = "leases"
)

// mongoCheckTimeout bounds the buildInfo check in NewMongoDriver, which
// has no ctx of its own.
const mongoCheckTimeout = 30 * time.Second

// MongoOption configures NewMongoDriver.
type MongoOption func(*mongoConfig)

type mongoConfig struct {
	allowUnsafe bool
}

// AllowUnsafeServer accepts a server that is known not to apply a conditional
// single-document update atomically (FerretDB v1); for tests that serialize
// requests themselves. Without it, NewMongoDriver refuses such a server.
func AllowUnsafeServer() MongoOption { return func(c *mongoConfig) { c.allowUnsafe = true } }

// mongoDriver keeps one document per key in a collection:
//
//	{_id: key, owner: string, epoch: int64, expires: date, released: bool, version: int64}
//
// epoch holds the uint64 epoch's bit pattern, so epochs above
// math.MaxInt64 read as negative numbers in mongosh but round-trip exactly.
// version starts at 1 and counts writes; it is what Put's precondition
// compares. Writes use majority write concern with journaling; reads go to
// the primary with majority read concern, so that a re-read (R9) never
// sees a write that a failover could still roll back.
type mongoDriver struct {
	coll       *mongo.Collection
	ownsClient bool // made by Open: Close disconnects the client
	closed     atomic.Bool
}

// NewMongoDriver returns a driver that keeps leases in coll, one document
// per key. It uses coll's client but its own write concern (majority,
// journaled), read preference (primary) and read concern (majority).
// Close does not disconnect coll's client: the caller owns it.
//
// It first asks the server for buildInfo and refuses a server known not to
// apply a conditional single-document update atomically (FerretDB), unless
// AllowUnsafeServer is given.
func NewMongoDriver(coll *mongo.Collection, opts ...MongoOption) (Driver, error) {
	ctx, cancel := context.WithTimeout(context.Background(), mongoCheckTimeout)
	defer cancel()
	return newMongoDriver(ctx, coll, opts)
}

func newMongoDriver(ctx context.Context, coll *mongo.Collection, opts []MongoOption) (*mongoDriver, error) {
	if coll == nil {
		return nil, errors.New("lease: NewMongoDriver given a nil collection")
	}
	var cfg mongoConfig
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkMongoServer(ctx, coll.Database(), cfg.allowUnsafe); err != nil {
		return nil, err
	}
	journal := true
	coll = coll.Clone(options.Collection().
		SetWriteConcern(&writeconcern.WriteConcern{W: writeconcern.WCMajority, Journal: &journal}).
		SetReadPreference(readpref.Primary()).
		SetReadConcern(readconcern.Majority()))
	return &mongoDriver{coll: coll}, nil
}

// checkMongoServer refuses a server whose buildInfo names FerretDB: v1
// reads the documents an update matches and writes them back by _id, so
// two updateOne({_id, version: v}) can both succeed, and two holders win.
func checkMongoServer(ctx context.Context, db *mongo.Database, allowUnsafe bool) error {
	var info bson.M
	if err := db.RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		return fmt.Errorf("lease: mongodb buildInfo: %w", err)
	}
	for k := range info {
		if strings.Contains(strings.ToLower(k), "ferretdb") && !allowUnsafe {
			return fmt.Errorf("lease: the server is FerretDB %v, which does not apply a conditional update atomically, "+
				"so two clients could both win a lease; use MongoDB (AllowUnsafeServer accepts it for tests "+
				"that serialize requests themselves)", info[k])
		}
	}
	return nil
}

// Name returns "mongodb".
func (d *mongoDriver) Name() string { return "mongodb" }

// Capabilities: the server's conditional updates exclude every client;
// BSON dates keep milliseconds.
func (*mongoDriver) Capabilities() Capabilities {
	return Capabilities{CrossProcess: true, ExpiryResolution: time.Millisecond}
}

// Get reads key's document from the primary.
func (d *mongoDriver) Get(ctx context.Context, key string) (Record, uint64, error) {
	if err := d.usable(ctx); err != nil {
		return Record{}, 0, err
	}
	raw, err := d.coll.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Record{}, 0, ErrNotFound
	}
	if err != nil {
		return Record{}, 0, fmt.Errorf("lease: mongodb read %q: %w", key, err)
	}
	return decodeMongoRecord(raw)
}

// Put inserts (Absent) or updates the document filtered on _id and version.
// A duplicate _id or an update that matches nothing is ErrConflict; any
// other failure leaves the outcome unknown, and the store re-reads (R9).
//
// The MongoDB driver may retry a write once after a network error. On a
// replica set the server runs a retried write at most once and answers
// the retry with the first attempt's result, so a conflict here is never
// this write's own earlier attempt; on a standalone server it does not
// retry.
func (d *mongoDriver) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	if err := d.usable(ctx); err != nil {
		return 0, err
	}
	if pre.Absent {
		return d.insert(ctx, rec)
	}
	return d.update(ctx, rec, pre.Version)
}

func (d *mongoDriver) insert(ctx context.Context, rec Record) (uint64, error) {
	doc := append(bson.D{{Key: "_id", Value: rec.Key}}, mongoFields(rec, 1)...)
	_, err := d.coll.InsertOne(ctx, doc)
	switch {
	case err == nil:
		return 1, nil
	case mongo.IsDuplicateKeyError(err):
		return 0, ErrConflict
	}
	return 0, fmt.Errorf("lease: mongodb insert %q: %w", rec.Key, err)
}

func (d *mongoDriver) update(ctx context.Context, rec Record, version uint64) (uint64, error) {
	if version == 0 { // versions start at 1: no document matches
		return 0, ErrConflict
	}
	if version >= math.MaxInt64 {
		return 0, fmt.Errorf("lease: mongodb update %q: version %d out of range", rec.Key, version)
	}
	next := version + 1
	res, err := d.coll.UpdateOne(ctx, mongoUpdateFilter(rec.Key, version),
		bson.D{{Key: "$set", Value: mongoFields(rec, next)}})
	switch {
	case err != nil:
		return 0, fmt.Errorf("lease: mongodb update %q: %w", rec.Key, err)
	case res.MatchedCount == 0:
		return 0, ErrConflict
	}
	return next, nil
}

// mongoUpdateFilter matches key's document at version, and only if it is
// one that Get parses and the store accepts: a document corrupted behind a
// holder's back (same version) is not overwritten by its Renew or Release;
// the conflict makes the store re-read and fail with ErrCorrupt (R10).
// The owner pattern has no {1,256} bound: a bounded repetition makes the
// regular expression costly to compile per request on some servers, and
// Get refuses an over-long owner anyway.
func mongoUpdateFilter(key string, version uint64) bson.D {
	return bson.D{
		{Key: "_id", Value: key},
		{Key: "version", Value: bson.D{{Key: "$eq", Value: int64(version)}, {Key: "$type", Value: "long"}}},
		{Key: "owner", Value: bson.D{{Key: "$type", Value: "string"}, {Key: "$regex", Value: "^[!-~]+$"}}},
		{Key: "epoch", Value: bson.D{{Key: "$type", Value: "long"}, {Key: "$ne", Value: int64(0)}}},
		{Key: "expires", Value: bson.D{{Key: "$type", Value: "date"}}},
		{Key: "released", Value: bson.D{{Key: "$type", Value: "bool"}}},
	}
}

// mongoFields are a document's fields other than _id.
func mongoFields(rec Record, version uint64) bson.D {
	return bson.D{
		{Key: "owner", Value: rec.Owner},
		{Key: "epoch", Value: int64(rec.Epoch)}, // bit pattern: all of uint64 round-trips
		{Key: "expires", Value: bson.NewDateTimeFromTime(rec.ExpiresAt)},
		{Key: "released", Value: rec.Released},
		{Key: "version", Value: int64(version)},
	}
}

// decodeMongoRecord parses a document, refusing one with a missing or
// wrongly typed field (R10).
func decodeMongoRecord(raw bson.Raw) (Record, uint64, error) {
	var (
		rec     Record
		version int64
		ms      int64
		epoch   int64
		ok      bool
	)
	field := func(name string) bson.RawValue {
		v, err := raw.LookupErr(name)
		if err != nil {
			return bson.RawValue{}
		}
		return v
	}
	if rec.Key, ok = field("_id").StringValueOK(); !ok {
		return Record{}, 0, corrupt("mongodb document: _id is %s, want a string", mongoType(field("_id")))
	}
	bad := func(name, want string) error {
		return corrupt("mongodb document %q: %s is %s, want %s", rec.Key, name, mongoType(field(name)), want)
	}
	if rec.Owner, ok = field("owner").StringValueOK(); !ok {
		return Record{}, 0, bad("owner", "a string")
	}
	if epoch, ok = field("epoch").Int64OK(); !ok {
		return Record{}, 0, bad("epoch", "a 64-bit integer")
	}
	if ms, ok = field("expires").DateTimeOK(); !ok {
		return Record{}, 0, bad("expires", "a date")
	}
	if rec.Released, ok = field("released").BooleanOK(); !ok {
		return Record{}, 0, bad("released", "a boolean")
	}
	if version, ok = field("version").Int64OK(); !ok || version < 1 {
		return Record{}, 0, bad("version", "a 64-bit integer from 1 up")
	}
	rec.Epoch = uint64(epoch)
	rec.ExpiresAt = time.UnixMilli(ms).UTC()
	return rec, uint64(version), nil
}

// mongoType describes a field's BSON type for an error message.
func mongoType(v bson.RawValue) string {
	if v.Type == 0 {
		return "missing"
	}
	return fmt.Sprintf("%s %s", v.Type, v)
}

// usable checks ctx and whether the driver was closed.
func (d *mongoDriver) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Close makes later calls fail with ErrClosed, and disconnects the client
// if Open connected it.
func (d *mongoDriver) Close() error {
	if d.closed.Swap(true) || !d.ownsClient {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), mongoCheckTimeout)
	defer cancel()
	return d.coll.Database().Client().Disconnect(ctx)
}

// mongoOpenOptions are the options Open gives NewMongoDriver; tests add
// AllowUnsafeServer to open FerretDB behind a serialising proxy.
var mongoOpenOptions []MongoOption

// openMongoStore serves Open for mongodb:// and mongodb+srv:// URLs. The
// URL's path names the database (DefaultMongoDatabase if empty), its
// "collection" parameter the collection (DefaultMongoCollection if absent);
// every other parameter is the MongoDB driver's own.
func openMongoStore(ctx context.Context, rawURL string, opts []Option) (Store, error) {
	uri, db, coll, err := splitMongoURL(rawURL)
	if err != nil {
		return nil, err
	}
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return nil, fmt.Errorf("lease: mongodb connect: %w", err)
	}
	d, err := newMongoDriver(ctx, client.Database(db).Collection(coll), mongoOpenOptions)
	if err == nil {
		d.ownsClient = true
		var s *DocumentStore
		if s, err = NewDocumentStore(d, append(opts, closeDriver())...); err == nil {
			return s, nil
		}
	}
	dctx, cancel := context.WithTimeout(context.Background(), mongoCheckTimeout)
	defer cancel()
	_ = client.Disconnect(dctx) // the error that matters is err
	return nil, err
}

// splitMongoURL takes the database name from a MongoDB URL's path and the
// collection from its "collection" parameter, and returns the URL without
// that parameter (the driver warns about options it does not know).
func splitMongoURL(rawURL string) (uri, db, coll string, err error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok || (scheme != "mongodb" && scheme != "mongodb+srv") {
		return "", "", "", fmt.Errorf("lease: %q is not a mongodb:// or mongodb+srv:// URL", redactMongoURL(rawURL))
	}
	hostPath, query, _ := strings.Cut(rest, "?")
	db, coll = DefaultMongoDatabase, DefaultMongoCollection
	// Userinfo and socket paths have their slashes escaped: the first one
	// starts the database name.
	if _, path, ok := strings.Cut(hostPath, "/"); ok && path != "" {
		if db, err = url.PathUnescape(path); err != nil {
			return "", "", "", fmt.Errorf("lease: database name in %q: %w", redactMongoURL(rawURL), err)
		}
	}
	var kept []string
	for _, p := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(p, "=")
		if !strings.EqualFold(k, "collection") {
			if p != "" {
				kept = append(kept, p)
			}
			continue
		}
		if coll, err = url.QueryUnescape(v); err != nil || coll == "" || strings.ContainsAny(coll, "$\x00") {
			return "", "", "", fmt.Errorf("lease: bad collection name %q in %q", v, redactMongoURL(rawURL))
		}
	}
	uri = scheme + "://" + hostPath
	if len(kept) > 0 {
		uri += "?" + strings.Join(kept, "&")
	}
	return uri, db, coll, nil
}

// redactMongoURL drops the password from a URL for error messages.
func redactMongoURL(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return rawURL
	}
	hosts, _, _ := strings.Cut(rest, "/")
	hosts, _, _ = strings.Cut(hosts, "?")
	at := strings.LastIndexByte(hosts, '@')
	if at < 0 {
		return rawURL
	}
	user, _, _ := strings.Cut(rest[:at], ":")
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}
