package leasetest_test

import (
	"cmp"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
	"github.com/leasekit/lease/leasetest"
)

// The suite must fail a driver that breaks the contract. Each broken driver
// runs through leasetest in a child process (this test binary, re-run with
// -test.run naming TestBrokenDriverChild): the suite is then judged by what
// go test itself reports (exit status, "--- FAIL" lines), with subtests,
// rapid's shrinking and t.Fatal behaving exactly as they do for a real
// driver author, which a fake testing.TB could not promise.
func TestBrokenDriversFail(t *testing.T) {
	for _, tc := range []struct {
		driver, only string
		// wantFailed: subtests (by name pattern) of which at least one
		// must fail; "": the child's test itself.
		wantFailed string
		wantOutput string
	}{
		// R5: a compare-and-swap made of a read and a later write lets two
		// racers both win.
		{driver: "nonatomic", wantFailed: `R5_racing_stores|linearizable|model`},
		// The same, caught by the history checker alone, which names its
		// visualization.
		{driver: "nonatomic", only: "linearizable", wantOutput: `not linearizable against the lease rules; see \S+linearizability\.html`},
		// R4b/R7: a driver that drops the released flag keeps every
		// released key held.
		{driver: "drops-released", wantFailed: `R4b_release_then_re-acquire|driver_Get_and_Put`},
		// R4a/R12: a PutMany that applies an Absent write over an existing
		// record (an upsert) gives a second store epoch 1 of a held key.
		{driver: "upsert-putmany", wantFailed: `PutMany_Absent_over_an_existing_record`},
		// R9/R12: a GetMany that answers with the versions of one write
		// earlier hands the store stale states to compare-and-swap on.
		{driver: "stale-getmany", wantFailed: `GetMany_fresh_versions`},
		// R24: a driver stating Sessions that stores every key record's
		// Session as "" leaves a session-attached key held for good (its
		// own expiry is lease.SessionKeyExpiry).
		{driver: "drops-session", wantFailed: `R24/Record.Session_kept_through_Put_and_Get`},
		// R24 (R18, R19, R21): a PutSession that applies an Absent write
		// over an existing session (an upsert) revives an ended session
		// and lets two racing creators both win.
		{driver: "upsert-session", wantFailed: `R24/(PutSession_compare-and-swap|racing_PutSessions)`},
		// R24: a driver that states Sessions without the methods is told
		// which it lacks.
		{driver: "sessions-unimplemented", wantFailed: `R24`,
			wantOutput: `states Capabilities.Sessions but is not a lease.SessionDriver: it lacks GetSession, PutSession, RemoveSessions`},
	} {
		t.Run(tc.driver+"/"+cmp.Or(tc.only, "all"), func(t *testing.T) {
			out, artifacts, err := runChild(t, tc.driver, tc.only)
			if err == nil {
				t.Fatalf("leasetest passed the %s driver; want it failed. Output:\n%s", tc.driver, out)
			}
			want := `--- FAIL: TestBrokenDriverChild `
			if tc.wantFailed != "" {
				want = `--- FAIL: TestBrokenDriverChild/\S*(` + tc.wantFailed + `)`
			}
			failed := regexp.MustCompile(want)
			if !failed.MatchString(out) {
				t.Fatalf("the %s driver failed, but not in a subtest matching %q. Output:\n%s", tc.driver, tc.wantFailed, out)
			}
			if tc.wantOutput == "" {
				return
			}
			if !regexp.MustCompile(tc.wantOutput).MatchString(out) {
				t.Fatalf("output does not match %q:\n%s", tc.wantOutput, out)
			}
			if tc.only != "linearizable" {
				return
			}
			pages, _ := filepath.Glob(filepath.Join(artifacts, "_artifacts", "*", "linearizability.html"))
			if len(pages) == 0 {
				t.Fatalf("no linearizability.html under the child's artifacts %s", artifacts)
			}
			if page, err := os.ReadFile(pages[0]); err != nil || !strings.Contains(string(page), "<html") {
				t.Fatalf("visualization %s: %v; want porcupine's HTML page", pages[0], err)
			}
		})
	}
}

