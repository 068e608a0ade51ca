// Package testkit holds the small helpers that the driver packages' tests
// share: stores on a fake clock, checks of the contract's errors and of a
// driver's capabilities, a driver that counts round trips (TripCounter),
// and waits whose patience scales with the test's deadline (Patient,
// WaitFor). Package lease's external tests use it too; its internal tests
// cannot (it imports lease).
package testkit

import (
	"context"
	"errors"
	"flag"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testclock"
)

// TTL is the TTL every test store uses unless a test says otherwise.
const TTL = 10 * time.Second

// NewDocStore builds a store over d on clock with TTL, closed when the
// test ends.
func NewDocStore(t testing.TB, d lease.Driver, clock *testclock.Clock, owner string) *lease.DocumentStore {
	t.Helper()
	s, err := lease.NewDocumentStore(d, lease.WithOwner(owner), lease.WithClock(clock.Now), lease.WithTTL(TTL))
	if err != nil {
		t.Fatalf("NewDocumentStore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// MustAcquire acquires key or fails the test.
func MustAcquire(t testing.TB, s lease.Store, key string) lease.Grant {
	t.Helper()
	g, err := s.Acquire(context.Background(), key)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v", key, err)
	}
	return g
}

// WantErr fails the test unless err matches want (nil: no error).
func WantErr(t testing.TB, op string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s = %v; want %v", op, err, want)
	}
}

// WantStorageErr fails the test unless err is a *StorageError that does
// not look like ErrHeld or ErrLost.
func WantStorageErr(t testing.TB, op string, err error) {
	t.Helper()
	var se *lease.StorageError
	if !errors.As(err, &se) || !errors.Is(err, lease.ErrStorage) {
		t.Fatalf("%s = %v; want a *StorageError", op, err)
	}
	if errors.Is(err, lease.ErrHeld) || errors.Is(err, lease.ErrLost) {
		t.Fatalf("%s = %v; a storage failure must not look like ErrHeld or ErrLost", op, err)
	}
}

// PutAll inserts a record for each key, owned by "old" at epoch 1 until
// exp, each at version 1.
func PutAll(t testing.TB, d lease.Driver, exp time.Time, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, err := d.Put(context.Background(), lease.Record{Key: k, Owner: "old", Epoch: 1, ExpiresAt: exp}, lease.Precondition{Absent: true}); err != nil {
			t.Fatalf("Put(%s): %v", k, err)
		}
	}
}

// ErrOther stands, in a table of expected batch answers, for any error
// but a conflict (an outcome the driver does not know).
var ErrOther = errors.New("any error but a conflict")

// ListPaged lists every key under prefix through d, limit records a page,
// each page starting after the last key of the one before.
func ListPaged(t testing.TB, d lease.ListDriver, prefix string, limit int) []string {
	t.Helper()
	var got []string
	for after := ""; ; {
		recs, err := d.List(context.Background(), prefix, after, limit)
		if err != nil {
			t.Fatalf("List(%q, %q): %v", prefix, after, err)
		}
		for _, r := range recs {
			got = append(got, r.Key)
		}
		if len(recs) < limit {
			return got
		}
		after = recs[len(recs)-1].Key
	}
}

// RequireHit fails the test unless a proxy's fault fired (hit is closed).
func RequireHit(t testing.TB, hit <-chan struct{}) {
	t.Helper()
	select {
	case <-hit:
	default:
		t.Fatal("the proxy's fault never fired")
	}
}

// CountingDriver counts the Gets and Puts that reach its Driver: the
// storage round trips of the store above it.
type CountingDriver struct {
	lease.Driver
	mu         sync.Mutex // guards gets and puts
	gets, puts int
}

// Get counts and forwards.
func (c *CountingDriver) Get(ctx context.Context, key string) (lease.Record, uint64, error) {
	c.mu.Lock()
	c.gets++
	c.mu.Unlock()
	return c.Driver.Get(ctx, key)
}

// Put counts and forwards.
func (c *CountingDriver) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	c.mu.Lock()
	c.puts++
	c.mu.Unlock()
	return c.Driver.Put(ctx, rec, pre)
}

// Calls returns the Gets and Puts counted so far.
func (c *CountingDriver) Calls() (gets, puts int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets, c.puts
}

// WantCapabilities checks R11 on one of this module's drivers: it states
// its capabilities (lease.DriverInfo), and what it states agrees with
// lease.DriverHasCrossProcessCAS for its name.
func WantCapabilities(t testing.TB, d lease.Driver) {
	t.Helper()
	if _, ok := d.(lease.DriverInfo); !ok {
		t.Fatalf("the %s driver does not state its capabilities (DriverInfo)", d.Name())
	}
	if got, want := lease.DriverCapabilities(d).CrossProcess, lease.DriverHasCrossProcessCAS(d.Name()); got != want {
		t.Fatalf("the %s driver states CrossProcess %v; DriverHasCrossProcessCAS says %v", d.Name(), got, want)
	}
}

// Checks is n, or 0 (rapid's own -rapid.checks) when that flag was given:
// the rapid tests run n checks in `go test`, and as many as asked in
// `make model`.
func Checks(n int) int {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "rapid.checks" })
	if given {
		return 0
	}
	return n
}
