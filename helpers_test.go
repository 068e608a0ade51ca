package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/testclock"
)

var ctxBG = context.Background()

func mustAcquire(t *testing.T, s Store, key string) Grant {
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

// testTTL is the TTL every test store uses unless a test says otherwise.
const testTTL = 10 * time.Second

// fakeClock is the module's one test clock (R8): time moves only when the
// test advances it.
type fakeClock = testclock.Clock

func newFakeClock() *fakeClock { return testclock.New() }

// perKeyDriver is the memory driver without sessions: a store over it
// keeps every key per key (R4–R7, R12), as over a driver written
// elsewhere that does not state Capabilities.Sessions.
type perKeyDriver struct{ *memoryDriver }

func (perKeyDriver) Capabilities() Capabilities { return Capabilities{} }

func newPerKeyDriver() Driver { return perKeyDriver{NewMemoryDriver().(*memoryDriver)} }