// runChild runs TestBrokenDriverChild over the named broken driver and
// returns its output, its artifacts directory, and its exit error.
func runChild(t *testing.T, driver, only string) (out, artifacts string, err error) {
	artifacts = t.TempDir()
	ctx := testkit.Patient(t) // as long as the test may run: a loaded machine slows the child down
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBrokenDriverChild$", "-test.v",
		"-test.artifacts", "-test.outputdir="+artifacts, "-rapid.nofailfile", "-rapid.checks=20")
	cmd.Env = append(os.Environ(), "LEASETEST_BROKEN="+driver, "LEASETEST_ONLY="+only)
	b, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the child running the %s driver did not finish: %v\n%s", driver, ctx.Err(), b)
	}
	return string(b), artifacts, err
}

// TestBrokenDriverChild is TestBrokenDriversFail's child: it runs leasetest
// against the broken driver named by LEASETEST_BROKEN, and must fail.
func TestBrokenDriverChild(t *testing.T) {
	var open leasetest.DriverOpener
	switch name := os.Getenv("LEASETEST_BROKEN"); name {
	case "":
		t.Skip("runs only as the child process of TestBrokenDriversFail")
	case "nonatomic":
		open = func(*testing.T) lease.Driver { return &nonAtomicDriver{docs: map[string]doc{}} }
	case "drops-released":
		open = func(*testing.T) lease.Driver { return dropsReleased{lease.NewMemoryDriver()} }
	case "upsert-putmany":
		open = func(*testing.T) lease.Driver { return upsertPutMany{lease.NewMemoryDriver()} }
	case "stale-getmany":
		open = func(*testing.T) lease.Driver {
			return &staleGetMany{Driver: lease.NewMemoryDriver(), prev: map[string]doc{}}
		}
	case "drops-session":
		open = func(*testing.T) lease.Driver { return dropsSession{memorySessions()} }
	case "upsert-session":
		open = func(*testing.T) lease.Driver { return upsertSession{memorySessions()} }
	case "sessions-unimplemented":
		open = func(*testing.T) lease.Driver { return sessionsUnimplemented{memorySessions()} }
	default:
		t.Fatalf("unknown broken driver %q", name)
	}
	if os.Getenv("LEASETEST_ONLY") == "linearizable" {
		leasetest.TestLinearizable(t, func(t *testing.T, clock func() time.Time, owner string) lease.Store {
			d := leasetest.Shared(t, func() lease.Driver { return open(t) })
			s, err := lease.NewDocumentStore(d, lease.WithOwner(owner), lease.WithClock(clock), lease.WithTTL(leasetest.TTL))
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
		return
	}
	leasetest.TestDriver(t, open)
}

type doc struct {
	rec     lease.Record
	version uint64
}

// nonAtomicDriver is a third-party-style driver whose conditional write is
// a read, then a write: correct alone, wrong under concurrency (R5). Its
// gap between the two is widened so that racers fall into it.
type nonAtomicDriver struct {
	mu   sync.Mutex // guards docs, but not across a Put's check and write
	docs map[string]doc
}

func (d *nonAtomicDriver) Name() string { return "nonatomic" }
func (d *nonAtomicDriver) Close() error { return nil }

func (d *nonAtomicDriver) Get(ctx context.Context, key string) (lease.Record, uint64, error) {
	if err := ctx.Err(); err != nil {
		return lease.Record{}, 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, ok := d.docs[key]
	if !ok {
		return lease.Record{}, 0, lease.ErrNotFound
	}
	return cur.rec, cur.version, nil
}

func (d *nonAtomicDriver) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d.mu.Lock()
	cur, exists := d.docs[rec.Key]
	d.mu.Unlock()
	if pre.Absent == exists || (exists && cur.version != pre.Version) {
		return 0, lease.ErrConflict
	}
	time.Sleep(200 * time.Microsecond) // the window between check and write
	d.mu.Lock()
	defer d.mu.Unlock()
	next := max(cur.version, d.docs[rec.Key].version) + 1
	d.docs[rec.Key] = doc{rec: rec, version: next}
	return next, nil
}

// dropsReleased is a driver that forgets the released flag on write: every
// release leaves the key held until it expires.
type dropsReleased struct{ lease.Driver }

func (d dropsReleased) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	rec.Released = false
	return d.Driver.Put(ctx, rec, pre)
}

// upsertPutMany is a batch driver whose PutMany turns an Absent write over
// an existing record into an overwrite, as an "upsert" statement would;
// its Put is right.
type upsertPutMany struct{ lease.Driver }

func (d upsertPutMany) PutMany(ctx context.Context, ws []lease.Write) ([]lease.PutResult, error) {
	results := make([]lease.PutResult, len(ws))
	for i, w := range ws {
		if _, v, err := d.Get(ctx, w.Rec.Key); w.Pre.Absent && err == nil {
			w.Pre = lease.Precondition{Version: v}
		}
		results[i].Version, results[i].Err = d.Put(ctx, w.Rec, w.Pre)
	}
	return results, nil
}

// staleGetMany is a batch reader whose GetMany answers a key written more
// than once with its record and version of one write earlier, as a read
// from a lagging replica or a stale cache would; its Get is right.
type staleGetMany struct {
	lease.Driver
	mu   sync.Mutex     // guards prev
	prev map[string]doc // each key's state before its latest write
}

func (d *staleGetMany) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	before, v, err := d.Driver.Get(ctx, rec.Key)
	version, perr := d.Driver.Put(ctx, rec, pre)
	if perr == nil && err == nil {
		d.prev[rec.Key] = doc{rec: before, version: v}
	}
	return version, perr
}

