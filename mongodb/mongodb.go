// Package mongodb is the MongoDB document driver of package lease: one
// document per key in a collection, for processes on many hosts
// (go.mongodb.org/mongo-driver/v2). It imports no other database library.
//
// Importing it registers the "mongodb://" and "mongodb+srv://" schemes with
// lease.Open:
//
//	import _ "github.com/leasekit/lease/mongodb"
//
//	s, err := lease.Open(ctx, "mongodb://db1,db2,db3/app?replicaSet=rs0&collection=leases")
//
// NewDriver makes a driver on a collection of a client you already have.
// Details: docs/mongodb.md in the repository. The rules it keeps (R1–R24):
// docs/contract.md.
package mongodb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/redact"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/xdg-go/stringprep"
)

// Defaults for Open's mongodb:// URLs.
const (
	// DefaultDatabase is the database Open uses when the URL names none
	// ("mongodb://host:27017" or "mongodb://host:27017/").
	DefaultDatabase = "lease"
	// DefaultCollection is the collection Open uses unless the URL has
	// a "collection" query parameter.
	DefaultCollection = "leases"
)

// mongoCheckTimeout bounds the buildInfo check in NewDriver, which
// has no ctx of its own.
const mongoCheckTimeout = 30 * time.Second

// Option configures NewDriver.
type Option func(*config)

type config struct {
	allowUnsafe bool
}

// AllowUnsafeServer accepts a server that is known not to apply a conditional
// single-document update atomically (FerretDB v1); for tests that serialize
// requests themselves. Without it, NewDriver refuses such a server.
func AllowUnsafeServer() Option { return func(c *config) { c.allowUnsafe = true } }

// mongoDriver keeps one document per key in a collection:
//
//	{_id: key, owner: string, epoch: int64, expires: date, released: bool, session: string, version: int64}
//
// session names the session the key is attached to (R18), "" when it is
// kept per key; a document written before sessions has none, and reads
// as "".
// epoch holds the uint64 epoch's bit pattern, so epochs above
// math.MaxInt64 read as negative numbers in mongosh but round-trip exactly.
// version starts at 1 and counts writes; it is what Put's precondition
// compares. Writes use majority write concern with journaling; reads go to
// the primary with majority read concern, so that a re-read (R9) never
// sees a write that a failover could still roll back. Session records
// live in a second collection of the same database (see session.go).
type mongoDriver struct {
	coll       *mongo.Collection
	sessions   *mongo.Collection // <coll>_sessions, with coll's concerns
	clock      *serverClock      // the sample of the server's clock (R8)
	chunk      int               // writes per bulkWrite
	ownsClient bool              // made by Open: Close disconnects the client
	closed     atomic.Bool
}

// NewDriver returns a driver that keeps leases in coll, one document
// per key. It uses coll's client but its own write concern (majority,
// journaled), read preference (primary) and read concern (majority).
// Close does not disconnect coll's client: the caller owns it. Session
// records (R18) go to the collection named coll's name plus "_sessions",
// in coll's database.
//
// It creates, if they are missing, the index {session: 1} on coll and
// {expires: 1} on the session collection, which RemoveSessions uses. It first asks the server for buildInfo and refuses a server known not to
// apply a conditional single-document update atomically (FerretDB), unless
// AllowUnsafeServer is given.
func NewDriver(coll *mongo.Collection, opts ...Option) (lease.Driver, error) {
	ctx, cancel := context.WithTimeout(context.Background(), mongoCheckTimeout)
	defer cancel()
	return newMongoDriver(ctx, coll, opts)
}

