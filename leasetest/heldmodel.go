package leasetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasekit/lease"
	"pgregory.net/rapid"
)

// HeldTTL is the TTL of the document stores TestHeldModel builds: Hold
// renews every 2s and ends a Held 1s before its grant expires.
const HeldTTL = 6 * time.Second

// TestHeldModel checks the Held layer (Hold, Held, Confirm, ReleaseAll,
// Close; R12, R15-R17) with pgregory.net/rapid, over 2-3 document stores
// on one driver, inside a testing/synctest bubble so that TTLs, renewals
// and deadlines run on virtual time. Each run calls open once, inside its
// bubble, for a fresh and empty driver (dir is a new directory of the
// run's own, for a driver that keeps files); the run closes it. Over a
// driver that states Sessions, the stores keep their Helds through
// sessions (R18–R23): renewed once per period, ended clean by ReleaseAll,
// killed by another store after a Close, lapsed when their writes fail.
//
// The stores share the driver through a wrapper that makes chosen writes
// land late, report an unknown outcome, or hang until their context ends,
// and makes a batch fail; and, over sessions, makes every session write
// fail, answer late, hang, or one land late or report an unknown outcome
// (its re-read failing too, or not). Steps: Hold (waiting, FailIfHeld,
// with a deadline, or cancelled later; a second Hold of a key in one
// store included), Held.Release, Confirm, ReleaseAll, Close and reopen,
// a store closing while others wait for its keys (a takeover), clock
// steps (and a quiet hour past the sessions' retention, so that old
// sessions are swept), and those faults. It checks, when a Hold returns, that no other
// Held of its key in its store is live and that its epoch is new (R16);
// when a write would free a key (a release, a takeover, or the end of its
// session), that no Held of the grant it gives up is live (R17); that a
// key of a session is taken only once its session ended (R21), and that
// a session is renewed only by a write sent before its expiry and never
// written live once ended (R19); and, whenever the bubble is idle: at
// most one live Held per key, in an open store, whose grant is the key's
// live record (a key attached to a session is live only while its session
// is live and unexpired, and one naming a missing session fails the
// run, R20, R22); no live record of an open store that no Held of it has
// (an orphan); and no Held ended that nothing ended (R12).
//
// checks is the number of runs; 0 uses rapid's -rapid.checks flag (100 by
// default). A positive checks sets that flag while the test runs.
func TestHeldModel(t *testing.T, open func(dir string) (lease.Driver, error), checks int) {
	runHeldModel(t, checks, func(rt *rapid.T, m *heldModel, dir string) heldBackend {
		d, err := open(dir)
		if err != nil {
			rt.Fatalf("opening the driver: %v", err)
		}
		latency := rapid.SampledFrom([]time.Duration{0, time.Millisecond, 20 * time.Millisecond}).Draw(rt, "latency")
		f := newHeldFaults(d, m, latency)
		return &docBackend{raw: d, faults: f, drv: f.driver()}
	})
}

// TestHeldModelStores is TestHeldModel for stores without a Driver (the
// local store): open opens one more store instance, owned by owner, on the
// run's backend in dir. It has no storage faults. The stores must judge
// expiry by time.Now (the bubble's clock) and must not wait for the
// operating system to tell of releases (the local store's inotify watch):
// a goroutine blocked on I/O stops a synctest bubble's clock.
func TestHeldModelStores(t *testing.T, open func(dir, owner string) (lease.Store, error), checks int) {
	runHeldModel(t, checks, func(rt *rapid.T, m *heldModel, dir string) heldBackend {
		obs, err := open(dir, "held-model-observer")
		if err != nil {
			rt.Fatalf("opening the observer store: %v", err)
		}
		return &storeBackend{dir: dir, openFn: open, observer: obs}
	})
}

type backendMaker func(rt *rapid.T, m *heldModel, dir string) heldBackend

func runHeldModel(t *testing.T, checks int, backend backendMaker) {
	if checks > 0 {
		defer setRapidChecks(t, checks)()
	}
	root := t.TempDir()
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			dir, err := os.MkdirTemp(root, "run")
			if err != nil {
				rt.Fatal(err)
			}
			defer os.RemoveAll(dir)
			m := newHeldModel(rt)
			m.b = backend(rt, m, dir)
			defer m.end()
			m.run()
		})
	})
}

// heldBackend is one run's storage.
type heldBackend interface {
	open(owner string) (lease.Store, error)
	live(key string) (lease.Record, bool, error) // the key's live record now
	faulty() *heldFaults                         // nil: no faults
	close()
}

