package manybench

import (
	"context"
	"testing"

	"github.com/leasekit/lease"
)

// PerKey is d as a driver without sessions: its Capabilities state what
// d's do except Sessions, and it is not a lease.SessionDriver, so a store
// over it keeps every key per key (R4–R7, R12), renewing each, as over a
// driver written elsewhere that does not state Sessions. It keeps d's
// batched reads and writes, which every driver of this module has.
func PerKey(b *testing.B, d lease.Driver) lease.Driver {
	if _, ok := d.(lease.BatchDriver); !ok {
		b.Fatalf("the %s driver has no PutMany", d.Name())
	}
	if _, ok := d.(lease.BatchReader); !ok {
		b.Fatalf("the %s driver has no GetMany", d.Name())
	}
	return perKeyDriver{d}
}

type perKeyDriver struct{ lease.Driver }

var (
	_ lease.BatchDriver = perKeyDriver{}
	_ lease.BatchReader = perKeyDriver{}
	_ lease.DriverInfo  = perKeyDriver{}
)

// Capabilities are d's, without Sessions.
func (p perKeyDriver) Capabilities() lease.Capabilities {
	caps := lease.DriverCapabilities(p.Driver)
	caps.Sessions = false
	return caps
}

// PutMany is d's.
func (p perKeyDriver) PutMany(ctx context.Context, ws []lease.Write) ([]lease.PutResult, error) {
	return p.Driver.(lease.BatchDriver).PutMany(ctx, ws)
}

// GetMany is d's.
func (p perKeyDriver) GetMany(ctx context.Context, keys []string) ([]lease.GetResult, error) {
	return p.Driver.(lease.BatchReader).GetMany(ctx, keys)
}
