package manybench

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/leasekit/lease"
)

// steadyPeriods is how many renewal periods (a third of the TTL each)
// HeldSteady's window lasts.
var steadyPeriods = flag.Int("lease.steady", 3, "renewal periods in BenchmarkHeldSteady's window")

// steadyProfile, when set, names a file prefix: HeldSteady writes a CPU
// profile of each steady window to prefix + "-<n>-<sessions|perkey>.prof",
// where go test's -cpuprofile would profile start-up too.
var steadyProfile = flag.String("lease.steadyprof", "", "write a CPU profile of each of BenchmarkHeldSteady's windows to this prefix")

// HeldSteady measures what keeping N keys held costs once they are held:
// N keys held by one HoldEach at the rig's TTL, renewed every third of it,
// watched over a window of -lease.steady renewal periods (3 unless set),
// from one period after start-up, the database's leftover work from the
// inserts done (Rig.Settle) and start-up's garbage collected and its
// memory returned to the system before the window starts. Beside it, in the same iteration, the per-key baseline:
// another N keys through a store over PerKey(driver), watched the same
// way. It reports:
//
//	cpu-%, perkey-cpu-%                  this process's user and system CPU time (getrusage) over wall
//	                                     time, as a percentage of one core
//	floor-cpu-%                          the session floor (one raw guarded UPDATE of one session row)
//	                                     once per period, over the same wall time
//	gcs, perkey-gcs                      garbage collections in the window
//	calls/period, writes/period, ...     the store's storage calls and written records per period
//	B/key, perkey-B/key                  heap bytes per held key
//	lost                                 Helds lost in the windows (must be 0)
//
// and, with the rig's Server, the server's side: its processes' CPU
// (server-cpu-%, perkey-server-cpu-%, and the floor's, floor-server-cpu-%)
// and the WAL it wrote per period (wal-B/period, perkey-wal-B/period).
func HeldSteady(b *testing.B, backend Backend) {
	if processCPU() == 0 {
		b.Skip("this system gives no process CPU time (getrusage)")
	}
	forSizes(b, backend, backend.Sizes, benchHeldSteady)
}

func benchHeldSteady(b *testing.B, rig Rig, n int) {
	var sess, per steady
	var floor steady
	baseline := perKey(b, rig)
	for b.Loop() {
		sess.measure(b, rig, rig.Driver, ProfileKeys("", n), fmt.Sprintf("%d-sessions", n))
		floor.floor(b, rig, sess.wall)
		if baseline {
			per.measure(b, rig, PerKey(b, rig.Driver), ProfileKeys(perKeyPrefix, n), fmt.Sprintf("%d-perkey", n))
		}
	}
	sess.report(b, rig, "", n)
	if baseline {
		per.report(b, rig, "perkey-", n)
		ratio(b, float64(per.cpu)/float64(per.wall), float64(sess.cpu)/float64(sess.wall), "perkey-cpu/cpu")
	}
	b.ReportMetric(100*float64(floor.cpu)/float64(floor.wall), "floor-cpu-%")
	if rig.Server != nil {
		b.ReportMetric(100*float64(floor.serverCPU)/float64(floor.wall), "floor-server-cpu-%")
	}
	b.ReportMetric(float64(sess.lost+per.lost), "lost")
	metric(b, float64(sess.wall.Nanoseconds()), "ns/op")
	if *startupLoad != "" {
		b.Logf("load: %s", *startupLoad)
	}
}

// steady sums the steady windows of one kind of store.
type steady struct {
	wall, cpu, serverCPU time.Duration
	wal                  int64
	periods              int
	calls, writes        int
	gcs                  uint32
	lost                 int
	bytes                int64
}