type docBackend struct {
	raw    lease.Driver
	faults *heldFaults
	drv    lease.Driver // what the stores use: faults, with sessions if raw has them
}

func (b *docBackend) open(owner string) (lease.Store, error) {
	return lease.NewDocumentStore(b.drv, lease.WithOwner(owner), lease.WithTTL(HeldTTL))
}

// live reads key's record as it stands, with its session's expiry for a
// key attached to one: live while not released and its session is live
// and unexpired (R20). A key naming a session that is missing or
// unreadable is an error (R22, R23: no removal may strand a key).
func (b *docBackend) live(key string) (lease.Record, bool, error) {
	ctx := context.Background()
	rec, _, err := b.raw.Get(ctx, key)
	if errors.Is(err, lease.ErrNotFound) {
		return lease.Record{}, false, nil
	}
	if err != nil || rec.Released || rec.Session == "" {
		return rec, err == nil && !rec.Released && time.Now().Before(rec.ExpiresAt), err
	}
	sd, ok := b.raw.(lease.SessionDriver)
	if !ok {
		return rec, false, fmt.Errorf("the record names session %s, and the driver has no sessions", rec.Session)
	}
	sess, _, err := sd.GetSession(ctx, rec.Session)
	if err != nil {
		return rec, false, fmt.Errorf("session %s, which the record of owner %s epoch %d names: %w", rec.Session, rec.Owner, rec.Epoch, err)
	}
	rec.ExpiresAt = sess.ExpiresAt
	return rec, sess.State == lease.SessionLive && time.Now().Before(sess.ExpiresAt), nil
}

func (b *docBackend) faulty() *heldFaults { return b.faults }
func (b *docBackend) close()              { b.raw.Close() }

type storeBackend struct {
	dir      string
	openFn   func(dir, owner string) (lease.Store, error)
	observer lease.Store
}

func (b *storeBackend) open(owner string) (lease.Store, error) { return b.openFn(b.dir, owner) }

func (b *storeBackend) live(key string) (lease.Record, bool, error) {
	rec, err := b.observer.Holder(context.Background(), key)
	if errors.Is(err, lease.ErrNotFound) {
		return lease.Record{}, false, nil
	}
	return rec, err == nil, err
}

func (b *storeBackend) faulty() *heldFaults { return nil }
func (b *storeBackend) close()              { b.observer.Close() }

// heldStore is one store instance; a slot's instance is replaced when it
// is reopened.
type heldStore struct {
	name   string // "s1#2": slot 1, its second instance
	owner  string
	store  lease.Store
	closed bool
	// releaseAlls counts the ReleaseAll calls begun on it: one that runs
	// while a Hold is answered may end the Held before Hold returns it.
	releaseAlls int
}

// heldEntry is one Held a Hold returned.
type heldEntry struct {
	h      *lease.Held
	st     *heldStore
	key    string
	epoch  uint64
	ended  bool // the model ended it: Release, ReleaseAll, Close, or Confirm said it was lost
	faults int  // the key's fault count when the Held began
	// sessFaults is the store owner's count of session write faults
	// when the Held began: one may end every Held of the session (R19).
	sessFaults int
}

func (e *heldEntry) live() bool { return e.h.Context().Err() == nil }

func (e *heldEntry) String() string {
	return fmt.Sprintf("%s (owner %s) epoch %d", e.st.name, e.st.owner, e.epoch)
}

// holdCall is one Hold in flight or done.
type holdCall struct {
	faults     int // the key's fault count when the Hold began
	sessFaults int // and the owner's count of session write faults
	releaseAll int // and its store's count of ReleaseAll calls begun
	st         *heldStore
	key        string
	mode       string
	cancel     context.CancelFunc
	done       bool
}

// grantID names one grant.
type grantID struct {
	key, owner string
	epoch      uint64
}

type heldModel struct {
	t      *rapid.T
	b      heldBackend
	ctx    context.Context // every Hold's; ends with the run
	cancel context.CancelFunc
	keys   []string
	slots  [][]*heldStore // each slot's instances, the last one current
	owners int

	mu         sync.Mutex // guards the fields below: Hold goroutines and the driver use them
	entries    []*heldEntry
	calls      []*holdCall
	topGrant   map[string]grantID      // per key: the newest grant a Hold returned
	faults     map[string]int          // per key: how many faults touched its writes
	sessFaults map[string]int          // per owner: how many faults touched its sessions' writes
	ambiguous  map[grantID]bool        // grants a write of unknown outcome may have left held
	handoffs   map[string]*handoffMark // per key: the last Handoff of it (R25)
	violations []string
	events     []string // what happened, for a failure's message
	start      time.Time
}

