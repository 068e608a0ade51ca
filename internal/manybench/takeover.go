package manybench

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
)

// Takeover measures the takeover of N keys whose holder died. The holder
// is a store that held them through one HoldEach and was then Closed,
// which leaves its grants to expire as a crash would (R15): over a driver
// that states Sessions, its one session; per key, each key's record. A
// second store has already started one HoldEach of the N keys, which wait
// in its loop; it takes every key once its holder's grant expired, ending
// the dead session first, in one write (R21), and gets each with
// PreviousUnclean. A key yielded before its grant's expiry fails the
// benchmark. The holder's TTL is the rig's, at most DefaultTTL, and an
// iteration waits for it to run out. Beside it, in each iteration, the
// floor: the driver's own GetMany and PutMany of N rows of their own that
// exist already, one call each, which is what taking N keys cannot do
// without; and the per-key baseline: another N keys, held and taken
// through stores over PerKey(driver). It reports:
//
//	ns/op, perkey-ns/op           from the holder's grant's expiry (per key: the last key's) to the
//	                              last key taken
//	floor-ns/op, ratio            the floor, and ns/op over it
//	cpu-ns/op, floor-cpu-ns/op, cpu-ratio
//	                              this process's CPU time over ns/op (on SQLite, the database's
//	                              work too), over the floor, and the first over the second: on a
//	                              loaded machine, steadier than the times
//	first-ns/op                   from the session's expiry to the first key taken
//	writes/op, perkey-writes/op   records the taker wrote until then
//	session-writes/op             of which session records: its own session's start (and a
//	                              renewal of it, if one came due), and the kill
//	kills/op                      of which sessions ended unclean: one per dead session
//	roundtrips/op, perkey-...     the taker's storage calls until then, its first look and the
//	                              looks of its wait too
//	after-roundtrips/op, ...      of which from the expiry on: the takeover itself
//	after-reads/op, after-session-reads/op
//	                              of which batched reads of keys (one a look), and reads of a
//	                              session record (one a look that meets a key naming one)
//	look-lead-ns/op               how long before the expiry the taker had read every key (its
//	                              first look): negative, and ns/op counts part of that look
func Takeover(b *testing.B, backend Backend) {
	forSizes(b, backend, backend.Sizes, benchTakeover)
}

func benchTakeover(b *testing.B, rig Rig, n int) {
	ttl := min(rig.TTL, lease.DefaultTTL)
	keys, pkKeys := Keys("", n), Keys(perKeyPrefix, n)
	pkDriver := PerKey(b, rig.Driver)
	fl := newTakeoverFloor(b, rig.Driver, n, ttl)
	var sess, per takeovers
	var floorTime, floorCPU time.Duration
	var floorTrips int
	baseline := perKey(b, rig)
	for b.Loop() {
		sess.measure(b, rig.Driver, rig.Driver, keys, ttl)
		took, cpu, trips := fl.run(b)
		floorTime += took
		floorCPU += cpu
		floorTrips += trips
		if baseline {
			per.measure(b, rig.Driver, pkDriver, pkKeys, ttl)
		}
	}
	metric(b, float64(sess.after.Nanoseconds()), "ns/op")
	metric(b, float64(floorTime.Nanoseconds()), "floor-ns/op")
	metric(b, float64(floorTrips), "floor-roundtrips/op")
	ratio(b, float64(sess.after), float64(floorTime), "ratio")
	metric(b, float64(sess.cpu.Nanoseconds()), "cpu-ns/op")
	metric(b, float64(floorCPU.Nanoseconds()), "floor-cpu-ns/op")
	ratio(b, float64(sess.cpu), float64(floorCPU), "cpu-ratio")
	metric(b, float64(sess.first.Nanoseconds()), "first-ns/op")
	metric(b, float64(sess.counts.Writes), "writes/op")
	metric(b, float64(sess.counts.Session), "session-writes/op")
	metric(b, float64(sess.counts.Kills), "kills/op")
	metric(b, float64(sess.counts.Trips), "roundtrips/op")
	metric(b, float64(sess.takeover.Trips), "after-roundtrips/op")
	metric(b, float64(sess.takeover.Reads), "after-reads/op")
	metric(b, float64(sess.takeover.SessReads), "after-session-reads/op")
	metric(b, float64(sess.lead.Nanoseconds()), "look-lead-ns/op")
	if !baseline {
		return
	}
	metric(b, float64(per.after.Nanoseconds()), "perkey-ns/op")
	metric(b, float64(per.cpu.Nanoseconds()), "perkey-cpu-ns/op")
	metric(b, float64(per.counts.Writes), "perkey-writes/op")
	metric(b, float64(per.counts.Trips), "perkey-roundtrips/op")
	metric(b, float64(per.takeover.Trips), "perkey-after-roundtrips/op")
	metric(b, float64(per.lead.Nanoseconds()), "perkey-look-lead-ns/op")
}

// takeoverFloor is the floor of a takeover of n keys: the driver's own
// batched read and conditional write of n rows that exist, in key order
// (as a store's looks take their keys), through a TripCounter.
type takeoverFloor struct {
	c    *testkit.TripCounter
	keys []string
	ttl  time.Duration
}