// measure holds keys through a store over d and watches it for
// steadyPeriods renewal periods, then releases them all; name names its
// window's profile.
func (m *steady) measure(b *testing.B, rig Rig, d lease.Driver, keys []string, name string) {
	s, c := counted(b, d, "bench", rig.TTL)
	var hs []*lease.Held
	m.bytes, _ = heapAndGoroutines(func() {
		hs = holdEach(b, s, keys)
		idle(b, c)
		c.Take()
	})
	settle(b, rig)
	period := rig.TTL / 3
	time.Sleep(period) // start-up's aftermath (the first renewals) is not steady state: real time is what is measured
	// Collect start-up's garbage and give its memory back to the system
	// now: the runtime's background scavenger would otherwise spend up to
	// a percent of a core in the window returning it.
	debug.FreeOSMemory()
	var gc0, gc1 runtime.MemStats
	runtime.ReadMemStats(&gc0)
	c.Take()
	stop := startProfile(b, name)
	// The server's readings (a walk of /proc) are taken outside this
	// process's: they are the benchmark's work, not the store's.
	srv0 := m.server(b, rig)
	start, cpu0 := time.Now(), processCPU()
	time.Sleep(time.Duration(*steadyPeriods) * period) // the loop renews on its own meanwhile
	cpu1, wall := processCPU(), time.Since(start)
	stop()
	srv1 := m.server(b, rig)
	m.wall += wall
	runtime.ReadMemStats(&gc1)
	counts := c.Take()
	m.cpu += cpu1 - cpu0
	m.serverCPU += srv1.cpu - srv0.cpu
	m.wal += srv1.wal - srv0.wal
	m.periods += *steadyPeriods
	m.calls += counts.Trips
	m.writes += counts.Writes
	m.gcs += gc1.NumGC - gc0.NumGC
	m.lost += lostHelds(hs)
	releaseAll(b, s)
	s.Close()
}

// floor runs the session floor once per period of a window of wall, and
// measures its CPU and the server's.
func (m *steady) floor(b *testing.B, rig Rig, wall time.Duration) {
	srv0 := m.server(b, rig)
	cpu0 := processCPU()
	for range *steadyPeriods {
		rig.SessionFloor(b)
	}
	m.cpu += processCPU() - cpu0
	srv1 := m.server(b, rig)
	m.serverCPU += srv1.cpu - srv0.cpu
	m.wall = wall
}

// serverReading is the server's CPU time and WAL position.
type serverReading struct {
	cpu time.Duration
	wal int64
}

func (m *steady) server(b *testing.B, rig Rig) serverReading {
	var r serverReading
	if rig.Server == nil {
		return r
	}
	var err error
	if r.cpu, err = rig.Server.CPU(); err == nil {
		r.wal, err = rig.Server.WAL()
	}
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// report reports m's figures, each unit after prefix.
func (m steady) report(b *testing.B, rig Rig, prefix string, n int) {
	pct := func(d time.Duration) float64 { return 100 * float64(d) / float64(m.wall) }
	b.ReportMetric(pct(m.cpu), prefix+"cpu-%")
	b.ReportMetric(float64(m.gcs), prefix+"gcs")
	b.ReportMetric(float64(m.calls)/float64(m.periods), prefix+"calls/period")
	b.ReportMetric(float64(m.writes)/float64(m.periods), prefix+"writes/period")
	b.ReportMetric(float64(m.bytes)/float64(n), prefix+"B/key")
	if rig.Server != nil {
		b.ReportMetric(pct(m.serverCPU), prefix+"server-cpu-%")
		b.ReportMetric(float64(m.wal)/float64(m.periods), prefix+"wal-B/period")
	}
}

// startProfile starts a CPU profile to -lease.steadyprof's prefix plus
// "-" + name + ".prof", if set, and returns its stop.
func startProfile(b *testing.B, name string) (stop func()) {
	if *steadyProfile == "" {
		return func() {}
	}
	f, err := os.Create(*steadyProfile + "-" + name + ".prof")
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatalf("-lease.steadyprof: %v (not with -cpuprofile)", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	}
}