func newHeldModel(rt *rapid.T) *heldModel {
	m := &heldModel{t: rt, keys: []string{"held/a", "held/b", "held/c"},
		topGrant: map[string]grantID{}, faults: map[string]int{}, sessFaults: map[string]int{}, ambiguous: map[grantID]bool{}, handoffs: map[string]*handoffMark{}, start: time.Now()}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m
}

func (m *heldModel) violate(format string, args ...any) {
	m.violations = append(m.violations, fmt.Sprintf(format, args...))
}

// note records an event for a failure's message; m.mu must be held.
func (m *heldModel) note(format string, args ...any) {
	m.events = append(m.events, fmt.Sprintf("%9v  ", time.Since(m.start))+fmt.Sprintf(format, args...))
}

// log records an event for a failure's message.
func (m *heldModel) log(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.note(format, args...)
}

func (m *heldModel) run() {
	for i := range rapid.IntRange(2, 3).Draw(m.t, "stores") {
		m.slots = append(m.slots, []*heldStore{m.openStore(i, 1, m.newOwner())})
		m.log("open %s (owner %s)", m.slots[i][0].name, m.slots[i][0].owner)
	}
	steps := map[string]func(*rapid.T){
		"hold":        m.hold,
		"release":     m.release,
		"confirm":     m.confirm,
		"release all": m.releaseAll,
		"close":       m.close,
		"take over":   m.takeOver,
		"reopen":      m.reopen,
		"leave":       m.leave,
		"advance":     m.advance,
		"quiet hour":  m.quietHour,
		"hand off":    m.handOff,
		"":            m.check,
	}
	if m.b.faulty() != nil {
		steps["fault"] = m.fault
		steps["heal"] = m.heal
		steps["fail batch"] = m.failBatch
		if m.b.faulty().sessions() {
			steps["session fault"] = m.sessionFault
			steps["heal sessions"] = m.healSessions
		}
	}
	m.t.Repeat(steps)
}

// end heals the storage, ends the waits, and closes every store and the
// backend, inside the bubble.
func (m *heldModel) end() {
	if f := m.b.faulty(); f != nil {
		f.heal()
	}
	m.cancel()
	for _, slot := range m.slots {
		for _, st := range slot {
			st.store.Close()
		}
	}
	// The bubble's clock stops when its main goroutine returns: give the
	// calls still on their way (a look's timeout, a late answer) the time
	// they need to end.
	time.Sleep(time.Minute)
	synctest.Wait()
	m.b.close()
}

func (m *heldModel) newOwner() string {
	m.owners++
	return fmt.Sprintf("held-owner-%d", m.owners)
}

func (m *heldModel) openStore(slot, gen int, owner string) *heldStore {
	s, err := m.b.open(owner)
	if err != nil {
		m.t.Fatalf("opening a store for %s: %v", owner, err)
	}
	return &heldStore{name: fmt.Sprintf("s%d#%d", slot, gen), owner: owner, store: s}
}

// openSlot draws a slot whose store is open.
func (m *heldModel) openSlot(t *rapid.T) *heldStore {
	var open []*heldStore
	for _, slot := range m.slots {
		if st := slot[len(slot)-1]; !st.closed {
			open = append(open, st)
		}
	}
	if len(open) == 0 {
		t.Skip("no open store")
	}
	return open[rapid.IntRange(0, len(open)-1).Draw(t, "open store")]
}

func (m *heldModel) hold(t *rapid.T) {
	st := m.openSlot(t)
	key := rapid.SampledFrom(m.keys).Draw(t, "key")
	mode := rapid.SampledFrom([]string{"wait", "fail if held", "deadline", "cancellable"}).Draw(t, "mode")
	ctx, cancel := m.ctx, context.CancelFunc(func() {})
	var opts []lease.HoldOption
	switch mode {
	case "fail if held":
		opts = append(opts, lease.FailIfHeld())
	case "deadline":
		d := rapid.SampledFrom([]time.Duration{10 * time.Millisecond, 500 * time.Millisecond, 3 * time.Second, 8 * time.Second}).Draw(t, "deadline")
		ctx, cancel = context.WithTimeout(m.ctx, d)
	case "cancellable":
		ctx, cancel = context.WithCancel(m.ctx)
	}
	m.startHold(st, key, mode, ctx, cancel, opts...)
}

