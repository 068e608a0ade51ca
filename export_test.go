package lease

import (
	"context"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/mongoproxy"
)

// DriverUnderTest is one driver this module ships, as the tests open it.
// The table of them is drivers_test.go's (package lease_test), which can
// import the driver packages; this package's own tests cannot (the driver
// packages import lease), so that table registers each driver here
// (RegisterTestDriver) from an init, before any test runs. Importing the
// driver packages there also registers their URL schemes with Open for
// this package's tests.
type DriverUnderTest struct {
	Name string
	Open func(t *testing.T) Driver
}

// RegisterTestDriver adds d to the drivers that forEachDriver runs on.
func RegisterTestDriver(d DriverUnderTest) {
	testDrivers = append(testDrivers, testDriver{name: d.Name, open: d.Open})
}

// OpenSQLiteForTest is sqlite.Open, set by drivers_test.go, for the tests
// of this package that need an SQLite file at a path of their own.
var OpenSQLiteForTest func(path string) (Driver, error)

// ManyRig is a backend opened for one many-keys benchmark (bench_many_test.go).
type ManyRig = manyRig

// NewManyRig makes a ManyRig: the driver, the TTL its stores grant, the
// floor of one renewal period, and, for MongoDB, the proxy that d and the
// floor talk through (nil otherwise).
func NewManyRig(d Driver, ttl time.Duration, floor func(b *testing.B) time.Duration, wire *mongoproxy.Proxy) ManyRig {
	return manyRig{d: d, ttl: ttl, floor: floor, wire: wire}
}

// RegisterManyBackend adds a backend the many-keys benchmarks run on, for
// each of sizes keys; skip, when not nil, says why it cannot run n keys.
func RegisterManyBackend(name string, sizes []int, open func(b *testing.B, n int) ManyRig, skip func(b *testing.B, n int) string) {
	manyBackends = append(manyBackends, manyBackend{name: name, sizes: sizes, open: open, skip: skip})
}

// ManySizes are the Ns the many-keys benchmarks run.
var ManySizes = manySizes

// FloorKey is the key of a floor's i-th row, beside the store's keys.
var FloorKey = floorKey

// AcquireBatch and RenewBatch expose the DocumentStore's batched acquire
// and renew (R12), the paths Hold's loops take, to leasetest's model in
// this package's tests: the model finds them on the stores it drives and
// checks every key of a batch as if it had been written alone. Each answer
// is the grant and error at the same index.
func (s *DocumentStore) AcquireBatch(ctx context.Context, keys []string) ([]Grant, []error) {
	return splitResults(s.acquireMany(ctx, keys))
}

// RenewBatch: see AcquireBatch.
func (s *DocumentStore) RenewBatch(ctx context.Context, gs []Grant) ([]Grant, []error) {
	return splitResults(s.renewMany(ctx, &renewScratch{grants: gs}))
}

func splitResults(rs []grantResult) ([]Grant, []error) {
	gs, errs := make([]Grant, len(rs)), make([]error, len(rs))
	for i, r := range rs {
		gs[i], errs[i] = r.g, r.err
	}
	return gs, errs
}
