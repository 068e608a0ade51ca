package manybench

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
)

// ReleaseAll measures ReleaseAll of N keys held through one HoldEach, each
// Held's Context waited on (Done called) as a serving goroutine's is. Over
// a driver that states Sessions it ends every Held (R17), then the
// session, clean, in one write (R22): its floors are one raw guarded
// UPDATE of one session row, and ending N contexts made as the Helds' are
// (the end of N Helds can cost no less). Beside it, the per-key baseline:
// another N keys held and released through a store over PerKey(driver),
// where ReleaseAll writes every key (in batches). Each iteration releases
// both; each call and floor is timed after a GC, so that none pays for
// the start-up's garbage. It reports:
//
//	ns/op, perkey-ns/op                      the ReleaseAll call
//	cpu-ns/op                                this process's CPU time while it ran (on a loaded
//	                                         machine, steadier than its time)
//	writes/op, perkey-writes/op              records the store wrote while it ran (a renewal due
//	                                         meanwhile counts too)
//	session-writes/op                        of which session records
//	roundtrips/op, perkey-roundtrips/op      the store's storage calls while it ran
//	floor-ns/op, ratio                       the session floor, and ns/op over it
//	cancel-ns/op, cancel-cpu-ns/op           the floor of ending N contexts: its time, and CPU
//	floors-ratio                             ns/op over floor-ns/op + cancel-ns/op
//	cpu-ratio                                cpu-ns/op over cancel-cpu-ns/op
//	perkey-ns/ns                             perkey-ns/op over ns/op
func ReleaseAll(b *testing.B, backend Backend) {
	forSizes(b, backend, backend.Sizes, benchReleaseAll)
}

func benchReleaseAll(b *testing.B, rig Rig, n int) {
	s, c := counted(b, rig.Driver, "alice", rig.TTL)
	pk, pc := counted(b, PerKey(b, rig.Driver), "alice", rig.TTL)
	keys, pkKeys := Keys("", n), Keys(perKeyPrefix, n)
	var sess, per released
	var floor, cancel, cancelCPU time.Duration
	baseline := perKey(b, rig)
	for b.Loop() {
		sess.measure(b, s, c, keys)
		if baseline {
			per.measure(b, pk, pc, pkKeys)
		}
		runtime.GC()
		floor += rig.SessionFloor(b)
		took, cpu := cancelFloor(n)
		cancel, cancelCPU = cancel+took, cancelCPU+cpu
	}
	metric(b, float64(sess.took.Nanoseconds()), "ns/op")
	metric(b, float64(sess.cpu.Nanoseconds()), "cpu-ns/op")
	metric(b, float64(sess.counts.Writes), "writes/op")
	metric(b, float64(sess.counts.Session), "session-writes/op")
	metric(b, float64(sess.counts.Trips), "roundtrips/op")
	metric(b, float64(floor.Nanoseconds()), "floor-ns/op")
	ratio(b, float64(sess.took), float64(floor), "ratio")
	metric(b, float64(cancel.Nanoseconds()), "cancel-ns/op")
	metric(b, float64(cancelCPU.Nanoseconds()), "cancel-cpu-ns/op")
	ratio(b, float64(sess.took), float64(floor+cancel), "floors-ratio")
	ratio(b, float64(sess.cpu), float64(cancelCPU), "cpu-ratio")
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
	counts    testkit.Trips
	took, cpu time.Duration
}

// measure holds keys on s through one HoldEach and times the ReleaseAll
// that follows, counting the writes made while it ran; every Held must
// have ended by its return (R17).
func (r *released) measure(b *testing.B, s *lease.DocumentStore, c *testkit.TripCounter, keys []string) {
	hs := holdEach(b, s, keys)
	for _, h := range hs {
		h.Context().Done()
	}
	idle(b, c)
	c.Take()
	runtime.GC()
	start, cpu := time.Now(), processCPU()
	releaseAll(b, s)
	r.took += time.Since(start)
	r.cpu += processCPU() - cpu
	r.counts = r.counts.Plus(c.Take())
	if live := len(hs) - lostHelds(hs); live > 0 {
		b.Fatalf("%d of %d Helds still live after ReleaseAll", live, len(hs))
	}
	idle(b, c) // a renewal that was under way
	c.Take()
}

// cancelFloor ends n contexts made as a Held's are (a cancel with a
// cause, Done called), after a GC, and returns the time and the process
// CPU the cancels took.
func cancelFloor(n int) (took, cpu time.Duration) {
	cancels := make([]context.CancelCauseFunc, n)
	for i := range cancels {
		var ctx context.Context
		ctx, cancels[i] = context.WithCancelCause(context.WithoutCancel(context.Background()))
		ctx.Done()
	}
	cause := errors.New("manybench: the floor's end")
	runtime.GC()
	start, cpu0 := time.Now(), processCPU()
	for _, cancel := range cancels {
		cancel(cause)
	}
	return time.Since(start), processCPU() - cpu0
}
