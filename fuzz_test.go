package lease

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Fuzz targets for every parser of stored or user-given bytes. Their seed
// corpora live in testdata/fuzz/<name>/ and run in every `go test`;
// `make fuzz` runs each target for FUZZTIME.

// isOneLine reports an error message fit for a log line.
func isOneLine(err error) bool { return !strings.ContainsAny(err.Error(), "\n\r") }

// FuzzSQLiteRow feeds parseSQLiteRow any mix of SQLite values in the
// columns owner, epoch, expires_ms, released and version (kinds picks,
// three bits per column, the canonical type, NULL, an integer, a real,
// text or a blob). It must never panic; a refusal matches ErrCorrupt,
// names the key and fits one line (R10); a row it accepts holds the
// canonical types only, and the record round-trips through the columns
// Put writes.
func FuzzSQLiteRow(f *testing.F) {
	f.Add("k", uint16(0), "alice", int64(4), int64(1_800_000_000_000), int64(0), int64(1), 4.5, []byte("x"))
	f.Add("a/b", uint16(0), "~", int64(-1), int64(-1), int64(1), int64(9), 0.0, []byte(nil))
	f.Fuzz(func(t *testing.T, key string, kinds uint16, owner string, epoch, expires, released, version int64, real float64, blob []byte) {
		ints := [5]int64{epoch, epoch, expires, released, version}
		var cols [5]any
		canonical := true
		for i := range cols {
			kind := kinds >> (3 * i) & 7
			canonical = canonical && kind == 0
			switch kind {
			case 0:
				if i == 0 {
					cols[i] = owner
				} else {
					cols[i] = ints[i]
				}
			case 1:
				cols[i] = nil
			case 2:
				cols[i] = ints[i]
			case 3:
				cols[i] = real
			case 4:
				cols[i] = owner
			default:
				cols[i] = blob
			}
		}
		rec, v, err := parseSQLiteRow(key, cols)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !isOneLine(err) || !strings.Contains(err.Error(), fmt.Sprintf("%q", key)) {
				t.Fatalf("parseSQLiteRow(%q, %#v) = %v; want one line matching ErrCorrupt naming the key", key, cols, err)
			}
			return
		}
		if _, isText := cols[0].(string); !isText {
			t.Fatalf("accepted owner %#v, not text", cols[0])
		}
		for i := 1; i < 5; i++ {
			if _, isInt := cols[i].(int64); !isInt {
				t.Fatalf("accepted column %d %#v, not an integer", i, cols[i])
			}
		}
		if rec.Key != key || v < 1 || rec.ExpiresAt.Location() != time.UTC {
			t.Fatalf("parseSQLiteRow(%q, %#v) = %+v v%d", key, cols, rec, v)
		}
		e, ms, rel := sqliteValues(rec)
		again, v2, err := parseSQLiteRow(key, [5]any{rec.Owner, e, ms, rel, int64(v)})
		if err != nil || again != rec || v2 != v || (canonical && ([5]any{owner, e, ms, rel, int64(v)} != cols)) {
			t.Fatalf("round trip of %+v v%d through Put's columns: %+v v%d, %v (columns %#v)", rec, v, again, v2, err, cols)
		}
	})
}