// startHold starts a Hold of key by st in mode, and waits until it
// waits or is answered.
func (m *heldModel) startHold(st *heldStore, key, mode string, ctx context.Context, cancel context.CancelFunc, opts ...lease.HoldOption) {
	c := &holdCall{st: st, key: key, mode: mode, cancel: cancel}
	m.mu.Lock()
	c.faults, c.sessFaults, c.releaseAll = m.faults[key], m.sessFaults[st.owner], st.releaseAlls

	m.calls = append(m.calls, c)
	m.note("Hold(%s) by %s (%s) begins", key, st.name, mode)
	m.mu.Unlock()
	go func() {
		h, err := lease.Hold(ctx, st.store, key, opts...)
		m.held(c, h, err)
	}()
	// Let it run until it waits or is answered, for runs that replay the
	// same; with storage latency it is still on its way for the next step.
	synctest.Wait()
}

// held takes a Hold's answer and checks R16 at once: no other live Held of
// its key in its store, and an epoch above every earlier Held's.
func (m *heldModel) held(c *holdCall, h *lease.Held, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c.done = true
	if err != nil {
		m.note("Hold(%s) by %s (%s) failed: %v", c.key, c.st.name, c.mode, err)
		return
	}
	g := h.Grant()
	m.note("Hold(%s) by %s (%s) got epoch %d", c.key, c.st.name, c.mode, g.Epoch)
	// A Hold that returns after its store closed returns a Held that Close
	// ended (R15), or one the checks find live.
	// A fault on the key's writes while the Hold acquired it (a late
	// acquire) may leave its Held short of time: it excuses a loss too.
	e := &heldEntry{h: h, st: c.st, key: c.key, epoch: g.Epoch, faults: c.faults, sessFaults: c.sessFaults, ended: c.st.closed}
	if g.Key != c.key || g.Owner != c.st.owner {
		m.violate("Hold(%s) by %s returned a grant of %q owned by %s", c.key, c.st.name, g.Key, g.Owner)
	}
	for _, o := range m.entries {
		if o.key == c.key && o.st == c.st && o.live() && e.live() {
			m.violate("R16: key %s: Hold (%s) by %s returned epoch %d while the store's Held %v is live",
				c.key, c.mode, c.st.name, g.Epoch, o)
		}
	}
	// A ReleaseAll of the store that ran while the Hold waited may have
	// ended its Held already (R22: it waits for the acquires writing keys
	// into the session it ends, and ends their Helds too); then a later
	// Hold may have taken the key again and returned first.
	if c.st.releaseAlls != c.releaseAll && !e.live() {
		e.ended = true
	}
	// Epochs only grow. The same epoch again is the same grant, which only
	// its own owner may take up again, once its Helds ended (R4c, R16).
	// A Held that has ended by the time its Hold returns holds nothing:
	// whether it should have ended is R12's check.
	if top := m.topGrant[c.key]; e.live() && (g.Epoch < top.epoch || (g.Epoch == top.epoch && g.Owner != top.owner)) {
		m.violate("R2: key %s: Hold (%s) by %s returned owner %s epoch %d after a Held of owner %s epoch %d",
			c.key, c.mode, c.st.name, g.Owner, g.Epoch, top.owner, top.epoch)
	}
	if h := m.handoffs[c.key]; h != nil && h.done && g.Epoch == h.epoch+1 && g.PreviousUnclean {
		m.violate("R25: key %s: Hold by %s got epoch %d PreviousUnclean after a Handoff released epoch %d", c.key, c.st.name, g.Epoch, h.epoch)
	}
	if g.Epoch >= m.topGrant[c.key].epoch {
		m.topGrant[c.key] = grantID{c.key, g.Owner, g.Epoch}
	}
	m.entries = append(m.entries, e)
}

// pickEntry draws a Held, live ones first.
func (m *heldModel) pickEntry(t *rapid.T) *heldEntry {
	m.mu.Lock()
	var live, all []*heldEntry
	for _, e := range m.entries {
		all = append(all, e)
		if e.live() {
			live = append(live, e)
		}
	}
	m.mu.Unlock()
	if len(live) > 0 && rapid.Bool().Draw(t, "a live one") {
		all = live
	}
	if len(all) == 0 {
		t.Skip("no Held")
	}
	return all[rapid.IntRange(0, len(all)-1).Draw(t, "held")]
}

// opCtx bounds a call the model makes itself, so that a hanging write
// ends it.
func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 3*time.Second)
}

