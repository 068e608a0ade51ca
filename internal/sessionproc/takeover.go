//go:build unix && !aix

package sessionproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/childproc"
	"github.com/leasekit/lease/internal/testkit"
)

// DefaultKeys is how many keys the first node holds in KillTakeover
// unless its Backend says otherwise.
const DefaultKeys = 10_000

// TTL is both nodes' TTL in KillTakeover: short, so that the takeover
// comes soon after the kill, and long enough that a look of HoldEach
// (up to 5,000 keys: a batched read, the kill, a batched write; up to 4.5 s
// on SQLite under -race on a loaded 2-core machine) lands its grants
// before their session's deadline, which can be as little as TTL/2 after
// the look began. A look that lands them later gives every one of them
// back, and the next look does the same: with a TTL of 4 s the second
// node took no key in two minutes.
const TTL = 10 * time.Second

// The nodes' owners.
const (
	ownerA = "node-a" // the child, killed
	ownerB = "node-b" // this process, the taker
)

// Key is the i-th key.
func Key(i int) string { return fmt.Sprintf("profile/%05d", i) }

func allKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = Key(i)
	}
	return keys
}

// serveHolder is KillTakeover's first node: it holds keys keys through
// one HoldEach on its own store, journaling each, says "held <n>", then
// answers "count" with "count <live> <lost>" until it is killed (or its
// stdin ends).
func serveHolder(open lease.DriverOpener, url, owner, journalPath string, keys int, ttl time.Duration, in io.Reader, out io.Writer) error {
	ctx := context.Background()
	d, err := open(ctx, url)
	if err != nil {
		return err
	}
	j, err := openJournal(journalPath)
	if err != nil {
		return err
	}
	defer j.Close()
	p := newProbe(d, owner, j, nil)
	s, err := lease.NewDocumentStore(p, lease.WithOwner(owner), lease.WithTTL(ttl))
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprintln(out, "RESULT ready")
	n := newNode(owner, j)
	for r := range lease.HoldEach(ctx, s, allKeys(keys)) {
		if r.Err != nil {
			return fmt.Errorf("HoldEach: %s: %w", r.Key, r.Err)
		}
		n.got(r.Held)
	}
	if err := errors.Join(p.Err(), n.journalErr()); err != nil {
		return fmt.Errorf("the journal: %w", err)
	}
	fmt.Fprintf(out, "RESULT held %d\n", keys)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if sc.Text() != "count" {
			return fmt.Errorf("unknown command %q", sc.Text())
		}
		live, lost := n.counts()
		fmt.Fprintf(out, "RESULT count %d %d\n", live, lost)
	}
	return sc.Err()
}

// KillTakeover: R21, R20, R4f. A node (a child process) holds b.Keys keys
// through HoldEach in one session and says so; this process, a second
// node with its own owner, waits on all of them with HoldEach; the child
// is SIGKILLed. The second node takes every key, each with epoch 2 and
// PreviousUnclean, none before the session's expiry by the store's clock
// (b.Now, read before each take write was sent), after ending the dead
// session with exactly one write of its record, sent before any key was
// written (kill before take); and the journal shows no two live holders
// of any key at any time.
func KillTakeover(t *testing.T, b Backend) {
	keys := b.Keys
	if keys == 0 {
		keys = DefaultKeys
	}
	path := filepath.Join(t.TempDir(), "holders.journal")
	start := time.Now()
	child := startHolder(t, b, path, keys)
	held := time.Now()
	tk := newTaker(t, b, path)
	sid := childSession(t, tk.d, keys)
	collected := holdAll(t, tk.s, tk.n, keys)
	testkit.WaitFor(t, fmt.Sprintf("%s's HoldEach to look at all %d keys", ownerB, keys), func() bool { return tk.p.KeysRead() == keys })
	looked := time.Now()

	child.Send(t, "count")
	if got, want := child.Recv(t), fmt.Sprintf("count %d 0", keys); got != want {
		t.Fatalf("%s before the kill: %s; want %s (a Held lost: its session lapsed?)", ownerA, got, want)
	}
	kill(t, child, tk.j)
	killed := time.Now()
	before, vBefore, err := tk.sd.GetSession(t.Context(), sid)
	if err != nil {
		t.Fatal(err)
	}

	<-collected
	took := time.Now()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%s held %d keys in %v; %s looked at them all in %v; took them all %v after the kill (session %s expiring %v after the kill by the host's clock, %v when read)",
		ownerA, keys, held.Sub(start).Round(time.Millisecond), ownerB, looked.Sub(held).Round(time.Millisecond),
		took.Sub(killed).Round(time.Millisecond), sid, before.ExpiresAt.Sub(killed).Round(time.Millisecond), before.State)

	checkGrants(t, tk.n, keys)
	checkKill(t, tk.sd, tk.p, sid, vBefore)
	if err := tk.p.Err(); err != nil {
		t.Fatalf("%s's journal or clock: %v", ownerB, err)
	}
	t.Logf("%s's round trips: %+v", ownerB, tk.p.Peek())
	if err := tk.n.releaseAll(t.Context(), tk.s); err != nil {
		t.Fatal(err)
	}
	checkTakeoverJournal(t, readJournal(t, path), keys)
}

