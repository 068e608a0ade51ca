package lease_test

import (
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
)

// BenchmarkHoldUncontended measures an uncontended Hold and its Release
// in a loop beside a bare Acquire and Release on the same store, in the
// same run (testkit.HoldUncontended): on the memory driver (through its
// session, as SQLite's and PostgreSQL's Helds are kept) and on the local
// store (file:), where a round trip is a flock operation or a durable
// write. The drivers' packages run it on SQLite and PostgreSQL.
func BenchmarkHoldUncontended(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		c := &testkit.TripCounter{Driver: lease.NewMemoryDriver()}
		s, err := lease.NewDocumentStore(c, lease.WithOwner("bench"), lease.WithTTL(time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		testkit.HoldUncontended(b, s, c.Trips)
	})
	b.Run("file", func(b *testing.B) {
		s, err := lease.NewLocalStore(b.TempDir(), lease.WithOwner("bench"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		testkit.HoldUncontended(b, s, s.RoundTrips)
	})
}