func (m *heldModel) release(t *rapid.T) {
	e := m.pickEntry(t)
	m.endByModel(func(o *heldEntry) bool { return o == e })
	ctx, cancel := opCtx()
	defer cancel()
	err := e.h.Release(ctx)
	m.log("Release of %s's Held of %s epoch %d: %v", e.st.name, e.key, e.epoch, err)
	if e.live() {
		m.record("R17: key %s: Held.Release of %v returned (%v) with the Held still live", e.key, e, err)
	}
}

func (m *heldModel) confirm(t *rapid.T) {
	e := m.pickEntry(t)
	ctx, cancel := opCtx()
	defer cancel()
	g, err := e.h.Confirm(ctx)
	m.log("Confirm of %s's Held of %s epoch %d: %v", e.st.name, e.key, e.epoch, err)
	switch {
	case err == nil && (g.Epoch != e.epoch || g.Owner != e.st.owner):
		m.record("key %s: Confirm of %v answered owner %s epoch %d", e.key, e, g.Owner, g.Epoch)
	case errors.Is(err, lease.ErrLost):
		m.endByModel(func(o *heldEntry) bool { return o == e })
	}
}

func (m *heldModel) releaseAll(t *rapid.T) {
	st := m.openSlot(t)
	m.endByModel(func(o *heldEntry) bool { return o.st == st })
	ctx, cancel := opCtx()
	defer cancel()
	m.mu.Lock()
	before := len(m.entries) // a Hold that returns while ReleaseAll runs may keep its key
	st.releaseAlls++
	m.mu.Unlock()
	err := st.store.ReleaseAll(ctx)
	m.log("ReleaseAll of %s: %v", st.name, err)
	if err == nil {
		m.wantEnded(st, "ReleaseAll", before)
	}
	// A Hold answered while ReleaseAll ran may have been ended by it: over
	// sessions, ReleaseAll waits for the acquires writing keys into the
	// session it ends, and ends their Helds too (R22).
	m.mu.Lock()
	for _, e := range m.entries[before:] {
		if e.st == st && !e.live() {
			e.ended = true
		}
	}
	m.mu.Unlock()
}

func (m *heldModel) close(t *rapid.T) {
	m.closeStore(m.openSlot(t))
}

func (m *heldModel) closeStore(st *heldStore) {
	m.endByModel(func(o *heldEntry) bool { return o.st == st })
	st.closed = true
	err := st.store.Close()
	m.log("Close of %s: %v", st.name, err)
	m.wantEnded(st, "Close", -1)
}

// takeOver closes a store whose Helds hold keys, as a crash would (R15:
// it leaves its session to expire), has another open store wait for each
// of those keys, and lets the session expire: the first taker to find it
// expired ends it (R21, "kill before take"), and every key goes on with
// PreviousUnclean.
func (m *heldModel) takeOver(t *rapid.T) {
	m.mu.Lock()
	held := map[*heldStore][]string{}
	var holders []*heldStore
	for _, e := range m.entries {
		if e.live() && !e.st.closed && !slices.Contains(held[e.st], e.key) {
			if held[e.st] == nil {
				holders = append(holders, e.st)
			}
			held[e.st] = append(held[e.st], e.key)
		}
	}
	m.mu.Unlock()
	if len(holders) == 0 {
		t.Skip("no store holds a key")
	}
	st := holders[rapid.IntRange(0, len(holders)-1).Draw(t, "crashing store")]
	var takers []*heldStore
	for _, slot := range m.slots {
		if cur := slot[len(slot)-1]; !cur.closed && cur != st {
			takers = append(takers, cur)
		}
	}
	if len(takers) == 0 {
		t.Skip("no other open store")
	}
	taker := takers[rapid.IntRange(0, len(takers)-1).Draw(t, "taker")]
	m.log("%s crashes; %s waits for %v", st.name, taker.name, held[st])
	m.closeStore(st)
	for _, key := range held[st] {
		m.startHold(taker, key, "wait", m.ctx, func() {})
	}
	time.Sleep(HeldTTL + time.Second)
}

func (m *heldModel) reopen(t *rapid.T) {
	var closed []int
	for i, slot := range m.slots {
		if slot[len(slot)-1].closed {
			closed = append(closed, i)
		}
	}
	if len(closed) == 0 {
		t.Skip("no closed store")
	}
	i := rapid.SampledFrom(closed).Draw(t, "slot")
	owner := m.slots[i][len(m.slots[i])-1].owner
	if !rapid.Bool().Draw(t, "same owner") {
		owner = m.newOwner()
	}
	m.slots[i] = append(m.slots[i], m.openStore(i, len(m.slots[i])+1, owner))
	m.log("reopen slot %d as %s (owner %s)", i, m.slots[i][len(m.slots[i])-1].name, owner)
}

