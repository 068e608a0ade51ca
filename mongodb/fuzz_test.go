package mongodb

import (
	"bytes"
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/rules"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// isOneLine reports an error message fit for a log line.
func isOneLine(err error) bool { return !strings.ContainsAny(err.Error(), "\n\r") }

// FuzzMongoRecord feeds decodeMongoRecord arbitrary bytes as a BSON
// document. It must never panic; a refusal matches lease.ErrCorrupt and fits
// one line (R10); a document it accepts is well-formed BSON, and its
// record round-trips through the fields Put writes.
func FuzzMongoRecord(f *testing.F) {
	for _, doc := range []bson.D{
		append(bson.D{{Key: "_id", Value: "k"}}, mongoFields(lease.Record{Owner: "alice", Epoch: 3, ExpiresAt: t0, Released: true}, 2)...),
		append(bson.D{{Key: "_id", Value: "k"}}, mongoFields(lease.Record{Owner: "alice", Epoch: 3, ExpiresAt: lease.SessionKeyExpiry,
			Session: "0123456789abcdef0123456789abcdef"}, 2)...),
		{{Key: "_id", Value: "k"}, {Key: "owner", Value: "x"}, {Key: "epoch", Value: int64(1)}, {Key: "expires", Value: bson.DateTime(0)},
			{Key: "released", Value: false}, {Key: "version", Value: int64(1)}, {Key: "session", Value: "0123456789ABCDEF0123456789ABCDEF"}},
		{{Key: "_id", Value: "k"}, {Key: "owner", Value: "x"}, {Key: "epoch", Value: "3"}},
		{{Key: "_id", Value: int64(1)}},
		append(bson.D{{Key: "_id", Value: "a/b"}}, mongoFields(lease.Record{Owner: "~", Epoch: math.MaxUint64, ExpiresAt: time.UnixMilli(-1)}, math.MaxInt64)...),
		append(bson.D{{Key: "extra", Value: bson.D{{Key: "x", Value: 1.5}}}, {Key: "_id", Value: "k"}}, mongoFields(lease.Record{Owner: "b", Epoch: 1}, 1)...),
		{{Key: "_id", Value: "k"}, {Key: "owner", Value: "x"}, {Key: "epoch", Value: int64(1)}, {Key: "expires", Value: bson.DateTime(0)},
			{Key: "released", Value: false}, {Key: "version", Value: int64(0)}},
	} {
		b, err := bson.Marshal(doc)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, v, err := decodeMongoRecord(bson.Raw(data))
		if err != nil {
			if !errors.Is(err, lease.ErrCorrupt) || !isOneLine(err) {
				t.Fatalf("decodeMongoRecord(%x) = %v; want one line matching lease.ErrCorrupt", data, err)
			}
			return
		}
		if verr := bson.Raw(data).Validate(); verr != nil {
			t.Fatalf("decodeMongoRecord accepted malformed BSON %x (%v) as %+v", data, verr, rec)
		}
		if v < 1 || rec.ExpiresAt.Location() != time.UTC {
			t.Fatalf("decodeMongoRecord(%x) = %+v v%d", data, rec, v)
		}
		again, v2, err := decodeMongoRecord(mongoDoc(t, rec, v))
		if err != nil || again != rec || v2 != v {
			t.Fatalf("round trip of %+v v%d through Put's fields: %+v v%d, %v", rec, v, again, v2, err)
		}
	})
}

