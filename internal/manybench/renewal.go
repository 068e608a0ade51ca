package manybench

import (
	"flag"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
)

// sessionPeriod is how often, at least, Renewal's session store renews
// (RenewEvery; 3 session floors if that is longer, so that the floor run
// after each round ends before the next starts): its round is one write,
// so a short period gives many rounds a second. A period over a second
// measures what a store renewing at the default TTL's pace meets that a
// short one does not: PostgreSQL's driver (pgx, through database/sql)
// pings a connection idle for over a second before it reuses it.
var sessionPeriod = flag.Duration("lease.period", 100*time.Millisecond, "how often, at least, BenchmarkManyRenewal's session store renews")

// Renewal measures one renewal period of N keys held through HoldEach on
// one store: the renewal that Hold's loop makes on its own, counted
// through a TripCounter around the driver. Over a driver that states
// Sessions that is one write of the store's session record, whatever N
// (R20): its floor is one raw guarded UPDATE of one session row, in the
// same run. Each iteration is one period: the counts run from the end of
// one round to the end of the next, so that every write of the store
// falls in one. A key record written in a period fails the benchmark. It
// reports:
//
//	ns/op                 the round's storage time: while one of its calls was in flight
//	writes/op             records written per period (1: the session's; more only when the
//	                      benchmark was starved and a period held two rounds, which it logs)
//	session-writes/op     of which session records
//	roundtrips/op         storage calls per period
//	floor-ns/op, ratio    the floor, and ns/op over it
//	B/key, goroutines     what holding the N keys added to the heap and the goroutines
//
// The database settles (Rig.Settle) before the first period: the first
// renewal after start-up would otherwise pay for start-up's checkpoint.
// The floor of each period is sent after a third of a period at rest,
// with the store's calls held back until it is done, as the store's
// renewal is sent after most of a period at rest: a write sent right after
// other calls is faster, and a floor sent at once would time a warm
// process and database against a cold renewal (see round).
//
// Beside it, the per-key baseline (perkey-*): another N keys held through
// a store over PerKey(driver), renewing every max(1s, 3 floors) (at most
// a third of the TTL), timed over one round of at least N writes after
// one round of warm-up (its storage time scaled to N writes: a round
// comes in waves, and keys renewed early add writes; its WAL too), beside
// its floor: N conditional UPDATEs in raw round trips (perkey-floor-ns/op). With the rig's Server
// it also reports the WAL the server wrote per period for each (wal-B/op,
// perkey-wal-B/op) beside its floor's; with Wire the wire commands per
// period; with Chunk the per-key round trips on a server that takes Chunk
// writes a command (perkey-chunked-roundtrips/op).
func Renewal(b *testing.B, backend Backend) {
	forSizes(b, backend, backend.Sizes, benchRenewal)
}

func benchRenewal(b *testing.B, rig Rig, n int) {
	s, c := counted(b, rig.Driver, "bench", rig.TTL)
	keys := Keys("", n)
	period := max(*sessionPeriod, 3*rig.SessionFloor(b))
	var hs []*lease.Held
	bytes, goroutines := heapAndGoroutines(func() {
		hs = holdEach(b, s, keys, lease.RenewEvery(period))
		idle(b, c)
		c.Take() // and drop the keys it counted as read
	})
	settle(b, rig)
	idle(b, c)
	c.Take() // the first period starts after the heap's measure and the settling
	session := func(t testkit.Trips) int { return t.Session }
	m := rounds{rest: period / 3}
	at := read(b, rig)
	for b.Loop() {
		at = m.round(b, rig, c, at, session, rig.SessionFloor)
	}
	if lost := lostHelds(hs); lost > 0 {
		b.Fatalf("%d of %d Helds lost", lost, n)
	}
	if keyWrites := m.counts.Writes - m.counts.Session; keyWrites != 0 {
		b.Errorf("%d key records written in %d renewal rounds of %d keys held through a session; want none, only the session (R20)",
			keyWrites, m.counts.Session, n)
	}
	releaseAll(b, s)
	s.Close()
	m.report(b, "", float64(b.N))
	b.ReportMetric(float64(bytes)/float64(n), "B/key")
	b.ReportMetric(float64(goroutines), "goroutines")
	if !perKey(b, rig) {
		return
	}
	pk := perKeyRenewal(b, rig, n)
	pk.report(b, "perkey-", 1)
	b.ReportMetric(float64(pk.bytes)/float64(n), "perkey-B/key")
	if rig.Chunk > 0 {
		b.ReportMetric(float64(pk.counts.Chunked), "perkey-chunked-roundtrips/op")
	}
	ratio(b, float64(pk.span)/float64(pk.timed), float64(m.span)/float64(m.timed), "perkey-ns/ns")
}