func newMongoDriver(ctx context.Context, coll *mongo.Collection, opts []Option) (*mongoDriver, error) {
	if coll == nil {
		return nil, errors.New("lease: mongodb.NewDriver given a nil collection")
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	ferret, err := mongoServerIsFerretDB(ctx, coll.Database())
	if err != nil {
		return nil, err
	}
	if ferret && !cfg.allowUnsafe {
		return nil, errFerretDB
	}
	journal := true
	concerns := options.Collection().
		SetWriteConcern(&writeconcern.WriteConcern{W: writeconcern.WCMajority, Journal: &journal}).
		SetReadPreference(readpref.Primary()).
		SetReadConcern(readconcern.Majority())
	d := &mongoDriver{
		coll:     coll.Clone(concerns),
		sessions: coll.Database().Collection(coll.Name()+sessionCollectionSuffix, concerns),
		clock:    &serverClock{db: coll.Database()},
		chunk:    mongoBatchChunk,
	}
	if ferret {
		d.chunk = ferretBatchChunk
	}
	if err := d.createIndexes(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// mongoServerIsFerretDB asks the server for buildInfo and reports whether
// it names FerretDB.
func mongoServerIsFerretDB(ctx context.Context, db *mongo.Database) (bool, error) {
	var info bson.M
	if err := db.RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		return false, fmt.Errorf("lease: mongodb buildInfo: %w", err)
	}
	for k := range info {
		if strings.Contains(strings.ToLower(k), "ferretdb") {
			return true, nil
		}
	}
	return false, nil
}

// errFerretDB refuses FerretDB: v1 reads the documents an update matches
// and writes them back by _id, so two updateOne({_id, version: v}) can
// both succeed, and two holders win.
var errFerretDB = errors.New("lease: the server is FerretDB, which does not apply a conditional update atomically, " +
	"so two clients could both win a lease; use MongoDB (AllowUnsafeServer accepts it for tests " +
	"that serialize requests themselves)")

// Name returns "mongodb".
func (d *mongoDriver) Name() string { return "mongodb" }

// Capabilities: the server's conditional updates exclude every client;
// BSON dates keep milliseconds; every call reports the server's clock,
// from hello's localTime (withServerClock); session records are kept
// beside the keys, with the same compare-and-swap (R24).
func (*mongoDriver) Capabilities() lease.Capabilities {
	return lease.Capabilities{CrossProcess: true, ExpiryResolution: time.Millisecond, ServerClock: true, Sessions: true}
}

// Get reads key's document from the primary.
func (d *mongoDriver) Get(ctx context.Context, key string) (rec lease.Record, version uint64, err error) {
	if err := d.usable(ctx); err != nil {
		return lease.Record{}, 0, err
	}
	err = d.withServerClock(ctx, func() (err error) {
		rec, version, err = d.get(ctx, key)
		return err
	})
	return rec, version, err
}

func (d *mongoDriver) get(ctx context.Context, key string) (lease.Record, uint64, error) {
	raw, err := d.coll.FindOne(ctx, byID(key)).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return lease.Record{}, 0, lease.ErrNotFound
	}
	if err != nil {
		return lease.Record{}, 0, fmt.Errorf("lease: mongodb read %q: %w", key, err)
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
func (d *mongoDriver) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (version uint64, err error) {
	if err := d.usable(ctx); err != nil {
		return 0, err
	}
	err = d.withServerClock(ctx, func() (err error) {
		if pre.Absent {
			version, err = d.insert(ctx, rec)
		} else {
			version, err = d.update(ctx, rec, pre.Version)
		}
		return err
	})
	return version, err
}

func (d *mongoDriver) insert(ctx context.Context, rec lease.Record) (uint64, error) {
	doc := append(bson.D{{Key: "_id", Value: rec.Key}}, mongoFields(rec, 1)...)
	_, err := d.coll.InsertOne(ctx, doc)
	switch {
	case err == nil:
		return 1, nil
	case mongo.IsDuplicateKeyError(err):
		return 0, lease.ErrConflict
	}
	return 0, fmt.Errorf("lease: mongodb insert %q: %w", rec.Key, err)
}

func (d *mongoDriver) update(ctx context.Context, rec lease.Record, version uint64) (uint64, error) {
	if version == 0 { // versions start at 1: no document matches
		return 0, lease.ErrConflict
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
		return 0, lease.ErrConflict
	}
	return next, nil
}

// isDuplicateKey reports a duplicate _id.
func isDuplicateKey(we mongo.WriteError) bool {
	return mongo.IsDuplicateKeyError(mongo.WriteException{WriteErrors: []mongo.WriteError{we}})
}

// withMillis is rec as a BSON date keeps it: ExpiresAt in whole
// milliseconds, in UTC.
func withMillis(rec lease.Record) lease.Record {
	rec.ExpiresAt = time.UnixMilli(rec.ExpiresAt.UnixMilli()).UTC()
	return rec
}

// sameState reports whether two records of a key say the same thing.
func sameState(a, b lease.Record) bool {
	return a.Owner == b.Owner && a.Epoch == b.Epoch && a.Released == b.Released && a.ExpiresAt.Equal(b.ExpiresAt) &&
		a.Session == b.Session
}

// mongoUpdateFilter matches key's document at version, and only if it is
// one that Get parses and the store accepts: a document corrupted behind a
// holder's back (same version) is not overwritten by its Renew or Release;
// the conflict makes the store re-read and fail with ErrCorrupt (R10).
// The owner pattern has no {1,256} bound: a bounded repetition makes the
// regular expression costly to compile per request on some servers, and
// Get refuses an over-long owner anyway. It ends in \z, not $: in
// MongoDB's PCRE, $ also matches before a final newline, so "alice\n"
// would pass; \z is the very end in PCRE and in Go's regexp (FerretDB).
// No field may be an array (see scalar). session is absent (a document from before sessions) or a string that
// is "" or a session id.
func mongoUpdateFilter(key string, version uint64) bson.D {
	return bson.D{
		{Key: "_id", Value: key},
		{Key: "version", Value: scalar(bson.E{Key: "$eq", Value: int64(version)}, bson.E{Key: "$type", Value: "long"})},
		{Key: "owner", Value: scalar(bson.E{Key: "$type", Value: "string"}, bson.E{Key: "$regex", Value: ownerPattern})},
		{Key: "epoch", Value: scalar(bson.E{Key: "$type", Value: "long"}, bson.E{Key: "$ne", Value: int64(0)})},
		{Key: "expires", Value: scalar(bson.E{Key: "$type", Value: "date"})},
		{Key: "released", Value: scalar(bson.E{Key: "$type", Value: "bool"})},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: "session", Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: "session", Value: scalar(bson.E{Key: "$type", Value: "string"}, bson.E{Key: "$regex", Value: sessionPattern})}},
		}},
	}
}