// leave ends the context of a Hold that may still wait.
func (m *heldModel) leave(t *rapid.T) {
	m.mu.Lock()
	var waiting []*holdCall
	for _, c := range m.calls {
		if !c.done && c.mode == "cancellable" {
			waiting = append(waiting, c)
		}
	}
	m.mu.Unlock()
	if len(waiting) == 0 {
		t.Skip("no waiting Hold to cancel")
	}
	c := waiting[rapid.IntRange(0, len(waiting)-1).Draw(t, "waiter")]
	m.log("the Hold(%s) by %s leaves", c.key, c.st.name)
	c.cancel()
}

func (m *heldModel) advance(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{time.Millisecond, 100 * time.Millisecond, 999 * time.Millisecond,
		2 * time.Second, 5 * time.Second, HeldTTL + time.Second, 30 * time.Second}).Draw(t, "advance")
	m.log("advance %v", d)
	time.Sleep(d)
}

// quietHour lets more than an hour pass while no Held is live and no
// Hold is on its way (else each renewal of an hour is a write): past the
// sessions' retention, the next session's start sweeps the old ones that
// no key names any more (R22), and a key naming a session that is gone
// fails the next check.
func (m *heldModel) quietHour(t *rapid.T) {
	m.mu.Lock()
	busy := slices.ContainsFunc(m.entries, (*heldEntry).live) || slices.ContainsFunc(m.calls, func(c *holdCall) bool { return !c.done })
	m.mu.Unlock()
	if busy {
		t.Skip("a Held is live or a Hold is on its way")
	}
	m.log("an hour passes")
	time.Sleep(time.Hour + HeldTTL)
}

func (m *heldModel) fault(t *rapid.T) {
	f := m.b.faulty()
	key := rapid.SampledFrom(m.keys).Draw(t, "key")
	kind := rapid.SampledFrom([]string{"late", "unknown", "hang"}).Draw(t, "fault")
	m.log("fault: writes of %s: %s", key, kind)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch kind {
	case "late":
		f.late[key] = rapid.SampledFrom([]time.Duration{100 * time.Millisecond, time.Second, 4 * time.Second}).Draw(t, "delay")
	case "unknown":
		f.unknown[key] = true
	case "hang":
		f.hang[key] = true
	}
}

func (m *heldModel) heal(t *rapid.T) {
	f := m.b.faulty()
	key := rapid.SampledFrom(m.keys).Draw(t, "key")
	m.log("heal: writes of %s", key)
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.late, key)
	delete(f.hang, key)
}

// sessionFault arms a fault of every store's session writes (R19, R9):
// renewals failing past the deadline make sessions lapse; an unknown
// outcome, with its re-read failing or not, must be settled.
func (m *heldModel) sessionFault(t *rapid.T) {
	f := m.b.faulty()
	kind := rapid.SampledFrom([]string{"fail", "unknown", "unknown, re-read fails", "late", "slow", "hang"}).Draw(t, "session fault")
	m.log("fault: session writes: %s", kind)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch kind {
	case "fail":
		f.sess.fail = true
	case "unknown":
		f.sess.unknown = true
	case "unknown, re-read fails":
		f.sess.unknown, f.sess.reread = true, true
	case "late":
		f.sess.late = rapid.SampledFrom([]time.Duration{100 * time.Millisecond, time.Second, 4 * time.Second}).Draw(t, "delay")
	case "slow": // a renewal on the wire past its Helds' deadline races a taker's kill (R21)
		f.sess.slow = rapid.SampledFrom([]time.Duration{100 * time.Millisecond, 2 * time.Second, 5 * time.Second}).Draw(t, "delay")
	case "hang":
		f.sess.hang = true
	}
}

func (m *heldModel) healSessions(*rapid.T) {
	f := m.b.faulty()
	m.log("heal: session writes")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sess = sessionFaults{}
}

func (m *heldModel) failBatch(t *rapid.T) {
	f := m.b.faulty()
	all := rapid.Bool().Draw(t, "applied")
	m.log("fault: the next batch fails (its writes applied: %v)", all)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failBatch, f.batchAll = true, all
}

