package lease

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// TestDecide checks every row of R4, and R2's epoch rules, through decide.
func TestDecide(t *testing.T) {
	exp := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	newExp := exp.Add(time.Hour)
	stored := func(epoch uint64, released bool) *Record {
		return &Record{Key: "k", Owner: "other", Epoch: epoch, ExpiresAt: exp, Released: released}
	}
	cases := []struct {
		name      string
		in        acquireInput
		wantReuse bool
		wantEpoch uint64
		unclean   bool
		wantErr   error
	}{
		{name: "R4a none", in: acquireInput{}, wantEpoch: 1},
		{name: "R4b released", in: acquireInput{Stored: stored(7, true)}, wantEpoch: 8},
		{name: "R4b released even if unexpired", in: acquireInput{Stored: stored(7, true), Expired: false}, wantEpoch: 8},
		{name: "R4c held by this instance, live", in: acquireInput{Stored: stored(7, false), Mine: true}, wantReuse: true},
		{name: "R4d held by this instance, expired", in: acquireInput{Stored: stored(7, false), Mine: true, Expired: true}, wantEpoch: 8},
		{name: "R4e held by another, live", in: acquireInput{Stored: stored(7, false)}, wantErr: ErrHeld},
		{name: "R4f held by another, expired", in: acquireInput{Stored: stored(7, false), Expired: true}, wantEpoch: 8, unclean: true},
		{name: "R2 exhausted on takeover", in: acquireInput{Stored: stored(math.MaxUint64, false), Expired: true}, wantErr: ErrEpochExhausted},
		{name: "R2 exhausted after release", in: acquireInput{Stored: stored(math.MaxUint64, true)}, wantErr: ErrEpochExhausted},
		{name: "R2 last epoch still granted", in: acquireInput{Stored: stored(math.MaxUint64-1, true)}, wantEpoch: math.MaxUint64},
		{name: "R2 re-entrant at the last epoch", in: acquireInput{Stored: stored(math.MaxUint64, false), Mine: true}, wantReuse: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Owner, tc.in.Expires = "me", newExp
			got := decide(tc.in)
			if !errors.Is(got.Err, tc.wantErr) || (tc.wantErr == nil && got.Err != nil) {
				t.Fatalf("decide err = %v; want %v", got.Err, tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			if got.Reuse != tc.wantReuse {
				t.Fatalf("decide reuse = %v; want %v", got.Reuse, tc.wantReuse)
			}
			if tc.wantReuse {
				return
			}
			want := Grant{Owner: "me", Epoch: tc.wantEpoch, ExpiresAt: newExp, PreviousUnclean: tc.unclean}
			if got.Next != want {
				t.Fatalf("decide next = %+v; want %+v", got.Next, want)
			}
		})
	}
}

// TestDecideHeldErrorNamesHolder checks that R4e's error names the holder.
func TestDecideHeldErrorNamesHolder(t *testing.T) {
	exp := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	got := decide(acquireInput{Stored: &Record{Key: "k", Owner: "other", Epoch: 3, ExpiresAt: exp}, Owner: "me"})
	var held *HeldError
	if !errors.As(got.Err, &held) {
		t.Fatalf("decide err = %v; want a *HeldError", got.Err)
	}
	want := HeldError{Key: "k", Owner: "other", Epoch: 3, ExpiresAt: exp}
	if *held != want {
		t.Fatalf("HeldError = %+v; want %+v", *held, want)
	}
}

// TestExpiredBoundary checks R4/R6: the expiry instant belongs to the next holder.
func TestExpiredBoundary(t *testing.T) {
	exp := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	for _, tc := range []struct {
		now  time.Time
		want bool
	}{
		{exp.Add(-time.Millisecond), false},
		{exp.Add(-time.Nanosecond), false},
		{exp, true},
		{exp.Add(time.Millisecond), true},
	} {
		if got := expired(exp, tc.now); got != tc.want {
			t.Errorf("expired(exp, exp%+v) = %v; want %v", tc.now.Sub(exp), got, tc.want)
		}
	}
}

// badKeys break R1; each must be refused before storage is touched.
var badKeys = []struct{ name, key string }{
	{"empty", ""},
	{"257 bytes", strings.Repeat("k", 257)},
	{"dot-dot", ".."},
	{"dot", "."},
	{"dot-dot segment", "a/../b"},
	{"dot segment", "a/./b"},
	{"double slash", "a//b"},
	{"leading slash", "/a"},
	{"trailing slash", "a/"},
	{"space", "a b"},
	{"NUL", "a\x00b"},
	{"non-ASCII", "profil\u00e9"},
	{"percent-encoded dot-dot", "%2e%2e"},
	{"backslash", `a\b`},
	{"newline", "a\nb"},
}

var goodKeys = []string{
	"k", "profile:1234", "user@example.com", "jobs/nightly/backup", "a.b_c-d:e/f@g",
	"..a", "a..", "a/.b/c", strings.Repeat("k", 256),
}

// TestValidateKey checks R1 directly.
func TestValidateKey(t *testing.T) {
	for _, tc := range badKeys {
		if err := ValidateKey(tc.key); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidateKey(%s) = %v; want ErrInvalidKey", tc.name, err)
		}
	}
	for _, key := range goodKeys {
		if err := ValidateKey(key); err != nil {
			t.Errorf("ValidateKey(%q) = %v; want nil", key, err)
		}
	}
}

