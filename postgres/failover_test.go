//go:build unix

package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/pgproxy"
	"github.com/leasekit/lease/internal/pgserver"
	"github.com/leasekit/lease/internal/testclock"
	"github.com/leasekit/lease/internal/testkit"

	"github.com/jackc/pgx/v5"
)

// TestPostgresRestart_R8 restarts the server (fast shutdown, then a start
// on the same data directory) under running Holds. A restart shorter than
// the TTL minus the safety margin costs nothing: the lease is still held,
// with the same epoch, and renewals carry on. A longer outage ends
// Held.Context with ErrLost before the grant's expiry minus the margin,
// and the next holder gets the next epoch (R2). The test starts a server
// of its own, also when LEASE_POSTGRES_URL is set: it must stop and start
// it.
func TestPostgresRestart_R8(t *testing.T) {
	srv := pgserver.Start(t)
	d, err := Open(ctxBG, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	t.Run("short restart costs nothing", func(t *testing.T) { shortRestart(t, srv, d) })
	t.Run("long outage ends the lease in time", func(t *testing.T) { longOutage(t, srv, d) })
}

func shortRestart(t *testing.T, srv *pgserver.Server, d lease.Driver) {
	const ttl, renew = 20 * time.Second, time.Second // TTL minus margin: over 15s, far above a restart
	s, err := lease.NewDocumentStore(d, lease.WithOwner("holder"), lease.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	h, err := lease.Hold(ctxBG, s, "restart/short", lease.RenewEvery(renew))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctxBG)
	g := h.Grant()
	began := time.Now()
	srv.Stop()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	t.Logf("restart took %v", restarted.Sub(began))
	// Renewals carry on: one made after the restart moves the expiry past
	// restart + TTL, while the context stays open.
	guard := time.After(3 * ttl)
	for !h.Grant().ExpiresAt.After(restarted.Add(ttl)) {
		select {
		case <-h.Context().Done():
			t.Fatalf("a %v restart ended the lease: %v", restarted.Sub(began), context.Cause(h.Context()))
		case <-guard:
			t.Fatalf("no renewal in %v after the restart", 3*ttl)
		case <-time.After(20 * time.Millisecond): // polling for the renewal, not waiting for time to pass
		}
	}
	ctx, cancel := context.WithTimeout(ctxBG, 10*time.Second)
	defer cancel()
	if g2, err := h.Confirm(ctx); err != nil || g2.Epoch != g.Epoch || h.Context().Err() != nil {
		t.Fatalf("after a short restart: Confirm = %+v, %v, context %v; want the lease still held at epoch %d",
			g2, err, context.Cause(h.Context()), g.Epoch)
	}
}

func longOutage(t *testing.T, srv *pgserver.Server, d lease.Driver) {
	const ttl, renew, margin = 3 * time.Second, 500 * time.Millisecond, time.Second
	s, err := lease.NewDocumentStore(d, lease.WithOwner("holder"), lease.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	h, err := lease.Hold(ctxBG, s, "restart/long", lease.RenewEvery(renew), lease.SafetyMargin(margin))
	if err != nil {
		t.Fatal(err)
	}
	g := h.Grant()
	srv.Stop() // nothing renews until the server is back
	stopped := time.Now()
	select {
	case <-h.Context().Done():
	case <-time.After(3 * ttl): // a guard against a Hold that never gives up
		t.Fatalf("Held.Context still open %v after the server stopped", 3*ttl)
	}
	ended, last := time.Now(), h.Grant()
	t.Logf("server down; Held.Context ended %v later, %v before the grant's expiry",
		ended.Sub(stopped), last.ExpiresAt.Sub(ended))
	if cause := context.Cause(h.Context()); !errors.Is(cause, lease.ErrLost) {
		t.Fatalf("Held.Context ended with %v; want ErrLost", cause)
	}
	// Timers fire a little late; half the margin is the slack allowed.
	if !ended.Before(last.ExpiresAt.Add(-margin / 2)) {
		t.Fatalf("Held.Context ended at %v, too late for the deadline %v (expiry %v minus margin %v)",
			ended, last.ExpiresAt.Add(-margin), last.ExpiresAt, margin)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	after := last.ExpiresAt
	next, err := lease.NewDocumentStore(d, lease.WithOwner("next"), lease.WithTTL(ttl), lease.WithClock(func() time.Time { return after }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctxBG, 10*time.Second)
	defer cancel()
	g3, err := next.Acquire(ctx, "restart/long")
	if err != nil || g3.Epoch != g.Epoch+1 || !g3.PreviousUnclean {
		t.Fatalf("takeover after the outage: %+v, %v; want epoch %d, PreviousUnclean", g3, err, g.Epoch+1)
	}
}

// TestPostgresFailover runs stores against a primary and a streaming
// standby, both started by the test, opened with Open from a multi-host URL with
// target_session_attrs=read-write. While the stores acquire and release in
// a loop, the primary is SIGKILLed and the standby promoted.
//
// With synchronous replication (synchronous_standby_names), every grant
// returned before the kill is on the new primary, no epoch repeats or goes
// down, and the stores carry on against the new primary (R2).
//
// With asynchronous replication, the same holds only for what the standby
// received in time. To show the loss deterministically, the standby is cut
// off (a partition on its replication link) before the kill: the grants
// returned after that are gone from the new primary, and the epochs they
// carried are granted a second time. This is why R2 needs synchronous
// replication across a failover (README, docs/postgres.md).
func TestPostgresFailover(t *testing.T) {
	t.Run("synchronous replication keeps every grant", func(t *testing.T) { failover(t, true) })
	t.Run("asynchronous replication loses grants", func(t *testing.T) { failover(t, false) })
}

// failoverKeys are the keys the failover stores cycle through.
var failoverKeys = []string{"failover/0", "failover/1", "failover/2"}

func failover(t *testing.T, synchronous bool) {
	standbys := ""
	if synchronous {
		standbys = "standby1"
	}
	primary := pgserver.Start(t, "synchronous_standby_names="+standbys)
	link := pgproxy.New(t, primary.Addr()) // the standby's replication connection
	standby := pgserver.StartStandby(t, primary, link.Port())
	waitReplication(t, primary, synchronous)
	if synchronous {
		local := strings.Replace(primary.URL(), "sslmode=disable", "sslmode=disable&options=-c%20synchronous_commit%3Dlocal", 1)
		if _, err := Open(ctxBG, local); err == nil || !strings.Contains(err.Error(), "synchronous_standby_names") {
			t.Fatalf("Open with synchronous_commit=local on a primary with a synchronous standby: %v; want a refusal", err)
		}
	}

	url := fmt.Sprintf("postgres://postgres@%s,%s/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2&table=leases",
		primary.Addr(), standby.Addr())
	w := startFailoverWorkers(t, url, 4)
	w.waitGrants(t, 30)
	mark := w.count()
	if !synchronous {
		link.Partition()
		mark = w.count()
		w.waitGrants(t, mark+30)
	}
	primary.Kill()
	// Pause the stores before the promotion, so that the records read from
	// the new primary are what it got from the old one: a store cannot
	// write to the standby until it is promoted, and a release being
	// retried gives up while paused (its grant expires below).
	w.pausing.Store(true)
	w.pause.Lock()
	promote(t, standby)
	records := readFailoverRecords(t, standby)
	grants := w.snapshot()
	var lost []string
	for _, g := range grants {
		if rec, ok := records[g.Key]; !ok || rec.Epoch < g.Epoch {
			lost = append(lost, fmt.Sprintf("%s epoch %d (%s)", g.Key, g.Epoch, g.Owner))
		}
	}
	w.clock.Advance(2 * time.Hour) // every grant left held by the old primary's stores expires
	afterFailover := len(grants)
	w.pausing.Store(false)
	w.pause.Unlock()
	t.Logf("%d grants before the failover (%d after grant %d); on the new primary: %v", len(grants), len(grants)-mark, mark, records)

	w.waitKeysGranted(t, afterFailover)
	w.stop()
	repeats := w.repeatedEpochs()
	t.Logf("grants missing on the new primary: %d %v", len(lost), lost)
	t.Logf("epochs granted twice: %d %v", len(repeats), repeats)
	if synchronous {
		if len(lost) > 0 || len(repeats) > 0 {
			t.Fatalf("synchronous replication lost %v and repeated %v (R2)", lost, repeats)
		}
		w.checkEpochsGrow(t)
		return
	}
	// With the standby cut off, every grant returned after the partition
	// was on the old primary alone.
	if len(lost) == 0 || len(repeats) == 0 {
		t.Fatalf("asynchronous replication with the standby cut off lost %v and repeated %v: "+
			"the failover should have lost the grants made after the partition", lost, repeats)
	}
}

// pgConnect connects to one server directly.
func pgConnect(t *testing.T, s *pgserver.Server) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxBG, 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		t.Fatalf("connecting to %s: %v", s.Addr(), err)
	}
	t.Cleanup(func() { c.Close(ctxBG) })
	return c
}

// waitReplication polls the primary until standby1 streams, in the mode
// the test wants.
func waitReplication(t *testing.T, primary *pgserver.Server, synchronous bool) {
	t.Helper()
	want := "async"
	if synchronous {
		want = "sync"
	}
	c := pgConnect(t, primary)
	testkit.WaitFor(t, "standby1 to stream as "+want, func() bool {
		var state string
		err := c.QueryRow(ctxBG, `SELECT sync_state FROM pg_stat_replication
			WHERE application_name = 'standby1' AND state = 'streaming'`).Scan(&state)
		return err == nil && state == want
	})
}

// promote makes the standby the primary and waits until it is.
func promote(t *testing.T, standby *pgserver.Server) {
	t.Helper()
	var ok bool
	if err := pgConnect(t, standby).QueryRow(ctxBG, `SELECT pg_promote(true, 60)`).Scan(&ok); err != nil || !ok {
		t.Fatalf("promoting the standby: %v, %v", ok, err)
	}
}

// readFailoverRecords reads every failover key's record on s.
func readFailoverRecords(t *testing.T, s *pgserver.Server) map[string]lease.Record {
	t.Helper()
	rows, err := pgConnect(t, s).Query(ctxBG, `SELECT key, owner, epoch::text, released FROM leases`)
	if err != nil {
		t.Fatal(err)
	}
	recs := map[string]lease.Record{}
	for rows.Next() {
		var r lease.Record
		var epoch string
		if err := rows.Scan(&r.Key, &r.Owner, &epoch, &r.Released); err != nil {
			t.Fatal(err)
		}
		r.Epoch, _ = strconv.ParseUint(epoch, 10, 64)
		recs[r.Key] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return recs
}

// failoverWorkers are stores that acquire and release the failover keys
// in a loop and log every grant they are given.
type failoverWorkers struct {
	clock   *testclock.Clock
	pause   sync.RWMutex // a worker holds it for reading around each acquire and release
	pausing atomic.Bool  // set while the test waits for pause: retried releases give up
	done    chan struct{}
	wg      sync.WaitGroup

	mu     sync.Mutex
	grants []lease.Grant // in the order Acquire returned them
	grew   chan struct{}
}

func startFailoverWorkers(t *testing.T, url string, n int) *failoverWorkers {
	w := &failoverWorkers{clock: testclock.New(), done: make(chan struct{}), grew: make(chan struct{}, 1)}
	for i := range n {
		s, err := lease.Open(ctxBG, url, lease.WithOwner(fmt.Sprintf("w%d", i)), lease.WithTTL(time.Hour), lease.WithClock(w.clock.Now))
		if err != nil {
			t.Fatalf("Open(%s): %v", url, err)
		}
		t.Cleanup(func() { s.Close() })
		w.wg.Go(func() { w.run(s, i) })
	}
	t.Cleanup(w.stop)
	return w
}

func (w *failoverWorkers) run(s lease.Store, i int) {
	for n := i; ; n++ {
		select {
		case <-w.done:
			return
		default:
		}
		w.pause.RLock()
		w.cycle(s, failoverKeys[n%len(failoverKeys)])
		w.pause.RUnlock()
	}
}

// cycle acquires key and, if it got it, logs the grant and releases it,
// retrying the release until it is done or lost.
func (w *failoverWorkers) cycle(s lease.Store, key string) {
	ctx, cancel := context.WithTimeout(ctxBG, 10*time.Second)
	defer cancel()
	g, err := s.Acquire(ctx, key)
	if err != nil {
		backOff(5 * time.Millisecond)
		return
	}
	w.mu.Lock()
	w.grants = append(w.grants, g)
	w.mu.Unlock()
	select {
	case w.grew <- struct{}{}:
	default:
	}
	for {
		ctx, cancel := context.WithTimeout(ctxBG, 10*time.Second)
		err := s.Release(ctx, g)
		cancel()
		if err == nil || errors.Is(err, lease.ErrLost) || w.pausing.Load() {
			return
		}
		select {
		case <-w.done:
			return
		default:
			backOff(5 * time.Millisecond)
		}
	}
}

// backOff spaces out retries against a server that is failing over.
func backOff(d time.Duration) { time.Sleep(d) }

func (w *failoverWorkers) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.grants)
}

func (w *failoverWorkers) snapshot() []lease.Grant {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]lease.Grant(nil), w.grants...)
}