// endByModel marks the Helds that the model's next call ends.
func (m *heldModel) endByModel(which func(*heldEntry) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entries {
		if which(e) {
			e.ended = true
		}
	}
}

// wantEnded checks that every Held of st ended when call returned (R15, R17).
// wantEnded checks that call ended st's Helds: the first n entries, or
// all of them for n < 0.
func (m *heldModel) wantEnded(st *heldStore, call string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n < 0 {
		n = len(m.entries)
	}
	for _, e := range m.entries[:n] {
		if e.st == st && e.live() {
			m.violate("R17: key %s: %s of %s returned with its Held %v live", e.key, call, st.name, e)
		}
	}
}

func (m *heldModel) record(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.violate(format, args...)
}

// faulted notes that a fault touched writes ws: their keys' Helds may lose
// for it; with ambiguous, the grants they write may stay held by nobody.
func (m *heldModel) faulted(ws []lease.Write, ambiguous bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range ws {
		m.faults[w.Rec.Key]++
		if ambiguous {
			m.ambiguous[grantID{w.Rec.Key, w.Rec.Owner, w.Rec.Epoch}] = true
		}
	}
}

// sessionFaulted notes that a fault touched a write of a session of
// owner: every Held of it may lose for it.
func (m *heldModel) sessionFaulted(owner string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sessFaults[owner]++
}

// givingUpSession checks R17 as a write is about to end the session that
// key record cur is attached to (next: ended clean by ReleaseAll, or
// unclean by a taker, R21, R22).
func (m *heldModel) givingUpSession(cur lease.Record, next lease.SessionRecord) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entries {
		if e.key == cur.Key && e.st.owner == cur.Owner && e.epoch == cur.Epoch && e.live() {
			m.violate("R17: key %s: session %s was %v while %v was live", cur.Key, next.ID, next.State, e)
		}
	}
}

// givingUp checks R17 as a write is about to free cur's grant for next.
func (m *heldModel) givingUp(cur, next lease.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entries {
		if e.key == cur.Key && e.st.owner == cur.Owner && e.epoch == cur.Epoch && e.live() {
			how := "a release"
			if !next.Released {
				how = fmt.Sprintf("a takeover by %s at epoch %d", next.Owner, next.Epoch)
			}
			m.violate("R17: key %s: %s landed while %v was live", cur.Key, how, e)
		}
	}
}

// check waits until the bubble is idle, then checks every key.
func (m *heldModel) check(t *rapid.T) {
	synctest.Wait()
	for _, key := range m.keys {
		m.checkKey(key)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.violations) > 0 {
		t.Fatalf("at %v:\n%s\nevents:\n%s", time.Since(m.start), strings.Join(m.violations, "\n"), strings.Join(m.events, "\n"))
	}
}

func (m *heldModel) checkKey(key string) {
	rec, recLive, err := m.b.live(key)
	if err != nil {
		m.record("reading %s: %v", key, err)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var live []*heldEntry
	for _, e := range m.entries {
		if e.key != key {
			continue
		}
		if e.live() {
			live = append(live, e)
		} else if !e.ended && m.faults[key] == e.faults && m.sessFaults[e.st.owner] == e.sessFaults {
			m.violate("R12: key %s: %v ended though nothing ended it and its storage never failed: %v",
				key, e, context.Cause(e.h.Context()))
			e.ended = true // once
		}
	}
	if len(live) > 1 {
		m.violate("key %s: %d live Helds: %s", key, len(live), entryList(live))
	}
	for _, e := range live {
		switch {
		case e.st.closed:
			m.violate("R15: key %s: %v is live after its store closed", key, e)
		case !recLive:
			m.violate("key %s: %v is live but storage holds %s", key, e, m.describe(rec))
		case rec.Owner != e.st.owner || rec.Epoch != e.epoch:
			m.violate("key %s: %v is live but storage holds %s", key, e, m.describe(rec))
		}
	}
	m.checkOrphan(key, rec, recLive)
}

// checkOrphan: a live record of an open store has a live Held of that
// store, unless a write of unknown outcome or a Held's end explains it.
func (m *heldModel) checkOrphan(key string, rec lease.Record, recLive bool) {
	if !recLive || m.ambiguous[grantID{key, rec.Owner, rec.Epoch}] {
		return
	}
	if f := m.b.faulty(); f != nil && f.busy(key) {
		return // a write of key is on its way
	}
	var st *heldStore
	for _, slot := range m.slots {
		for _, cur := range slot {
			if cur.owner == rec.Owner && cur.closed {
				return // an instance that closed may have left it (R15)
			}
		}
		if cur := slot[len(slot)-1]; !cur.closed && cur.owner == rec.Owner {
			st = cur
		}
	}
	if st == nil {
		return
	}
	for _, e := range m.entries {
		if e.key == key && e.st.owner == rec.Owner && e.epoch == rec.Epoch {
			return // a Held had it: its end is judged above
		}
	}
	for _, c := range m.calls {
		if !c.done && c.key == key && c.st == st {
			return // a Hold of key by st is on its way: its look may have taken the key already
		}
	}
	m.violate("orphan: key %s is held in storage by %s epoch %d, and no Held of it exists", key, st.name, rec.Epoch)
}

func entryList(es []*heldEntry) string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.String()
	}
	slices.Sort(s)
	return strings.Join(s, "; ")
}