// perKeyRenewal holds another n keys through a store over PerKey(driver)
// and measures one round of renewals after one round of warm-up.
func perKeyRenewal(b *testing.B, rig Rig, n int) rounds {
	s, c := counted(b, PerKey(b, rig.Driver), "bench", rig.TTL)
	c.Chunk = rig.Chunk
	period := min(max(time.Second, 3*rig.Floor(b)), rig.TTL/3)
	keys := Keys(perKeyPrefix, n)
	var hs []*lease.Held
	var m rounds
	m.bytes, _ = heapAndGoroutines(func() {
		hs = holdEach(b, s, keys, lease.RenewEvery(period))
		idle(b, c)
		c.Take()
	})
	everyKey := func(t testkit.Trips) int { return t.Writes / n }
	var warm rounds
	at := warm.round(b, rig, c, read(b, rig), everyKey, rig.Floor)
	m.round(b, rig, c, at, everyKey, rig.Floor)
	// A round's N writes come in waves, and a period may hold more than N
	// (keys renewed up to half an interval early): time N writes, and
	// count their WAL.
	perN := float64(n) / float64(m.counts.Writes)
	m.span = time.Duration(float64(m.span) * perN)
	m.wal = int64(float64(m.wal) * perN)
	if lost := lostHelds(hs); lost > 0 {
		b.Fatalf("%d of %d per-key Helds lost", lost, n)
	}
	releaseAll(b, s)
	s.Close()
	return m
}

// rounds sums the renewal rounds of one store and its floor.
type rounds struct {
	rest            time.Duration // how long nothing is in flight before each floor (see round)
	counts          testkit.Trips
	span            time.Duration // the storage time of the periods that held one round
	timed, crowded  int           // periods that held one round, and more than one
	floor           time.Duration
	wal, floorWAL   int64
	wire, floorWire int
	bytes           int64 // heap the holding added
	hasWAL, hasWire bool
}

// round waits for the end of a renewal round (done counts the rounds in
// the counts so far), counting from the end of the last one (at, read
// after its floor), then runs floor once; it returns the reading after
// the floor. The WAL and wire commands of the period are counted without
// the floor's, which are counted apart. A period that held more than one
// round (the benchmark's goroutine did not run for a whole period, on a
// loaded machine) is counted, and its storage time left out of ns/op.
//
// With m.rest set (the session's rounds), the floor is sent as the
// store's renewal is: after real time at rest, nothing in flight and this
// goroutine polling as it does for a round. A write sent at once after
// other calls is faster: on PostgreSQL, 2-core machine under load, a
// session floor sent right after the round's reads took about 0.6 of the
// renewal's time, one sent after a rest 1.0. The store's calls are held
// back until the floor is done (TripCounter.Pause), so that each is timed
// alone; a renewal that came due meanwhile, sent right after the floor,
// is not at rest either, and its period's time is left out too. The
// per-key rounds' floors, N writes each, are sent at once.
func (m *rounds) round(b *testing.B, rig Rig, c *testkit.TripCounter, at reading, done func(testkit.Trips) int, floor func(*testing.B) time.Duration) reading {
	testkit.WaitFor(b, "a renewal round", func() bool { return done(c.Peek()) >= 1 && c.Idle() })
	if m.rest > 0 {
		c.Pause()
		defer c.Resume()
	}
	got := c.Take()
	m.counts = m.counts.Plus(got)
	switch {
	case done(got) > 1:
		m.crowded++
		b.Logf("%d renewal rounds in one period: the benchmark did not run for a whole period", done(got))
	case got.Held > 0:
		m.crowded++
		b.Logf("a renewal came due during the last floor and waited for it: its period is not timed")
	default:
		m.span += got.Busy
		m.timed++
	}
	end := read(b, rig)
	m.wal += end.wal - at.wal
	m.wire += end.wire - at.wire
	rested := time.Now().Add(m.rest)
	testkit.WaitFor(b, "the floor's rest", func() bool { return !time.Now().Before(rested) })
	m.floor += floor(b)
	after := read(b, rig)
	m.floorWAL += after.wal - end.wal
	m.floorWire += after.wire - end.wire
	m.hasWAL, m.hasWire = rig.Server != nil, rig.Wire != nil
	return after
}

// report reports the rounds' figures per round (of rounds), each unit
// after prefix.
func (m rounds) report(b *testing.B, prefix string, rounds float64) {
	per := func(x float64, unit string) { b.ReportMetric(x/rounds, prefix+unit) }
	if m.timed > 0 {
		b.ReportMetric(float64(m.span.Nanoseconds())/float64(m.timed), prefix+"ns/op")
		ratio(b, float64(m.span)/float64(m.timed), float64(m.floor)/rounds, prefix+"ratio")
	}
	per(float64(m.counts.Writes), "writes/op")
	per(float64(m.counts.Session), "session-writes/op")
	per(float64(m.counts.Trips), "roundtrips/op")
	per(float64(m.floor.Nanoseconds()), "floor-ns/op")
	if m.hasWAL {
		per(float64(m.wal), "wal-B/op")
		per(float64(m.floorWAL), "floor-wal-B/op")
	}
	if m.hasWire {
		per(float64(m.wire), "wire-roundtrips/op")
		per(float64(m.floorWire), "floor-wire-roundtrips/op")
	}
}

// reading is the rig's counters at one moment: the server's WAL position
// and the proxy's wire commands (0 without them).
type reading struct {
	wal  int64
	wire int
}

func read(b *testing.B, rig Rig) reading {
	var r reading
	if rig.Server != nil {
		var err error
		if r.wal, err = rig.Server.WAL(); err != nil {
			b.Fatal(err)
		}
	}
	if rig.Wire != nil {
		r.wire = rig.Wire()
	}
	return r
}
