package manybench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
)

// ReleaseAll measures ReleaseAll of N keys held through HoldEach, and the
// takeover, through one HoldEach, of N keys whose holder died (their
// records expired, written beside the store): Hold's loop takes them with
// batched reads and writes. It reports the time and round trips of each.
func ReleaseAll(b *testing.B, backend Backend) {
	forSizes(b, backend, backend.Sizes, func(b *testing.B, rig Rig, n int) {
		ca := &testkit.TripCounter{Driver: rig.Driver}
		cb := &testkit.TripCounter{Driver: rig.Driver}
		a, other := store(b, ca, "alice", rig.TTL), store(b, cb, "bob", rig.TTL)
		keys := Keys(n)
		var release, takeover testkit.Trips
		var releaseTime, takeoverTime time.Duration
		for b.Loop() {
			holdEach(b, a, keys)
			idle(b, ca)
			ca.Take()
			start := time.Now()
			if err := a.ReleaseAll(context.Background()); err != nil {
				b.Fatal(err)
			}
			releaseTime += time.Since(start)
			release = release.Plus(ca.Take())

			diedHolding(b, rig.Driver, keys)
			cb.Take()
			start = time.Now()
			for _, h := range holdEach(b, other, keys) {
				if !h.Grant().PreviousUnclean {
					b.Fatalf("takeover of %s not PreviousUnclean", h.Grant().Key)
				}
			}
			takeoverTime += time.Since(start)
			takeover = takeover.Plus(cb.Take())
			if err := other.ReleaseAll(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		metric(b, float64(releaseTime.Nanoseconds()), "releaseall-ns/op")
		metric(b, float64(release.Trips), "releaseall-roundtrips/op")
		metric(b, float64(takeoverTime.Nanoseconds()), "takeover-ns/op")
		metric(b, float64(takeover.Trips), "takeover-roundtrips/op")
	})
}

// diedHolding writes, through d, the records a holder that died holding
// keys leaves: the next epoch of each, not released, already expired.
func diedHolding(b *testing.B, d lease.Driver, keys []string) {
	putAll(b, d, nextWrites(b, d, keys, "dead", time.Now().Add(-time.Second)))
}

// nextWrites reads keys through d's GetMany and returns the writes of
// each key's next grant to owner until expires, each conditional on the
// version read.
func nextWrites(b *testing.B, d lease.Driver, keys []string, owner string, expires time.Time) []lease.Write {
	got, err := d.(lease.BatchReader).GetMany(context.Background(), keys)
	if err != nil {
		b.Fatal(err)
	}
	ws := make([]lease.Write, len(keys))
	for i, r := range got {
		ws[i] = lease.Write{Rec: lease.Record{Key: keys[i], Owner: owner, Epoch: r.Rec.Epoch + 1, ExpiresAt: expires}}
		switch {
		case errors.Is(r.Err, lease.ErrNotFound):
			ws[i].Pre = lease.Precondition{Absent: true}
		case r.Err != nil:
			b.Fatalf("get %s: %v", keys[i], r.Err)
		default:
			ws[i].Pre = lease.Precondition{Version: r.Version}
		}
	}
	return ws
}

// putAll writes ws through d's PutMany, failing on any write's error.
func putAll(b *testing.B, d lease.Driver, ws []lease.Write) {
	res, err := d.(lease.BatchDriver).PutMany(context.Background(), ws)
	if err != nil {
		b.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			b.Fatalf("put %s: %v", ws[i].Rec.Key, r.Err)
		}
	}
}
