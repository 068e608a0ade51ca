package leasetest

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
)

// StoreOpener opens one more store instance with the given clock and owner.
// Every store opened with the same t must share one backend: the simplest
// opener has one backend for the whole suite, which works, since each case
// uses keys of its own; one backend per t (Shared does the bookkeeping)
// keeps failures apart. The
// store may be closed by the suite; the opener should also close it when t
// ends (t.Cleanup). Grants expire at now + the store's TTL, which the suite
// measures, or never (ExpiresAt zero), as the local store's do.
type StoreOpener = func(t *testing.T, clock func() time.Time, owner string) lease.Store

// TTL is the TTL of the stores TestDriver builds over a driver.
const TTL = 10 * time.Second

var ctxBG = context.Background()

// shared holds the backends Shared made, by test and type.
var shared sync.Map // sharedKey -> any

type sharedKey struct {
	t   *testing.T
	typ reflect.Type
}

// Shared returns the backend build made for t, calling build only on t's
// first call (for each type B), and forgets it when t ends. A StoreOpener
// uses it to give every store of one test the same backend:
//
//	open := func(t *testing.T, clock func() time.Time, owner string) lease.Store {
//		dir := leasetest.Shared(t, func() string { return t.TempDir() })
//		s, err := lease.NewLocalStore(dir, lease.WithOwner(owner), lease.WithClock(clock))
//		...
//	}
func Shared[B any](t *testing.T, build func() B) B {
	k := sharedKey{t, reflect.TypeFor[B]()}
	if v, ok := shared.Load(k); ok {
		return v.(B)
	}
	v := build()
	if prev, loaded := shared.LoadOrStore(k, v); loaded {
		return prev.(B)
	}
	t.Cleanup(func() { shared.Delete(k) })
	return v
}

// env is one backend under a store case: every store it opens shares the
// backend, the clock, and a key space of the case's own.
type env struct {
	t     *testing.T
	clock *Clock
	ttl   time.Duration // 0: grants never expire (the local store)
	open  StoreOpener
	ns    string // the case's key prefix, hidden by the stores it opens
}

func newEnv(t *testing.T, ttl time.Duration, open StoreOpener) env {
	return env{t: t, clock: NewClock(), ttl: ttl, open: open, ns: newNamespace()}
}

// store opens one more store instance on the env's backend, its keys in
// the case's key space.
func (e env) store(owner string) lease.Store {
	e.t.Helper()
	return nsStore{Store: e.rawStore(owner), ns: e.ns}
}

// rawStore opens one more store instance as open gives it.
func (e env) rawStore(owner string) lease.Store {
	e.t.Helper()
	s := e.open(e.t, e.clock.Now, owner)
	if s == nil {
		e.t.Fatalf("open(%q) returned a nil store", owner)
	}
	e.t.Cleanup(func() { s.Close() })
	return s
}

// expiry is when a grant made now ends: zero for a store that never expires.
func (e env) expiry() time.Time {
	if e.ttl == 0 {
		return time.Time{}
	}
	return e.clock.Now().Add(e.ttl)
}

// storeCase is one rule checked against every store.
type storeCase struct {
	name        string
	needsExpiry bool // the case moves the clock past an expiry
	run         func(t *testing.T, e env)
}

// TestStore checks the rules that hold for every Store (R1-R7, R13-R15),
// the 8-store race (R5), the rapid model (TestModel) and the
// linearizability of concurrent histories (TestLinearizable). Cases about
// expiry are skipped, saying so, for a store whose grants never expire.
func TestStore(t *testing.T, open StoreOpener) {
	runStore(t, open)
}

// runStore runs TestStore's cases as subtests of t.
func runStore(t *testing.T, open StoreOpener) {
	ttl := probeTTL(t, open)
	if ttl == 0 {
		t.Log("grants never expire (ExpiresAt is zero): the cases about expiry do not apply")
	}
	for _, c := range storeCases {
		t.Run(c.name, func(t *testing.T) {
			if c.needsExpiry && ttl == 0 {
				t.Skip("the store's grants never expire")
			}
			c.run(t, newEnv(t, ttl, open))
		})
	}
	t.Run("R2-R7 model", func(t *testing.T) { TestModel(t, open, 0) })
	t.Run("R4-R7 linearizable", func(t *testing.T) { TestLinearizable(t, open) })
}

// probeTTL measures the TTL of open's stores: one grant's ExpiresAt minus
// the clock. Zero: the store's grants never expire.
func probeTTL(t *testing.T, open StoreOpener) time.Duration {
	t.Helper()
	clock := NewClock()
	s := open(t, clock.Now, "leasetest-probe")
	defer s.Close()
	g, err := s.Acquire(ctxBG, "leasetest/probe-ttl")
	if err != nil {
		t.Fatalf("measuring the TTL: Acquire = %v", err)
	}
	if err := s.Release(ctxBG, g); err != nil {
		t.Fatalf("measuring the TTL: Release = %v", err)
	}
	if g.ExpiresAt.IsZero() {
		return 0
	}
	ttl := g.ExpiresAt.Sub(clock.Now())
	if ttl <= 0 {
		t.Fatalf("a grant made at %v expires at %v: want now + TTL", clock.Now(), g.ExpiresAt)
	}
	return ttl
}

func mustAcquire(t *testing.T, s lease.Store, key string) lease.Grant {
	t.Helper()
	g, err := s.Acquire(ctxBG, key)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v", key, err)
	}
	return g
}

func wantErr(t *testing.T, op string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s = %v; want %v", op, err, want)
	}
}

// wantGrant checks a new grant's fields (R2, R4, R6).
func wantGrant(t *testing.T, e env, g lease.Grant, key, owner string, epoch uint64, unclean bool) {
	t.Helper()
	want := lease.Grant{Key: key, Owner: owner, Epoch: epoch, PreviousUnclean: unclean, ExpiresAt: e.expiry()}
	if g.Key != want.Key || g.Owner != want.Owner || g.Epoch != want.Epoch ||
		g.PreviousUnclean != want.PreviousUnclean || !g.ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("grant = %+v; want %+v", g, want)
	}
}

// invalidKeys break R1; every method must refuse them before storage.
var invalidKeys = []struct{ name, key string }{
	{"empty", ""},
	{"space", "a b"},
	{"257 bytes", string(make([]byte, 257))},
	{"leading slash", "/a"},
	{"trailing slash", "a/"},
	{"empty segment", "a//b"},
	{"dot segment", "a/./b"},
	{"dot-dot segment", "../a"},
	{"non-ASCII", "profil\u00e9"},
	{"NUL", "a\x00b"},
}