func (d *staleGetMany) GetMany(ctx context.Context, keys []string) ([]lease.GetResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	results := make([]lease.GetResult, len(keys))
	for i, k := range keys {
		if old, ok := d.prev[k]; ok {
			results[i] = lease.GetResult{Rec: old.rec, Version: old.version}
			continue
		}
		results[i].Rec, results[i].Version, results[i].Err = d.Driver.Get(ctx, k)
	}
	return results, nil
}

// listFrom forwards List to the memory driver under a broken wrapper, so
// that only the broken method differs from a correct driver.
func listFrom(ctx context.Context, d lease.Driver, prefix, after string, limit int) ([]lease.Record, error) {
	return d.(lease.ListDriver).List(ctx, prefix, after, limit)
}

func (d upsertPutMany) List(ctx context.Context, prefix, after string, limit int) ([]lease.Record, error) {
	return listFrom(ctx, d.Driver, prefix, after, limit)
}

func (d *staleGetMany) List(ctx context.Context, prefix, after string, limit int) ([]lease.Record, error) {
	return listFrom(ctx, d.Driver, prefix, after, limit)
}

// sessionMemory is the memory driver as a driver that states sessions:
// the broken session drivers embed it and change one method. They list
// (Holders needs it) but have no batches, so that every key write is a Put.
type sessionMemory interface {
	lease.SessionDriver
	lease.DriverInfo
	lease.ListDriver
}

func memorySessions() sessionMemory { return lease.NewMemoryDriver().(sessionMemory) }

// dropsSession is a driver that states Sessions but forgets a key
// record's Session on Put, as a table without the column would.
type dropsSession struct{ sessionMemory }

func (d dropsSession) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	rec.Session = ""
	return d.sessionMemory.Put(ctx, rec, pre)
}

// upsertSession is a driver whose PutSession turns an Absent write over an
// existing session into an overwrite, as an "upsert" statement would; its
// key writes are right.
type upsertSession struct{ sessionMemory }

func (d upsertSession) PutSession(ctx context.Context, rec lease.SessionRecord, pre lease.Precondition) (uint64, error) {
	if _, v, err := d.GetSession(ctx, rec.ID); pre.Absent && err == nil {
		pre = lease.Precondition{Version: v}
	}
	return d.sessionMemory.PutSession(ctx, rec, pre)
}

// sessionsUnimplemented states Sessions, as the memory driver it wraps
// does, but has none of SessionDriver's methods.
type sessionsUnimplemented struct{ d sessionMemory }

func (s sessionsUnimplemented) Name() string                     { return s.d.Name() }
func (s sessionsUnimplemented) Capabilities() lease.Capabilities { return s.d.Capabilities() }
func (s sessionsUnimplemented) Close() error                     { return s.d.Close() }
func (s sessionsUnimplemented) Get(ctx context.Context, key string) (lease.Record, uint64, error) {
	return s.d.Get(ctx, key)
}

func (s sessionsUnimplemented) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	return s.d.Put(ctx, rec, pre)
}

func (s sessionsUnimplemented) List(ctx context.Context, prefix, after string, limit int) ([]lease.Record, error) {
	return s.d.List(ctx, prefix, after, limit)
}