// untouchable is a Driver that fails the test on any call: storage must
// not be touched (R1).
type untouchable struct{ t *testing.T }

func (u untouchable) Name() string { return "untouchable" }
func (u untouchable) Get(context.Context, string) (Record, uint64, error) {
	u.t.Errorf("Driver.Get called; want no storage access")
	return Record{}, 0, ErrNotFound
}
func (u untouchable) Put(context.Context, Record, Precondition) (uint64, error) {
	u.t.Errorf("Driver.Put called; want no storage access")
	return 0, ErrConflict
}
func (u untouchable) Close() error { return nil }

// TestInvalidKeyTouchesNoStorage checks R1 through every Store method.
func TestInvalidKeyTouchesNoStorage(t *testing.T) {
	s, err := NewDocumentStore(untouchable{t}, WithOwner("me"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range badKeys {
		t.Run(tc.name, func(t *testing.T) {
			g := Grant{Key: tc.key, Owner: "me", Epoch: 1}
			_, errAcquire := s.Acquire(ctx, tc.key)
			_, errRenew := s.Renew(ctx, g)
			errRelease := s.Release(ctx, g)
			_, errHolder := s.Holder(ctx, tc.key)
			for op, err := range map[string]error{"Acquire": errAcquire, "Renew": errRenew, "Release": errRelease, "Holder": errHolder} {
				if !errors.Is(err, ErrInvalidKey) {
					t.Errorf("%s(%q) = %v; want ErrInvalidKey", op, tc.key, err)
				}
			}
		})
	}
}

// TestInvalidOwner checks R1's owner rule: the store refuses to be built.
func TestInvalidOwner(t *testing.T) {
	for _, tc := range []struct{ name, owner string }{
		{"space", "my host"},
		{"257 bytes", strings.Repeat("o", 257)},
		{"NUL", "o\x00"},
		{"non-ASCII", "h\u00f4te"},
		{"tab", "a\tb"},
		{"DEL", "a\x7f"},
	} {
		if _, err := NewDocumentStore(untouchable{t}, WithOwner(tc.owner)); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("NewDocumentStore(WithOwner(%s)) = %v; want ErrInvalidKey", tc.name, err)
		}
	}
	if _, err := NewDocumentStore(untouchable{t}, WithOwner(strings.Repeat("o", 256)+"")); err != nil {
		t.Errorf("256-byte owner refused: %v", err)
	}
}

// TestDefaultOwner checks that the default owner is valid and unique per store.
func TestDefaultOwner(t *testing.T) {
	a, b := DefaultOwner(), DefaultOwner()
	if err := validateOwner(a); err != nil {
		t.Fatalf("DefaultOwner() = %q: %v", a, err)
	}
	if a == b {
		t.Fatalf("DefaultOwner() returned %q twice", a)
	}
}

// TestOptionsValidated checks that bad options are refused, never replaced silently.
func TestOptionsValidated(t *testing.T) {
	for name, opt := range map[string]Option{
		"zero ttl":     WithTTL(0),
		"negative ttl": WithTTL(-time.Second),
		"sub-ms ttl":   WithTTL(time.Microsecond),
		"nil clock":    WithClock(nil),
	} {
		if _, err := NewDocumentStore(untouchable{t}, opt); err == nil {
			t.Errorf("NewDocumentStore(%s) succeeded; want an error", name)
		}
	}
	if _, err := NewDocumentStore(nil); err == nil {
		t.Error("NewDocumentStore(nil) succeeded; want an error")
	}
}

// TestErrorsMatch checks that the typed errors match their sentinels and unwrap.
func TestErrorsMatch(t *testing.T) {
	var held error = &HeldError{Key: "k", Owner: "o", Epoch: 1}
	if !errors.Is(held, ErrHeld) || errors.Is(held, ErrLost) {
		t.Errorf("HeldError: Is(ErrHeld)=%v Is(ErrLost)=%v", errors.Is(held, ErrHeld), errors.Is(held, ErrLost))
	}
	var se error = &StorageError{Op: "acquire", Key: "k", Err: corrupt("epoch 0")}
	if !errors.Is(se, ErrStorage) || !errors.Is(se, ErrCorrupt) {
		t.Errorf("StorageError: Is(ErrStorage)=%v Is(ErrCorrupt)=%v", errors.Is(se, ErrStorage), errors.Is(se, ErrCorrupt))
	}
	var asSE *StorageError
	if !errors.As(se, &asSE) || asSE.Op != "acquire" {
		t.Errorf("errors.As(StorageError) = %v", asSE)
	}
	if err := lost("k", 3); !errors.Is(err, ErrLost) || errors.Is(err, ErrHeld) {
		t.Errorf("lost() = %v; want ErrLost only", err)
	}
	for _, err := range []error{ErrHeld, ErrLost, ErrInvalidKey, ErrEpochExhausted, ErrNotFound, ErrStorage, ErrCorrupt, ErrClosed, ErrConflict} {
		if !strings.HasPrefix(err.Error(), "lease: ") {
			t.Errorf("%q lacks the package prefix", err)
		}
	}
}