// FuzzMongoSession feeds decodeMongoSession arbitrary bytes as a BSON
// document. It must never panic; a refusal matches lease.ErrCorrupt and
// fits one line (R10); a record it accepts passes
// lease.CheckSessionRecord and round-trips through the fields PutSession
// writes.
func FuzzMongoSession(f *testing.F) {
	id := "0123456789abcdef0123456789abcdef"
	for _, doc := range []bson.D{
		append(byID(id), mongoSessionFields(lease.SessionRecord{ID: id, Owner: "alice", ExpiresAt: t0, State: lease.SessionLive}, 2)...),
		append(byID(id), mongoSessionFields(lease.SessionRecord{ID: id, Owner: "~", ExpiresAt: time.UnixMilli(-1), State: 3}, math.MaxInt64)...),
		{{Key: "_id", Value: id}, {Key: "owner", Value: "x"}, {Key: "expires", Value: bson.DateTime(0)}, {Key: "state", Value: int32(257)}, {Key: "version", Value: int64(1)}},
		{{Key: "_id", Value: "XYZ"}, {Key: "owner", Value: "x"}, {Key: "expires", Value: bson.DateTime(0)}, {Key: "state", Value: int32(1)}, {Key: "version", Value: int64(1)}},
		{{Key: "_id", Value: int64(1)}},
	} {
		b, err := bson.Marshal(doc)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, v, err := decodeMongoSession(bson.Raw(data))
		if err != nil {
			if !errors.Is(err, lease.ErrCorrupt) || !isOneLine(err) {
				t.Fatalf("decodeMongoSession(%x) = %v; want one line matching lease.ErrCorrupt", data, err)
			}
			return
		}
		if lease.CheckSessionRecord(rec) != nil || v < 1 || rec.ExpiresAt.Location() != time.UTC {
			t.Fatalf("decodeMongoSession(%x) = %+v v%d", data, rec, v)
		}
		b, err := bson.Marshal(append(byID(rec.ID), mongoSessionFields(rec, v)...))
		if err != nil {
			t.Fatal(err)
		}
		again, v2, err := decodeMongoSession(b)
		if err != nil || again != rec || v2 != v {
			t.Fatalf("round trip of %+v v%d through PutSession's fields: %+v v%d, %v", rec, v, again, v2, err)
		}
	})
}

// mongoDoc is the document Put writes for rec at version v.
func mongoDoc(t *testing.T, rec lease.Record, v uint64) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(append(bson.D{{Key: "_id", Value: rec.Key}}, mongoFields(rec, v)...))
	if err != nil {
		t.Fatalf("marshalling %+v: %v", rec, err)
	}
	return b
}

// FuzzMongoOwnerGuard: every owner that R1 accepts (rules.CheckOwner, the
// check lease.WithOwner makes) is matched by the update guard's owner
// pattern as both Go (FerretDB) and PCRE (MongoDB) read it, so that its
// holder's Renew can match, and round-trips through the document Put
// writes; an owner R1 refuses is not matched by both.
func FuzzMongoOwnerGuard(f *testing.F) {
	for _, o := range []string{"alice", "host-1-ab12cd34", "a b", "a\n", `a]b*c?[d^~!`, "../x", strings.Repeat("~", 257), "\x7f"} {
		f.Add(o)
	}
	f.Fuzz(func(t *testing.T, owner string) {
		goRE := regexp.MustCompile(mongoOwnerPatternOf())
		pcre := regexp.MustCompile(strings.ReplaceAll(mongoOwnerPatternOf(), "$", `(?:\n?\z)`))
		if rules.CheckOwner(owner) != nil {
			if goRE.MatchString(owner) && pcre.MatchString(owner) && len(owner) <= rules.MaxIDLen && owner != "" {
				t.Fatalf("the update guard accepts owner %q, which R1 refuses", owner)
			}
			return
		}
		if !goRE.MatchString(owner) || !pcre.MatchString(owner) {
			t.Fatalf("the MongoDB update guard refuses valid owner %q: its Renew would fail", owner)
		}
		rec := lease.Record{Key: "k", Owner: owner, Epoch: 1, ExpiresAt: time.UnixMilli(1_800_000_000_123).UTC()}
		if got, _, err := decodeMongoRecord(mongoDoc(t, rec, 1)); err != nil || got != rec {
			t.Fatalf("MongoDB document of %+v reads back as %+v, %v", rec, got, err)
		}
	})
}

// mongoOwnerPatternOf is the owner pattern of the MongoDB update guard.
func mongoOwnerPatternOf() string {
	for _, e := range mongoUpdateFilter("k", 1) {
		if e.Key == "owner" {
			for _, op := range e.Value.(bson.D) {
				if op.Key == "$regex" {
					return op.Value.(string)
				}
			}
		}
	}
	panic("the update guard has no owner pattern")
}