// scalar is a guard's condition on one field: ops, on a field that is not
// an array. A query operator matches an array field when it matches one
// of its elements, so without it a document whose owner was hand-edited
// to ["alice"] (or whose epoch to [NumberLong(1)]) would pass, and a
// write would overwrite what Get refuses as corrupt (R10).
func scalar(ops ...bson.E) bson.D {
	return append(bson.D(ops), bson.E{Key: "$not", Value: bson.D{{Key: "$type", Value: "array"}}})
}

// ownerPattern and sessionPattern are the update guards' patterns for an
// owner (R1) and a key document's session: "" or 32 lowercase hex digits
// (lease.ValidateSessionID).
const (
	ownerPattern   = `^[!-~]+\z`
	sessionPattern = `^(?:[0-9a-f]{32})?\z`
)

// byID matches the document whose _id is id.
func byID(id string) bson.D { return bson.D{{Key: "_id", Value: id}} }

// mongoFields are a document's fields other than _id.
func mongoFields(rec lease.Record, version uint64) bson.D {
	return bson.D{
		{Key: "owner", Value: rec.Owner},
		{Key: "epoch", Value: int64(rec.Epoch)}, // bit pattern: all of uint64 round-trips
		{Key: "expires", Value: bson.NewDateTimeFromTime(rec.ExpiresAt)},
		{Key: "released", Value: rec.Released},
		{Key: "session", Value: rec.Session},
		{Key: "version", Value: int64(version)},
	}
}