// waitGrants waits until n grants have been logged.
func (w *failoverWorkers) waitGrants(t *testing.T, n int) {
	t.Helper()
	patience := testkit.Patient(t) // as long as the test may run: a loaded machine slows the stores down
	for w.count() < n {
		select {
		case <-w.grew:
		case <-patience.Done():
			t.Fatalf("the stores made %d grants; want %d: they did not carry on", w.count(), n)
		}
	}
}

// waitKeysGranted waits until every key was granted again after the
// first `from` grants: the stores carry on against the new primary.
func (w *failoverWorkers) waitKeysGranted(t *testing.T, from int) {
	t.Helper()
	patience := testkit.Patient(t)
	for {
		seen := map[string]int{}
		for _, g := range w.snapshot()[from:] {
			seen[g.Key]++
		}
		if len(seen) == len(failoverKeys) {
			return
		}
		select {
		case <-w.grew:
		case <-patience.Done():
			t.Fatalf("after the failover, only %v of %v were granted again: the stores did not carry on", seen, failoverKeys)
		}
	}
}

func (w *failoverWorkers) stop() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	w.wg.Wait()
}

// repeatedEpochs lists every key and epoch that was granted twice.
func (w *failoverWorkers) repeatedEpochs() []string {
	first := map[string]lease.Grant{}
	var repeats []string
	for _, g := range w.snapshot() {
		id := fmt.Sprintf("%s epoch %d", g.Key, g.Epoch)
		if f, ok := first[id]; ok {
			repeats = append(repeats, fmt.Sprintf("%s to %s and again to %s", id, f.Owner, g.Owner))
			continue
		}
		first[id] = g
	}
	return repeats
}

// checkEpochsGrow checks that each key's grants, in the order they were
// returned by one store, carry growing epochs (R2).
func (w *failoverWorkers) checkEpochsGrow(t *testing.T) {
	t.Helper()
	last := map[string]uint64{}
	for _, g := range w.snapshot() {
		id := g.Owner + " " + g.Key
		if g.Epoch <= last[id] {
			t.Fatalf("%s got epoch %d after %d (R2)", id, g.Epoch, last[id])
		}
		last[id] = g.Epoch
	}
}