// startHolder starts the first node on b, journaling to path, and waits
// until it holds keys keys.
func startHolder(t *testing.T, b Backend, path string, keys int) *childproc.Child {
	t.Helper()
	child := childproc.Start(t, ChildTest, ownerA, EnvRole+"="+roleHold, EnvURL+"="+b.URL,
		EnvOwner+"="+ownerA, EnvLog+"="+path, EnvTTL+"="+TTL.String(), EnvKeys+"="+strconv.Itoa(keys))
	if got := child.Recv(t); got != fmt.Sprintf("held %d", keys) {
		t.Fatalf("%s: %s\nstderr: %s", ownerA, got, child.Stderr())
	}
	return child
}

// taker is the second node: its driver, the probe over it, its store and
// its Helds, journaled.
type taker struct {
	d  lease.Driver
	sd lease.SessionDriver
	p  *probe
	s  *lease.DocumentStore
	n  *node
	j  *journal
}

// newTaker opens the second node on b, journaling to path; it closes when
// the test ends.
func newTaker(t *testing.T, b Backend, path string) *taker {
	t.Helper()
	d, err := b.Open(t.Context(), b.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	j, err := openJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	tk := &taker{d: d, sd: d.(lease.SessionDriver), p: newProbe(d, ownerB, j, b.Now), n: newNode(ownerB, j), j: j}
	if tk.s, err = lease.NewDocumentStore(tk.p, lease.WithOwner(ownerB), lease.WithTTL(TTL)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tk.s.Close() })
	return tk
}

// childSession reads every key's record: each names one session, the
// first node's, at epoch 1. It returns the session's id.
func childSession(t *testing.T, d lease.Driver, keys int) string {
	t.Helper()
	results, err := d.(lease.BatchReader).GetMany(t.Context(), allKeys(keys))
	if err != nil {
		t.Fatal(err)
	}
	sid := ""
	for _, r := range results {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if sid == "" {
			sid = r.Rec.Session
		}
		if r.Rec.Owner != ownerA || r.Rec.Epoch != 1 || r.Rec.Released || r.Rec.Session != sid || sid == "" {
			t.Fatalf("%s holds %+v; want every key at epoch 1 in one session", ownerA, r.Rec)
		}
	}
	return sid
}

// holdAll waits on every key with one HoldEach on s, journaling each Held
// that n gets; the channel closes when every key was answered. It fails
// the test on the first few keys that HoldEach gave up on, and stops
// when the test ends (before the store closes).
func holdAll(t *testing.T, s lease.Store, n *node, keys int) <-chan struct{} {
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(testkit.Patient(t))
	var ending atomic.Bool
	t.Cleanup(func() { ending.Store(true); cancel(); <-done })
	go func() {
		defer close(done)
		failed := 0
		for r := range lease.HoldEach(ctx, s, allKeys(keys)) {
			switch {
			case r.Err == nil:
				n.got(r.Held)
			case ending.Load():
			case failed < 5:
				t.Errorf("%s: HoldEach: %s: %v", n.owner, r.Key, r.Err)
				fallthrough
			default:
				failed++
			}
		}
		if failed > 0 && !ending.Load() {
			t.Errorf("%s: HoldEach failed on %d of %d keys", n.owner, failed, keys)
		}
	}()
	return done
}

// kill SIGKILLs the child and journals it once the process is gone.
func kill(t *testing.T, child *childproc.Child, j *journal) {
	t.Helper()
	if err := child.Kill(); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := child.Wait(t); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("%s ended with %v; want killed by SIGKILL\nstderr: %s", child.Name, err, child.Stderr())
	}
	if err := j.write(evKill, child.Name, keyEpoch{noKey, 0}); err != nil {
		t.Fatal(err)
	}
}