func (m *heldModel) describe(rec lease.Record) string {
	if rec.Owner == "" {
		return "no live record"
	}
	state := fmt.Sprintf("expires at %v", rec.ExpiresAt.Sub(m.start))
	if rec.Session != "" {
		state = fmt.Sprintf("session %.8s, which expires at %v", rec.Session, rec.ExpiresAt.Sub(m.start))
	}
	if rec.Released {
		state = "released"
	}
	return fmt.Sprintf("owner %s epoch %d (%s)", rec.Owner, rec.Epoch, state)
}

// handoffMark is a Handoff of a key's grant at epoch to owner to: until
// its bound, no other owner may take the key's next grant (R25). A take
// seen while the Handoff runs is a suspect until it returns nil.
type handoffMark struct {
	to       string
	epoch    uint64
	until    time.Time
	done     bool     // Handoff returned nil: the place stood
	suspects []string // takes by others seen while it ran
}

// handOff hands a Held's key to another open store's owner, or to an
// owner that never comes, and has the named store wait for the key.
func (m *heldModel) handOff(t *rapid.T) {
	e := m.pickEntry(t)
	var to *heldStore
	for _, slot := range m.slots {
		if cur := slot[len(slot)-1]; !cur.closed && cur != e.st && rapid.Bool().Draw(t, "to "+cur.name) {
			to = cur
			break
		}
	}
	owner := "nobody-comes"
	if to != nil {
		owner = to.owner
	}
	mark := &handoffMark{to: owner, epoch: e.epoch, until: time.Now().Add(HeldTTL - 10*time.Millisecond)}
	m.mu.Lock()
	m.handoffs[e.key] = mark
	m.mu.Unlock()
	m.endByModel(func(o *heldEntry) bool { return o == e })
	ctx, cancel := opCtx()
	defer cancel()
	err := e.h.Handoff(ctx, owner)
	m.log("Handoff of %s's Held of %s epoch %d to %s: %v", e.st.name, e.key, e.epoch, owner, err)
	if e.live() && !errors.Is(err, errors.ErrUnsupported) {
		m.record("R17: key %s: Held.Handoff of %v returned (%v) with the Held still live", e.key, e, err)
	}
	m.mu.Lock()
	if err == nil {
		mark.done = true
		m.violations = append(m.violations, mark.suspects...)
	} else if m.handoffs[e.key] == mark {
		delete(m.handoffs, e.key)
	}
	m.mu.Unlock()
	if err != nil {
		return
	}
	if to != nil {
		m.startHold(to, e.key, "wait", m.ctx, func() {})
	}
	// Another store asks for the key too: it waits out the place.
	var others []*heldStore
	for _, slot := range m.slots {
		if cur := slot[len(slot)-1]; !cur.closed && cur != to {
			others = append(others, cur)
		}
	}
	if len(others) > 0 {
		m.startHold(rapid.SampledFrom(others).Draw(t, "other"), e.key, "wait", m.ctx, func() {})
	}
}

// taking checks R25 as a write is about to give key next's grant to its
// owner: while a Handoff's place stands, only its owner takes the key.
func (m *heldModel) taking(next lease.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.handoffs[next.Key]
	if h == nil || next.Epoch != h.epoch+1 || next.Owner == h.to || !time.Now().Before(h.until) {
		return
	}
	v := fmt.Sprintf("R25: key %s: %s took epoch %d, which a Handoff reserved for %s until %v",
		next.Key, next.Owner, next.Epoch, h.to, h.until.Sub(m.start))
	if h.done {
		m.violate("%s", v)
	} else {
		h.suspects = append(h.suspects, v)
	}
}