// decodeMongoRecord parses a document, refusing one with a missing or
// wrongly typed field (R10).
func decodeMongoRecord(raw bson.Raw) (lease.Record, uint64, error) {
	var (
		rec     lease.Record
		version int64
		ms      int64
		epoch   int64
		ok      bool
	)
	// A server sends well-formed BSON; anything else is damage, and the
	// lookups below would read fields out of it anyway (found by fuzzing).
	if err := raw.Validate(); err != nil {
		return lease.Record{}, 0, corrupt("mongodb document is malformed BSON: %v", err)
	}
	field := func(name string) bson.RawValue {
		v, err := raw.LookupErr(name)
		if err != nil {
			return bson.RawValue{}
		}
		return v
	}
	if rec.Key, ok = field("_id").StringValueOK(); !ok {
		return lease.Record{}, 0, corrupt("mongodb document: _id is %s, want a string", mongoType(field("_id")))
	}
	bad := func(name, want string) error {
		return corrupt("mongodb document %q: %s is %s, want %s", rec.Key, name, mongoType(field(name)), want)
	}
	if rec.Owner, ok = field("owner").StringValueOK(); !ok {
		return lease.Record{}, 0, bad("owner", "a string")
	}
	if epoch, ok = field("epoch").Int64OK(); !ok {
		return lease.Record{}, 0, bad("epoch", "a 64-bit integer")
	}
	if ms, ok = field("expires").DateTimeOK(); !ok {
		return lease.Record{}, 0, bad("expires", "a date")
	}
	// BooleanOK reads any byte but 1 as false; BSON has only 0 and 1.
	if rec.Released, ok = field("released").BooleanOK(); !ok || field("released").Value[0] > 1 {
		return lease.Record{}, 0, bad("released", "a boolean")
	}
	if version, ok = field("version").Int64OK(); !ok || version < 1 {
		return lease.Record{}, 0, bad("version", "a 64-bit integer from 1 up")
	}
	if rec.Session, ok = keySession(field("session")); !ok {
		return lease.Record{}, 0, bad("session", `"" or a session id (32 lowercase hex digits)`)
	}
	rec.Epoch = uint64(epoch)
	rec.ExpiresAt = time.UnixMilli(ms).UTC()
	return rec, uint64(version), nil
}