// FuzzMongoRecord feeds decodeMongoRecord arbitrary bytes as a BSON
// document. It must never panic; a refusal matches ErrCorrupt and fits
// one line (R10); a document it accepts is well-formed BSON, and its
// record round-trips through the fields Put writes.
func FuzzMongoRecord(f *testing.F) {
	for _, doc := range []bson.D{
		append(bson.D{{Key: "_id", Value: "k"}}, mongoFields(Record{Owner: "alice", Epoch: 3, ExpiresAt: t0, Released: true}, 2)...),
		{{Key: "_id", Value: "k"}, {Key: "owner", Value: "x"}, {Key: "epoch", Value: "3"}},
		{{Key: "_id", Value: int64(1)}},
		append(bson.D{{Key: "_id", Value: "a/b"}}, mongoFields(Record{Owner: "~", Epoch: math.MaxUint64, ExpiresAt: time.UnixMilli(-1)}, math.MaxInt64)...),
		append(bson.D{{Key: "extra", Value: bson.D{{Key: "x", Value: 1.5}}}, {Key: "_id", Value: "k"}}, mongoFields(Record{Owner: "b", Epoch: 1}, 1)...),
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
			if !errors.Is(err, ErrCorrupt) || !isOneLine(err) {
				t.Fatalf("decodeMongoRecord(%x) = %v; want one line matching ErrCorrupt", data, err)
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

// mongoDoc is the document Put writes for rec at version v.
func mongoDoc(t *testing.T, rec Record, v uint64) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(append(bson.D{{Key: "_id", Value: rec.Key}}, mongoFields(rec, v)...))
	if err != nil {
		t.Fatalf("marshalling %+v: %v", rec, err)
	}
	return b
}

// roundTrips checks that rec, made of an accepted key and owner, comes
// back unchanged from every record encoding: an SQLite row, a MongoDB
// document and a local lock-file slot.
func roundTrips(t *testing.T, rec Record) {
	t.Helper()
	rec.ExpiresAt = time.UnixMilli(1_800_000_000_123).UTC()
	e, ms, rel := sqliteValues(rec)
	if got, _, err := parseSQLiteRow(rec.Key, [5]any{rec.Owner, e, ms, rel, int64(1)}); err != nil || got != rec {
		t.Fatalf("SQLite row of %+v reads back as %+v, %v", rec, got, err)
	}
	if got, _, err := decodeMongoRecord(mongoDoc(t, rec, 1)); err != nil || got != rec {
		t.Fatalf("MongoDB document of %+v reads back as %+v, %v", rec, got, err)
	}
	local := rec
	local.ExpiresAt = time.Time{} // the local store's grants never expire
	if seq, got, ok := decodeSlot(encodeSlot(7, local)); !ok || seq != 7 || got != local {
		t.Fatalf("local slot of %+v reads back as %+v seq %d, %v", local, got, seq, ok)
	}
}

// FuzzValidateKey: anything ValidateKey accepts is R1's alphabet, is safe
// as a relative path under a root (no NUL, not absolute, unchanged by
// filepath.Clean, so no "." or ".." segment, and Join keeps it inside the
// root), and round-trips through every record encoding. A refusal matches
// ErrInvalidKey and fits one line.
func FuzzValidateKey(f *testing.F) {
	for _, k := range []string{"a", "a/b", "..a", "a/../b", "/a", "a//b", "a\x00", strings.Repeat("x", 257), "user@host:job-1.2_3"} {
		f.Add(k)
	}
	const root = "/srv/leases"
	f.Fuzz(func(t *testing.T, key string) {
		if err := ValidateKey(key); err != nil {
			if !errors.Is(err, ErrInvalidKey) || !isOneLine(err) {
				t.Fatalf("ValidateKey(%q) = %v; want one line matching ErrInvalidKey", key, err)
			}
			return
		}
		if len(key) < 1 || len(key) > 256 || strings.Trim(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:/@") != "" {
			t.Fatalf("ValidateKey accepted %q: outside R1's alphabet or length", key)
		}
		if strings.ContainsRune(key, 0) || filepath.IsAbs(key) || filepath.Clean(key) != key {
			t.Fatalf("ValidateKey accepted %q: not a clean relative path", key)
		}
		for _, seg := range strings.Split(key, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("ValidateKey accepted %q with segment %q", key, seg)
			}
		}
		joined := filepath.Join(root, key)
		if rel, err := filepath.Rel(root, joined); err != nil || rel != key || !strings.HasPrefix(joined, root+"/") {
			t.Fatalf("ValidateKey accepted %q, which joins to %q outside %s", key, joined, root)
		}
		roundTrips(t, Record{Key: key, Owner: "o", Epoch: 1})
	})
}

// FuzzValidateOwner: anything validateOwner accepts is 1 to 256 bytes of
// printable ASCII without spaces (so no NUL, newline or control byte for
// a log line or a record), is matched by the MongoDB update guard's
// pattern as both Go (FerretDB) and PCRE (MongoDB) read it, and
// round-trips through every record encoding. Owners may contain "/" and
// ".." (R1 allows them): they are never used as paths.
func FuzzValidateOwner(f *testing.F) {
	for _, o := range []string{"alice", "host-1-ab12cd34", "a b", "a\n", `a]b*c?[d^~!`, "../x", strings.Repeat("~", 257), "\x7f"} {
		f.Add(o)
	}
	f.Fuzz(func(t *testing.T, owner string) {
		goRE := regexp.MustCompile(mongoOwnerPatternOf())
		pcre := regexp.MustCompile(strings.ReplaceAll(mongoOwnerPatternOf(), "$", `(?:\n?\z)`))
		if err := validateOwner(owner); err != nil {
			if !errors.Is(err, ErrInvalidKey) || !isOneLine(err) {
				t.Fatalf("validateOwner(%q) = %v; want one line matching ErrInvalidKey", owner, err)
			}
			if goRE.MatchString(owner) && pcre.MatchString(owner) && len(owner) <= 256 && owner != "" {
				t.Fatalf("the update guard accepts owner %q, which validateOwner refuses", owner)
			}
			return
		}
		for i := 0; i < len(owner); i++ {
			if owner[i] < '!' || owner[i] > '~' {
				t.Fatalf("validateOwner accepted %q: byte %#x", owner, owner[i])
			}
		}
		if len(owner) < 1 || len(owner) > 256 {
			t.Fatalf("validateOwner accepted %d bytes", len(owner))
		}
		if !goRE.MatchString(owner) || !pcre.MatchString(owner) {
			t.Fatalf("the MongoDB update guard refuses valid owner %q: its Renew would fail", owner)
		}
		roundTrips(t, Record{Key: "k", Owner: owner, Epoch: 1})
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

// FuzzStoreURL feeds Open's parse step any URL; it opens nothing. It must
// never panic; a refusal starts with "lease:" and never shows a password
// given as scheme://user:password@; an accepted URL names a known scheme, and a
// mongodb:// one a database and collection MongoDB accepts, with the
// collection parameter taken out of the URL the driver gets.
func FuzzStoreURL(f *testing.F) {
	for _, u := range []string{"sqlite:/tmp/l.db", "file:/var/lib/leases", "file:///x", "memory:", "mongodb://h:1/app?collection=locks&w=1",
		"mongodb+srv://h.example/?Collection=x%2Ey", "mongodb://h/a%2Fb", "mongodb://u:p@h/?collection=%", "postgres://h/", "nothing", "mongodb://h/?collection=a$b"} {
		f.Add(u)
	}
	const secret = "S3cr3tPassw0rd"
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := parseStoreURL(raw)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "lease: ") {
				t.Fatalf("parseStoreURL(%q) = %v; want a lease: error", raw, err)
			}
		} else {
			checkStoreURL(t, raw, u)
		}
		if strings.Contains(raw, secret) {
			return
		}
		for _, scheme := range []string{"mongodb", "mongodb+srv", "mysql"} {
			withSecret := scheme + "://user:" + secret + "@" + raw
			if u, err := parseStoreURL(withSecret); err != nil && strings.Contains(err.Error(), secret) {
				t.Fatalf("parseStoreURL(%q) = %v: the error shows the password", withSecret, err)
			} else if err == nil {
				checkStoreURL(t, withSecret, u)
			}
		}
	})
}

