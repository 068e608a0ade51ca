package lease

import (
	"context"
	"time"
)

// AcquireBatch and RenewBatch expose the DocumentStore's batched acquire
// and renew (R12), the paths Hold's loops take, to leasetest's model in
// this package's tests: the model finds them on the stores it drives and
// checks every key of a batch as if it had been written alone. Each answer
// is the grant and error at the same index.
func (s *DocumentStore) AcquireBatch(ctx context.Context, keys []string) ([]Grant, []error) {
	return splitResults(s.acquireMany(ctx, keys, nil))
}

// KeepsSessions reports whether AcquireBatch attaches its keys to the
// store's session (R18).
func (s *DocumentStore) KeepsSessions() bool { return s.sessionsOn() }

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

// NewServerClockMemoryDriver returns the memory driver as a server with a
// clock of its own, server, which it reads while serving each call and
// reports (Capabilities.ServerClock), so that the root's tests check R8's
// server clock without a database.
func NewServerClockMemoryDriver(server func() time.Time) Driver {
	return &serverClockMemory{memoryDriver: NewMemoryDriver().(*memoryDriver), server: server}
}

type serverClockMemory struct {
	*memoryDriver
	server func() time.Time
}

func (*serverClockMemory) Capabilities() Capabilities { return Capabilities{ServerClock: true} }

func (d *serverClockMemory) Get(ctx context.Context, key string) (Record, uint64, error) {
	defer ReportServerTime(ctx, d.server())
	return d.memoryDriver.Get(ctx, key)
}

func (d *serverClockMemory) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	defer ReportServerTime(ctx, d.server())
	return d.memoryDriver.Put(ctx, rec, pre)
}

func (d *serverClockMemory) GetMany(ctx context.Context, keys []string) ([]GetResult, error) {
	defer ReportServerTime(ctx, d.server())
	return d.memoryDriver.GetMany(ctx, keys)
}

func (d *serverClockMemory) PutMany(ctx context.Context, ws []Write) ([]PutResult, error) {
	defer ReportServerTime(ctx, d.server())
	return d.memoryDriver.PutMany(ctx, ws)
}

func (d *serverClockMemory) List(ctx context.Context, prefix, after string, limit int) ([]Record, error) {
	defer ReportServerTime(ctx, d.server())
	return d.memoryDriver.List(ctx, prefix, after, limit)
}

// RoundTrips is how many flock operations and durable writes the local
// store has made, for the benchmarks of package lease_test.
func (s *LocalStore) RoundTrips() int64 { return int64(s.roundTrips.Load()) }
