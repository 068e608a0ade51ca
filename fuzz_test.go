package lease

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasekit/lease/internal/localfs"
)

// Fuzz targets for every parser of stored or user-given bytes. Their seed
// corpora live in testdata/fuzz/<name>/ and run in every `go test`;
// `make fuzz` runs each target for FUZZTIME.

// isOneLine reports an error message fit for a log line.
func isOneLine(err error) bool { return !strings.ContainsAny(err.Error(), "\n\r") }

// roundTrips checks that rec, made of an accepted key and owner, comes
// back unchanged from the local store's lock-file slot. (The drivers'
// own fuzz targets round-trip records through their encodings.)
func roundTrips(t *testing.T, rec Record) {
	t.Helper()
	if seq, got, ok := localfs.DecodeSlot(localfs.EncodeSlot(7, toSlot(rec))); !ok || seq != 7 || got != toSlot(rec) {
		t.Fatalf("local slot of %+v reads back as %+v seq %d, %v", rec, got, seq, ok)
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
// a log line or a record) and round-trips through the local store's
// slot; package mongodb's FuzzMongoOwnerGuard checks its update guard
// against the same rule. Owners may contain "/" and
// ".." (R1 allows them): they are never used as paths.
func FuzzValidateOwner(f *testing.F) {
	for _, o := range []string{"alice", "host-1-ab12cd34", "a b", "a\n", `a]b*c?[d^~!`, "../x", strings.Repeat("~", 257), "\x7f"} {
		f.Add(o)
	}
	f.Fuzz(func(t *testing.T, owner string) {
		if err := validateOwner(owner); err != nil {
			if !errors.Is(err, ErrInvalidKey) || !isOneLine(err) {
				t.Fatalf("validateOwner(%q) = %v; want one line matching ErrInvalidKey", owner, err)
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
		roundTrips(t, Record{Key: "k", Owner: owner, Epoch: 1})
	})
}

// FuzzStoreURL feeds Open's first step (the scheme, and the opener it
// names) any URL; it opens nothing. It must never panic; a refusal starts
// with "lease:", fits one line, and never shows a password given as
// scheme://user:password@; a scheme of this module's drivers whose
// package the program did not import names that package.
func FuzzStoreURL(f *testing.F) {
	for _, u := range []string{"sqlite:/tmp/l.db", "file:/var/lib/leases", "file:///x", "memory:", "mongodb://h:1/app?collection=locks&w=1",
		"mongodb+srv://h.example/?Collection=x%2Ey", "postgres://h/", "nothing", "mysql://u:p@h/db", "redis:"} {
		f.Add(u)
	}
	const secret = "S3cr3tPassw0rd"
	f.Fuzz(func(t *testing.T, raw string) {
		checkSchemeErr(t, raw)
		if strings.Contains(raw, secret) {
			return
		}
		for _, scheme := range []string{"mongodb", "postgres", "mysql", "nosuch+scheme"} {
			withSecret := scheme + "://user:" + secret + "@" + raw
			if err := checkSchemeErr(t, withSecret); err != nil && strings.Contains(err.Error(), secret) {
				t.Fatalf("Open(%q) = %v: the error shows the password", withSecret, err)
			}
		}
	})
}

// checkSchemeErr runs Open's scheme step on raw and checks its error.
func checkSchemeErr(t *testing.T, raw string) error {
	t.Helper()
	scheme, _, err := splitScheme(raw)
	if err == nil && scheme != "memory" && scheme != "file" {
		_, err = schemeOpener(scheme, raw)
	}
	if err != nil && (!strings.HasPrefix(err.Error(), "lease: ") || !isOneLine(err)) {
		t.Fatalf("Open(%q) = %v; want one lease: line", raw, err)
	}
	if home, ok := schemeHomes[scheme]; ok && err != nil && !strings.Contains(err.Error(), "import "+home) {
		t.Fatalf("Open(%q) = %v; want it to name %s", raw, err, home)
	}
	return err
}