// checkStoreURL checks what parseStoreURL made of an accepted raw URL.
func checkStoreURL(t *testing.T, raw string, u storeURL) {
	t.Helper()
	if raw != u.scheme+":"+u.rest {
		t.Fatalf("parseStoreURL(%q) = %+v: scheme and rest do not make the URL", raw, u)
	}
	switch u.scheme {
	case "memory", "sqlite", "file", "postgres", "postgresql":
		return
	case "mongodb", "mongodb+srv":
	default:
		t.Fatalf("parseStoreURL(%q) accepted scheme %q", raw, u.scheme)
	}
	m := u.mongo
	if !validMongoDatabase(m.db) || m.coll == "" || strings.ContainsAny(m.coll, "$\x00") {
		t.Fatalf("parseStoreURL(%q): database %q, collection %q", raw, m.db, m.coll)
	}
	if !strings.HasPrefix(m.uri, u.scheme+"://") {
		t.Fatalf("parseStoreURL(%q): driver URI %q", raw, m.uri)
	}
	_, query, _ := strings.Cut(m.uri, "?")
	for _, p := range strings.Split(query, "&") {
		if k, _, _ := strings.Cut(p, "="); strings.EqualFold(k, "collection") {
			t.Fatalf("parseStoreURL(%q): driver URI %q still has the collection parameter", raw, m.uri)
		}
	}
}

// TestMongoDecodeRefusesMalformedBSON: documents no server sends, found
// by FuzzMongoRecord: a length prefix past the end (whose fields the
// lookups still read) and a boolean byte other than 0 or 1 (which reads
// as false) are ErrCorrupt (R10).
func TestMongoDecodeRefusesMalformedBSON(t *testing.T) {
	good := mongoDoc(t, Record{Key: "k", Owner: "alice", Epoch: 3, ExpiresAt: t0, Released: false}, 2)
	if _, _, err := decodeMongoRecord(good); err != nil {
		t.Fatalf("the good document: %v", err)
	}
	long := bytes.Clone(good)
	long[0]++ // the length prefix counts a byte that is not there
	badBool := bytes.Clone(good)
	badBool[bytes.Index(badBool, []byte("released\x00"))+len("released\x00")] = 2
	for name, doc := range map[string][]byte{"length past the end": long, "boolean byte 2": badBool} {
		if _, _, err := decodeMongoRecord(doc); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v; want ErrCorrupt", name, err)
		}
	}
}
