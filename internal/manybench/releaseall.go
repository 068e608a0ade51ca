package manybench

import (
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
)

// ReleaseAll measures ReleaseAll of N keys held through one HoldEach. Over
// a driver that states Sessions it ends every Held (R17), then the
// session, clean, in one write (R22): its floor is one raw guarded UPDATE
// of one session row. Beside it, the per-key baseline: another N keys
// held and released through a store over PerKey(driver), where ReleaseAll
// writes every key (in batches). Each iteration releases both. It
// reports:
//
//	ns/op, perkey-ns/op                      the ReleaseAll call
//	writes/op, perkey-writes/op              records the store wrote while it ran (a renewal due
//	                                         meanwhile counts too)
//	session-writes/op                        of which session records
//	roundtrips/op, perkey-roundtrips/op      the store's storage calls while it ran
//	floor-ns/op, ratio                       the session floor, and ns/op over it
//	perkey-ns/ns                             perkey-ns/op over ns/op
func ReleaseAll(b *testing.B, backend Backend) {
	forSizes(b, backend, backend.Sizes, benchReleaseAll)
}

func benchReleaseAll(b *testing.B, rig Rig, n int) {
	s, c := counted(b, rig.Driver, "alice", rig.TTL)
	pk, pc := counted(b, PerKey(b, rig.Driver), "alice", rig.TTL)
	keys, pkKeys := Keys("", n), Keys(perKeyPrefix, n)
	var sess, per released
	var floor time.Duration
	baseline := perKey(b, rig)
	for b.Loop() {
		sess.measure(b, s, c, keys)
		if baseline {
			per.measure(b, pk, pc, pkKeys)
		}
		floor += rig.SessionFloor(b)
	}
	metric(b, float64(sess.took.Nanoseconds()), "ns/op")
	metric(b, float64(sess.counts.Writes), "writes/op")
	metric(b, float64(sess.counts.Session), "session-writes/op")
	metric(b, float64(sess.counts.Trips), "roundtrips/op")
	metric(b, float64(floor.Nanoseconds()), "floor-ns/op")
	ratio(b, float64(sess.took), float64(floor), "ratio")
	if !baseline {
		return
	}
	metric(b, float64(per.took.Nanoseconds()), "perkey-ns/op")
	metric(b, float64(per.counts.Writes), "perkey-writes/op")
	metric(b, float64(per.counts.Trips), "perkey-roundtrips/op")
	ratio(b, float64(per.took), float64(sess.took), "perkey-ns/ns")
}

// released sums the ReleaseAll calls of one store.
type released struct {
	counts testkit.Trips
	took   time.Duration
}

// measure holds keys on s through one HoldEach and times the ReleaseAll
// that follows, counting the writes made while it ran; every Held must
// have ended by its return (R17).
func (r *released) measure(b *testing.B, s *lease.DocumentStore, c *testkit.TripCounter, keys []string) {
	hs := holdEach(b, s, keys)
	idle(b, c)
	c.Take()
	start := time.Now()
	releaseAll(b, s)
	r.took += time.Since(start)
	r.counts = r.counts.Plus(c.Take())
	if live := len(hs) - lostHelds(hs); live > 0 {
		b.Fatalf("%d of %d Helds still live after ReleaseAll", live, len(hs))
	}
	idle(b, c) // a renewal that was under way
	c.Take()
}