// keySession reads a key document's session field: absent (a document
// written before sessions) is "", as is ""; any other value must be a
// session id (R10).
func keySession(v bson.RawValue) (string, bool) {
	if v.Type == 0 {
		return "", true
	}
	id, ok := v.StringValueOK()
	if !ok || (id != "" && lease.ValidateSessionID(id) != nil) {
		return "", false
	}
	return id, true
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
		return lease.ErrClosed
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

// openOptions are the options Open gives NewDriver; tests add
// AllowUnsafeServer to open FerretDB behind a serialising proxy.
var openOptions []Option

func init() {
	lease.RegisterScheme("mongodb", openURL)
	lease.RegisterScheme("mongodb+srv", openURL)
}

// openURL serves lease.Open for mongodb:// and mongodb+srv:// URLs: a
// driver that owns its client. The URL's path names the database
// (DefaultDatabase if empty), its "collection" parameter the collection
// (DefaultCollection if absent); every other parameter is the MongoDB
// driver's own. A user info with an unescaped "/", "?" or "#", or a
// "%" that starts no %XX escape, is refused before the MongoDB driver
// reads it, with an error that shows none of it.
func openURL(ctx context.Context, rawURL string) (lease.Driver, error) {
	u, err := splitMongoURL(rawURL)
	if err != nil {
		return nil, err
	}
	client, err := mongo.Connect(options.Client().ApplyURI(u.uri))
	if err != nil {
		return nil, connectError(err)
	}
	d, err := newMongoDriver(ctx, client.Database(u.db).Collection(u.coll), openOptions)
	if err != nil {
		dctx, cancel := context.WithTimeout(context.Background(), mongoCheckTimeout)
		defer cancel()
		_ = client.Disconnect(dctx) // the error that matters is err
		return nil, err
	}
	d.ownsClient = true
	return d, nil
}

// connectError tells why the MongoDB driver refused a URL, in its words
// less the values they quote: its URL parser quotes option values
// ("invalid option value", "invalid value for"), a bad escape or a host,
// and its TLS setup a file's path (tlsCAFile): any of them may be a piece
// of a password or token pasted unescaped,
// and SASLprep quotes the character of the password it refuses. The name
// of a known option whose value is refused is kept.
func connectError(err error) error {
	var prep stringprep.Error
	if errors.As(err, &prep) {
		return redact.Retold("lease: mongodb connect: SCRAM cannot use the password: SASLprep refuses a character in it ("+prep.Msg+")", err)
	}
	msg := redact.Unquoted(err, isOptionName)
	for _, parse := range []string{"error parsing uri: ", "error validating uri: "} {
		if rest, ok := strings.CutPrefix(msg, parse); ok {
			return redact.Retold("lease: mongodb: cannot parse the URL: "+rest, err)
		}
	}
	return redact.Retold("lease: mongodb connect: "+msg, err)
}

// isOptionName reports whether q, quoted after before in an error of the
// MongoDB driver's URL parser, is the name of an option it knows: it
// quotes only those after "invalid value for ".
func isOptionName(before, q string) bool {
	name := strings.Trim(q, `"`)
	return strings.HasSuffix(before, "invalid value for") && name != "" &&
		strings.IndexFunc(name, func(r rune) bool { return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') }) < 0
}

// mongoURL is a mongodb:// URL taken apart by splitMongoURL.
type mongoURL struct {
	uri  string // for the MongoDB driver: without the collection parameter
	db   string
	coll string
}

// splitMongoURL takes the database name from a MongoDB URL's path and the
// collection from its "collection" parameter, and returns the URL without
// that parameter (the driver warns about options it does not know). Names
// that MongoDB would refuse are refused here, and so is a URL whose
// password redact.Check finds ambiguous. The errors quote the name
// refused, never the URL: another of its parameters may carry a secret
// (tlsCertificateKeyFilePassword, an AWS session token).
func splitMongoURL(rawURL string) (mongoURL, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok || (scheme != "mongodb" && scheme != "mongodb+srv") {
		return mongoURL{}, errors.New("lease: the store URL is not a mongodb:// or mongodb+srv:// URL")
	}
	// Refused before the MongoDB driver reads it: a password holding a
	// "/" or "?" would make its hosts, database or errors show a piece of it.
	if err := redact.Check(rawURL); err != nil {
		return mongoURL{}, fmt.Errorf("lease: cannot parse the %s URL: %w", scheme, err)
	}
	hostPath, query, _ := strings.Cut(rest, "?")
	u := mongoURL{db: DefaultDatabase, coll: DefaultCollection}
	// Userinfo and socket paths have their slashes escaped: the first one
	// starts the database name.
	if _, path, ok := strings.Cut(hostPath, "/"); ok && path != "" {
		db, err := url.PathUnescape(path)
		if err == nil && !validMongoDatabase(db) {
			err = errors.New(`a database name is 1 to 63 bytes without / \ . " $ * < > : | ? space or NUL`)
		}
		if err != nil {
			return mongoURL{}, fmt.Errorf("lease: mongodb URL: database name %q: %w", path, err)
		}
		u.db = db
	}
	var kept []string
	// Split as the MongoDB driver splits, at "&" and ";".
	for _, p := range strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' }) {
		k, v, _ := strings.Cut(p, "=")
		if !strings.EqualFold(k, "collection") {
			kept = append(kept, p)
			continue
		}
		coll, err := url.QueryUnescape(v)
		if err != nil || coll == "" || strings.ContainsAny(coll, "$\x00") {
			return mongoURL{}, fmt.Errorf(`lease: mongodb URL: collection name %q: want one that is not empty, `+
				`with no "$" or NUL (escape others as %%XX)`, v)
		}
		u.coll = coll
	}
	u.uri = scheme + "://" + hostPath
	if len(kept) > 0 {
		u.uri += "?" + strings.Join(kept, "&")
	}
	return u, nil
}

// validMongoDatabase reports whether MongoDB accepts name as a database.
func validMongoDatabase(name string) bool {
	return name != "" && len(name) < 64 && !strings.ContainsAny(name, "/\\. \"$*<>:|?\x00")
}

// corrupt makes an error matching lease.ErrCorrupt (R10).
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{lease.ErrCorrupt}, args...)...)
}