// checkGrants: every key went to the second node with epoch 2 and
// PreviousUnclean (R21: a key of a session ended unclean), none lost.
func checkGrants(t *testing.T, n *node, keys int) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.grants) != keys || n.lost != 0 {
		t.Fatalf("%s got %d Helds and lost %d; want %d, none lost", n.owner, len(n.grants), n.lost, keys)
	}
	bad := 0
	for _, g := range n.grants {
		if g.Owner != ownerB || g.Epoch != 2 || !g.PreviousUnclean {
			if bad++; bad <= 5 {
				t.Errorf("took %+v; want %s, epoch 2, PreviousUnclean", g, ownerB)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d grants wrong", bad, keys)
	}
}

// checkKill: R21. The second node ended the dead session with exactly one
// write of its record that landed (ended-unclean, its expiry kept), sent
// no earlier than its expiry by the store's clock, before any key was
// written; nothing else wrote it after the kill; every take write was sent
// no earlier than the expiry either.
func checkKill(t *testing.T, sd lease.SessionDriver, p *probe, sid string, vBefore uint64) {
	t.Helper()
	after, vAfter, err := sd.GetSession(t.Context(), sid)
	if err != nil {
		t.Fatal(err)
	}
	w := p.writesOf(sid)
	t.Logf("%s wrote %s's session record %d times, %d landed; version %d after the kill, %d at the end",
		p.owner, ownerA, w.attempts, w.landed, vBefore, vAfter)
	if w.landed != 1 || w.last.State != lease.SessionEndedUnclean {
		t.Fatalf("%s's writes of the dead session that landed: %d, the last %+v; want one kill (ended-unclean)", p.owner, w.landed, w.last)
	}
	if after.State != lease.SessionEndedUnclean || vAfter != w.version || after.Owner != ownerA {
		t.Fatalf("the dead session ends as %+v at version %d; want %s's, ended-unclean, at the kill's version %d", after, vAfter, ownerA, w.version)
	}
	if !w.last.ExpiresAt.Equal(after.ExpiresAt) {
		t.Errorf("the kill wrote expiry %v; the session's was %v", w.last.ExpiresAt, after.ExpiresAt)
	}
	if w.killAt.Before(after.ExpiresAt) {
		t.Errorf("the kill was sent at %v by the store's clock, %v before the session's expiry %v",
			w.killAt, after.ExpiresAt.Sub(w.killAt), after.ExpiresAt)
	}
	firstTake, takeMono := p.takeStart()
	if firstTake.Before(after.ExpiresAt) {
		t.Errorf("the first take write was sent at %v by the store's clock, %v before the session's expiry %v",
			firstTake, after.ExpiresAt.Sub(firstTake), after.ExpiresAt)
	}
	if takeMono < w.killMono {
		t.Errorf("a take write was sent %v before the kill was (kill before take, R21)", time.Duration(w.killMono-takeMono))
	}
	t.Logf("the kill was sent %v after the session's expiry, the first take write %v after it, by the store's clock",
		w.killAt.Sub(after.ExpiresAt).Round(time.Microsecond), firstTake.Sub(after.ExpiresAt).Round(time.Microsecond))
}

// checkTakeoverJournal: every key has two holdings in the journal, the
// first node's at epoch 1 ended by its kill and the second's at epoch 2
// ended by its ReleaseAll, and they never overlap.
func checkTakeoverJournal(t *testing.T, es []event, keys int) {
	t.Helper()
	hs := holdings(t, es)
	if len(hs) != keys {
		t.Fatalf("the journal has %d keys; want %d", len(hs), keys)
	}
	bad := 0
	for key, h := range hs {
		if len(h) != 2 || h[0].owner != ownerA || h[0].epoch != 1 || h[0].endedBy != evKill ||
			h[1].owner != ownerB || h[1].epoch != 2 || h[1].endedBy != evEnd {
			if bad++; bad <= 5 {
				t.Errorf("%s: holdings %s; want %s's at epoch 1 to its kill, then %s's at epoch 2 to its release",
					key, describe(h), ownerA, ownerB)
			}
			continue
		}
		if err := overlap(key, h); err != nil {
			if bad++; bad <= 5 {
				t.Error(err)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d keys wrong in the journal", bad, keys)
	}
}

func describe(hs []*holding) string {
	s := ""
	for _, h := range hs {
		s += fmt.Sprintf("[%s epoch %d %d..%d %s] ", h.owner, h.epoch, h.take, h.end, h.endedBy)
	}
	return s
}