// newTakeoverFloor writes the floor's rows once, as the dead holder's
// rows were written before its takeover.
func newTakeoverFloor(b *testing.B, d lease.Driver, n int, ttl time.Duration) *takeoverFloor {
	f := &takeoverFloor{c: &testkit.TripCounter{Driver: d}, keys: Keys("takeoverfloor/", n), ttl: ttl}
	slices.Sort(f.keys)
	f.run(b)
	return f
}

// run reads the floor's rows and writes each one's next grant, and
// returns how long that took, the process's CPU time it took, and its
// round trips.
func (f *takeoverFloor) run(b *testing.B) (took, cpu time.Duration, trips int) {
	f.c.Take()
	start, cpu0 := time.Now(), processCPU()
	putAll(b, f.c, nextWrites(b, f.c, f.keys, "floor", time.Now().Add(f.ttl)))
	return time.Since(start), processCPU() - cpu0, f.c.Take().Trips
}

// takeovers sums the takeovers of one kind of store.
type takeovers struct {
	after    time.Duration // from the last expiry to the last key taken
	first    time.Duration // from the last expiry to the first key taken
	lead     time.Duration // from the taker's first look's end to the last expiry
	cpu      time.Duration // the process's CPU time from the last expiry to the last key taken
	counts   testkit.Trips // the taker's, from its start
	takeover testkit.Trips // of which from the last expiry on
}

// measure has a store over d hold keys and close, then times a second
// store's HoldEach of them; raw is the driver without wrappers, which
// reads each key's grant's expiry.
func (t *takeovers) measure(b *testing.B, raw, d lease.Driver, keys []string, ttl time.Duration) {
	dead := store(b, d, "dead", ttl)
	holdEach(b, dead, keys)
	dead.Close()
	expiry, last := expiries(b, raw, keys)

	taker, c := counted(b, d, "taker", ttl)
	looked := make(chan time.Time, 1)
	stop := make(chan struct{})
	defer close(stop)
	go watchLook(c, len(keys), looked, stop)
	type atExpiry struct {
		trips testkit.Trips // the taker's calls before the last expiry
		cpu   time.Duration // the process's CPU time then
	}
	waited := make(chan atExpiry, 1)
	split := time.AfterFunc(time.Until(last), func() { waited <- atExpiry{c.Peek(), processCPU()} })
	var firstTaken, lastTaken time.Time
	for r := range lease.HoldEach(testkit.Patient(b), taker, keys) {
		now := time.Now()
		if r.Err != nil {
			b.Fatalf("take %s: %v", r.Key, r.Err)
		}
		g := r.Held.Grant()
		if now.Before(expiry[g.Key]) {
			b.Fatalf("%s taken at %v, before its grant's expiry %v", g.Key, now, expiry[g.Key])
		}
		if !g.PreviousUnclean {
			b.Fatalf("the takeover of %s is not PreviousUnclean", g.Key)
		}
		if firstTaken.IsZero() {
			firstTaken = now
		}
		lastTaken = now
	}
	cpu, total := processCPU(), c.Take()
	before := atExpiry{total, cpu} // every key was taken before the last expiry (per key: the last key's)
	if !split.Stop() {
		before = <-waited
	}
	t.after += lastTaken.Sub(last)
	t.first += firstTaken.Sub(last)
	t.counts = t.counts.Plus(total)
	t.cpu += cpu - before.cpu
	t.takeover.Trips += total.Trips - before.trips.Trips
	t.takeover.Reads += total.Reads - before.trips.Reads
	t.takeover.SessReads += total.SessReads - before.trips.SessReads
	select {
	case at := <-looked:
		t.lead += last.Sub(at)
	default: // the taker read every key only as it took them
	}
	releaseAll(b, taker)
	taker.Close()
}

// watchLook sends on looked the time at which c has read n distinct
// keys: the taker's first look is done.
func watchLook(c *testkit.TripCounter, n int, looked chan<- time.Time, stop <-chan struct{}) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for c.KeysRead() < n {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
	looked <- time.Now()
}

// expiries reads, through d, when the grant of each key expires (a
// session-attached key's: its session's, R20), and the last of them.
func expiries(b *testing.B, d lease.Driver, keys []string) (map[string]time.Time, time.Time) {
	ctx := context.Background()
	got, err := d.(lease.BatchReader).GetMany(ctx, keys)
	if err != nil {
		b.Fatal(err)
	}
	sessions := map[string]time.Time{}
	out := make(map[string]time.Time, len(keys))
	var last time.Time
	for i, r := range got {
		if r.Err != nil {
			b.Fatalf("read %s: %v", keys[i], r.Err)
		}
		exp := r.Rec.ExpiresAt
		if id := r.Rec.Session; id != "" {
			if _, ok := sessions[id]; !ok {
				rec, _, err := d.(lease.SessionDriver).GetSession(ctx, id)
				if err != nil {
					b.Fatalf("read session %s of %s: %v", id, keys[i], err)
				}
				sessions[id] = rec.ExpiresAt
			}
			exp = sessions[id]
		}
		out[keys[i]] = exp
		if exp.After(last) {
			last = exp
		}
	}
	return out, last
}