// FuzzMongoURL feeds splitMongoURL (what lease.Open does with a mongodb://
// URL before it connects) any URL. It must never panic; a refusal starts
// with "lease:" and never shows a password given as
// scheme://user:password@ or as a query parameter; an accepted URL names a database and
// collection MongoDB accepts, with the collection parameter taken out of
// the URL the driver gets.
func FuzzMongoURL(f *testing.F) {
	for _, u := range []string{"mongodb://h:1/app?collection=locks&w=1", "mongodb+srv://h.example/?Collection=x%2Ey", "mongodb://h/a%2Fb",
		"mongodb://u:p@h/?collection=%", "mongodb://h/?collection=a$b", "nothing", "mongodb://h/"} {
		f.Add(u)
	}
	const secret = "S3cr3tPassw0rd"
	f.Fuzz(func(t *testing.T, raw string) {
		if u, err := splitMongoURL(raw); err != nil {
			if !strings.HasPrefix(err.Error(), "lease: ") || !isOneLine(err) {
				t.Fatalf("splitMongoURL(%q) = %v; want one lease: line", raw, err)
			}
		} else {
			checkMongoURL(t, raw, u)
		}
		if strings.Contains(raw, secret) {
			return
		}
		querySep := "?"
		if strings.Contains(raw, "?") {
			querySep = "&"
		}
		for _, scheme := range []string{"mongodb", "mongodb+srv"} {
			for _, withSecret := range []string{
				scheme + "://user:" + secret + "@" + raw,
				scheme + "://" + raw + querySep + "tlsCertificateKeyFilePassword=" + secret, // found by review: the errors quoted the query
			} {
				if u, err := splitMongoURL(withSecret); err != nil && strings.Contains(err.Error(), secret) {
					t.Fatalf("splitMongoURL(%q) = %v: the error shows the password", withSecret, err)
				} else if err == nil {
					checkMongoURL(t, withSecret, u)
				}
			}
		}
	})
}

// checkMongoURL checks what splitMongoURL made of an accepted raw URL.
func checkMongoURL(t *testing.T, raw string, m mongoURL) {
	t.Helper()
	scheme, _, _ := strings.Cut(raw, "://")
	if !validMongoDatabase(m.db) || m.coll == "" || strings.ContainsAny(m.coll, "$\x00") {
		t.Fatalf("splitMongoURL(%q): database %q, collection %q", raw, m.db, m.coll)
	}
	if !strings.HasPrefix(m.uri, scheme+"://") {
		t.Fatalf("splitMongoURL(%q): driver URI %q", raw, m.uri)
	}
	_, query, _ := strings.Cut(m.uri, "?")
	for _, p := range strings.Split(query, "&") {
		if k, _, _ := strings.Cut(p, "="); strings.EqualFold(k, "collection") {
			t.Fatalf("splitMongoURL(%q): driver URI %q still has the collection parameter", raw, m.uri)
		}
	}
}

// TestMongoDecodeRefusesMalformedBSON: documents no server sends, found
// by FuzzMongoRecord: a length prefix past the end (whose fields the
// lookups still read) and a boolean byte other than 0 or 1 (which reads
// as false) are lease.ErrCorrupt (R10).
func TestMongoDecodeRefusesMalformedBSON(t *testing.T) {
	good := mongoDoc(t, lease.Record{Key: "k", Owner: "alice", Epoch: 3, ExpiresAt: t0, Released: false}, 2)
	if _, _, err := decodeMongoRecord(good); err != nil {
		t.Fatalf("the good document: %v", err)
	}
	long := bytes.Clone(good)
	long[0]++ // the length prefix counts a byte that is not there
	badBool := bytes.Clone(good)
	badBool[bytes.Index(badBool, []byte("released\x00"))+len("released\x00")] = 2
	for name, doc := range map[string][]byte{"length past the end": long, "boolean byte 2": badBool} {
		if _, _, err := decodeMongoRecord(doc); !errors.Is(err, lease.ErrCorrupt) {
			t.Errorf("%s: %v; want lease.ErrCorrupt", name, err)
		}
	}
}
