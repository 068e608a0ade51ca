package leasetest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"pgregory.net/rapid"
)

// TestModel checks open's stores against a reference model of R2-R7 and
// R12-R13 with pgregory.net/rapid: 2-4 stores on one backend make random
// acquires, renews, releases, release-alls and Holder calls, and batched
// acquires and renews where the store offers them to tests, while the
// clock jumps (to expiries, and 1ms before them) and stores crash (Close
// without releasing, then a new store with a new owner in their place).
// Each run uses keys of its own, so every run shares the backend open
// gives t.
//
// checks is the number of runs; 0 uses rapid's -rapid.checks flag (100 by
// default). A positive checks sets that flag while the test runs, so it
// must not run in parallel with another rapid test.
func TestModel(t *testing.T, open StoreOpener, checks int) {
	ttl := probeTTL(t, open)
	if checks > 0 {
		defer setRapidChecks(t, checks)()
	}
	rapid.Check(t, func(rt *rapid.T) { newModel(rt, t, open, ttl).run() })
}

var rapidFlagMu sync.Mutex // serialises TestModel calls that set -rapid.checks

// setRapidChecks sets -rapid.checks to n and returns what restores it.
func setRapidChecks(t *testing.T, n int) (restore func()) {
	f := flag.Lookup("rapid.checks")
	if f == nil {
		t.Fatal("rapid's -rapid.checks flag is not registered")
	}
	rapidFlagMu.Lock()
	old := f.Value.String()
	if err := f.Value.Set(strconv.Itoa(n)); err != nil {
		t.Fatal(err)
	}
	return func() {
		f.Value.Set(old)
		rapidFlagMu.Unlock()
	}
}

// modelRuns numbers model runs, so that each uses keys and owners of its own.
var modelRuns, modelOwners atomic.Int64

// modelRecord is what the model believes a key's record says.
type modelRecord struct {
	owner    string
	epoch    uint64
	expires  time.Time
	released bool
	sess     *modelSession // the session the key is attached to (R20); nil: kept per key
}

// expiry is when the record's holder must be gone: its session's expiry
// for a key attached to one (R20).
func (r *modelRecord) expiry() time.Time {
	if r.sess != nil {
		return r.sess.expires
	}
	return r.expires
}

// modelSession is what the model believes a session's record says
// (R18–R22).
type modelSession struct {
	expires time.Time
	state   lease.SessionState
}

// modelSlot is one store instance: a process that may crash and restart
// with a new owner.
type modelSlot struct {
	store    lease.Store
	owner    string
	grants   map[string]lease.Grant // the last grant this instance got per key, held or not
	sess     *modelSession          // the session its batched acquires attach keys to; nil: none yet
	sessions []*modelSession        // every session it started
}

type model struct {
	t       *rapid.T
	ttl     time.Duration // 0: grants never expire; a holder ends when its store crashes
	clock   *Clock
	open    func(owner string) lease.Store
	keys    []string
	slots   []*modelSlot
	records map[string]*modelRecord
	dead    map[string]bool // owners whose store crashed
}

func newModel(rt *rapid.T, t *testing.T, open StoreOpener, ttl time.Duration) *model {
	run := modelRuns.Add(1)
	m := &model{
		t: rt, ttl: ttl, clock: NewClock(),
		keys: []string{fmt.Sprintf("model-%d/profile:1", run), fmt.Sprintf("model-%d/profile:2", run),
			fmt.Sprintf("model-%d/jobs/nightly", run)},
		records: map[string]*modelRecord{}, dead: map[string]bool{},
	}
	m.open = func(owner string) lease.Store { return open(t, m.clock.Now, owner) }
	for range rapid.IntRange(2, 4).Draw(rt, "stores") {
		m.slots = append(m.slots, m.newSlot())
	}
	rt.Cleanup(func() {
		for _, s := range m.slots {
			s.store.Close()
		}
	})
	return m
}

func (m *model) newSlot() *modelSlot {
	owner := fmt.Sprintf("owner-%d", modelOwners.Add(1))
	return &modelSlot{store: m.open(owner), owner: owner, grants: map[string]lease.Grant{}}
}

func (m *model) run() {
	m.t.Repeat(map[string]func(*rapid.T){
		"acquire":       m.acquire,
		"renew":         m.renew,
		"release":       m.release,
		"release all":   m.releaseAll,
		"acquire batch": m.acquireBatch,
		"renew batch":   m.renewBatch,
		"advance":       m.advance,
		"to expiry":     m.toExpiry,
		"crash":         m.crash,
		"":              m.check,
	})
}

func (m *model) pick(t *rapid.T) (*modelSlot, string) {
	i := rapid.IntRange(0, len(m.slots)-1).Draw(t, "slot")
	return m.slots[i], rapid.SampledFrom(m.keys).Draw(t, "key")
}

// live reports whether the model's record names a holder that may still work.
func (m *model) live(r *modelRecord) bool {
	if r == nil || r.released {
		return false
	}
	if r.sess != nil { // R20
		return r.sess.state == lease.SessionLive && m.clock.Now().Before(r.sess.expires)
	}
	if m.ttl > 0 {
		return m.clock.Now().Before(r.expires)
	}
	return !m.dead[r.owner]
}

// sessionFor is the session a batched acquire by s attaches keys to: its
// live one, or a new one when it has none or the last one lapsed (R18,
// R19).
func (m *model) sessionFor(s *modelSlot) *modelSession {
	if s.sess == nil || s.sess.state != lease.SessionLive || !m.clock.Now().Before(s.sess.expires) {
		s.sess = &modelSession{expires: m.newExpiry(), state: lease.SessionLive}
		s.sessions = append(s.sessions, s.sess)
	}
	return s.sess
}

func (m *model) newExpiry() time.Time {
	if m.ttl == 0 {
		return time.Time{}
	}
	return m.clock.Now().Add(m.ttl)
}

// holds reports whether slot holds the grant the record names.
func holds(s *modelSlot, key string, r *modelRecord) bool {
	g, ok := s.grants[key]
	return ok && r != nil && !r.released && g.Owner == r.owner && g.Epoch == r.epoch
}

func (m *model) acquire(t *rapid.T) {
	s, key := m.pick(t)
	got, err := s.store.Acquire(ctxBG, key)
	m.acquired(t, s, key, got, err, nil)
}

// A sessionSource gives the session an acquire attaches a key to, when
// it writes one (R18): nil for a per-key acquire.
type sessionSource func() *modelSession

// acquired checks s's acquire of key against the model (R2, R4, R5, R21)
// and records what it took, attached to sess if not nil.
func (m *model) acquired(t *rapid.T, s *modelSlot, key string, got lease.Grant, err error, source sessionSource) {
	r := m.records[key]
	if holds(s, key, r) && m.live(r) { // R4c
		want := s.grants[key]
		want.ExpiresAt = r.expiry()
		if err != nil || got != want {
			t.Fatalf("re-entrant Acquire(%s) by %s = %+v, %v; want the same grant %+v", key, s.owner, got, err, want)
		}
		return
	}
	if m.live(r) { // R4e
		var held *lease.HeldError
		if !errors.As(err, &held) || held.Owner != r.owner || held.Epoch != r.epoch {
			t.Fatalf("Acquire(%s) by %s at %v = %+v, %v; want ErrHeld naming %s epoch %d until %v",
				key, s.owner, m.clock.Now(), got, err, r.owner, r.epoch, r.expires)
		}
		return
	}
	want := lease.Grant{Key: key, Owner: s.owner, Epoch: 1, ExpiresAt: m.newExpiry()}
	var sess *modelSession
	if source != nil {
		sess = source() // started or joined only now that a key is written
		want.ExpiresAt = sess.expires
	}
	if r != nil { // R4b, R4d, R4f; R21: a session ended clean frees its keys clean
		want.Epoch = r.epoch + 1
		cleanEnd := r.sess != nil && r.sess.state == lease.SessionEndedClean
		want.PreviousUnclean = !r.released && !holds(s, key, r) && !cleanEnd
	}
	if err != nil || got.Key != want.Key || got.Owner != want.Owner || got.Epoch != want.Epoch ||
		got.PreviousUnclean != want.PreviousUnclean || !got.ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("Acquire(%s) by %s at %v = %+v, %v; want %+v (record %+v)", key, s.owner, m.clock.Now(), got, err, want, r)
	}
	if r != nil && got.Epoch <= r.epoch { // R2, stated on its own
		t.Fatalf("epoch went from %d to %d", r.epoch, got.Epoch)
	}
	if r != nil && !r.released && r.sess != nil && r.sess.state == lease.SessionLive && !holds(s, key, r) {
		r.sess.state = lease.SessionEndedUnclean // R21: the taker ended the dead session first
	}
	m.records[key] = &modelRecord{owner: got.Owner, epoch: got.Epoch, expires: got.ExpiresAt, sess: sess}
	s.grants[key] = got
}

// matches reports whether the record still names g, unreleased (R6, R7).
func matches(r *modelRecord, g lease.Grant) bool {
	return r != nil && !r.released && r.owner == g.Owner && r.epoch == g.Epoch
}

func (m *model) renew(t *rapid.T) {
	s, key := m.pick(t)
	g, ok := s.grants[key]
	if !ok {
		t.Skip("no grant to renew")
	}
	got, err := s.store.Renew(ctxBG, g)
	m.renewed(t, s, g, got, err)
}

// renewed checks s's renewal of g against the model (R6) and records it.
func (m *model) renewed(t *rapid.T, s *modelSlot, g, got lease.Grant, err error) {
	r := m.records[g.Key]
	if !matches(r, g) || !m.live(r) { // R6: after a steal, a release or expiry
		if !errors.Is(err, lease.ErrLost) || errors.Is(err, lease.ErrHeld) {
			t.Fatalf("Renew(%+v) at %v = %+v, %v; want ErrLost (record %+v)", g, m.clock.Now(), got, err, r)
		}
		return
	}
	want := g
	want.ExpiresAt = m.newExpiry()
	if err != nil || got.Key != want.Key || got.Owner != want.Owner || got.Epoch != want.Epoch || !got.ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("Renew(%+v) = %+v, %v; want %+v", g, got, err, want)
	}
	if r.sess != nil {
		r.sess.expires = got.ExpiresAt // R20: renewing one key renews its session, and every key of it
	} else {
		r.expires = got.ExpiresAt
	}
	s.grants[g.Key] = got
}

// batcher is a store whose batched acquire and renew (R12) the model can
// call directly: the lease package's DocumentStore in that package's own
// tests (its export_test.go), so that the model also drives the batches
// Hold's loops send. Every key of a batch must answer as if written alone.
// For other stores the batch steps are skipped.
// A store that KeepsSessions attaches the keys of its batched acquires
// (Hold's) to its session (R18).
type batcher interface {
	AcquireBatch(ctx context.Context, keys []string) ([]lease.Grant, []error)
	RenewBatch(ctx context.Context, gs []lease.Grant) ([]lease.Grant, []error)
	KeepsSessions() bool
}

// pickBatcher draws a slot whose store can batch.
func (m *model) pickBatcher(t *rapid.T) (*modelSlot, batcher) {
	s := m.slots[rapid.IntRange(0, len(m.slots)-1).Draw(t, "slot")]
	b, ok := s.store.(batcher)
	if !ok {
		t.Skip("the store has no batched operations")
	}
	return s, b
}

// acquireBatch acquires some keys in one batch: each answers as Acquire would.
func (m *model) acquireBatch(t *rapid.T) {
	s, b := m.pickBatcher(t)
	keys := rapid.SliceOfNDistinct(rapid.SampledFrom(m.keys), 1, len(m.keys), rapid.ID).Draw(t, "keys")
	var source sessionSource
	if b.KeepsSessions() {
		source = func() *modelSession { return m.sessionFor(s) }
	}
	got, errs := b.AcquireBatch(ctxBG, keys)
	if len(got) != len(keys) || len(errs) != len(keys) {
		t.Fatalf("AcquireBatch(%v) answered %d grants and %d errors", keys, len(got), len(errs))
	}
	for i, key := range keys {
		m.acquired(t, s, key, got[i], errs[i], source)
	}
}

// renewBatch renews some of a store's grants in one batch: each answers
// as Renew would.
func (m *model) renewBatch(t *rapid.T) {
	s, b := m.pickBatcher(t)
	var gs []lease.Grant
	for _, key := range m.keys {
		if g, ok := s.grants[key]; ok && rapid.Bool().Draw(t, "renew "+key) {
			gs = append(gs, g)
		}
	}
	if len(gs) == 0 {
		t.Skip("no grants to renew")
	}
	got, errs := b.RenewBatch(ctxBG, gs)
	if len(got) != len(gs) || len(errs) != len(gs) {
		t.Fatalf("RenewBatch(%d grants) answered %d grants and %d errors", len(gs), len(got), len(errs))
	}
	for i, g := range gs {
		m.renewed(t, s, g, got[i], errs[i])
	}
}

func (m *model) release(t *rapid.T) {
	s, key := m.pick(t)
	g, ok := s.grants[key]
	if !ok {
		t.Skip("no grant to release")
	}
	r := m.records[key]
	err := s.store.Release(ctxBG, g)
	if !matches(r, g) || r.sess != nil && r.sess.state == lease.SessionEndedClean { // R7: after a steal or a release (R22: its session's clean end)
		if !errors.Is(err, lease.ErrLost) {
			t.Fatalf("Release(%+v) = %v; want ErrLost (record %+v)", g, err, r)
		}
		return
	}
	if err != nil { // R7: also after expiry, if nobody took over
		t.Fatalf("Release(%+v) at %v = %v; want nil (record %+v)", g, m.clock.Now(), err, r)
	}
	r.released, r.sess = true, nil // R22: a release is of the key alone
}

// releaseAll releases every grant one store holds, in one call (R13):
// each key whose record still names the store's grant is released,
// whatever its expiry; a key taken by another owner may add an error
// matching ErrLost, and nothing else fails.
func (m *model) releaseAll(t *rapid.T) {
	s := m.slots[rapid.IntRange(0, len(m.slots)-1).Draw(t, "slot")]
	err := s.store.ReleaseAll(ctxBG)
	if err != nil && !errors.Is(err, lease.ErrLost) {
		t.Fatalf("ReleaseAll by %s = %v; want nil or ErrLost", s.owner, err)
	}
	for key, g := range s.grants {
		// R22: a key of a live session is freed by its session's end;
		// any other of its keys still named is released alone (R7).
		if r := m.records[key]; matches(r, g) && (r.sess == nil || r.sess.state != lease.SessionLive) {
			r.released, r.sess = true, nil
		}
	}
	for _, sess := range s.sessions { // R22: its sessions end clean, and free their keys
		if sess.state == lease.SessionLive {
			sess.state = lease.SessionEndedClean
		}
	}
	s.sess = nil
}

// advance moves the clock by up to two TTLs, in whole milliseconds.
func (m *model) advance(t *rapid.T) {
	limit := 2 * max(int(m.ttl/time.Millisecond), 100)
	m.clock.Advance(time.Duration(rapid.IntRange(0, limit).Draw(t, "ms")) * time.Millisecond)
}

// toExpiry moves the clock to a live record's expiry or 1ms before it,
// where off-by-one rules break.
func (m *model) toExpiry(t *rapid.T) {
	r := m.records[rapid.SampledFrom(m.keys).Draw(t, "key")]
	if m.ttl == 0 || !m.live(r) {
		t.Skip("no live expiring record")
	}
	at := r.expiry()
	if rapid.Bool().Draw(t, "just before") {
		at = at.Add(-time.Millisecond)
	}
	m.clock.Set(at)
}

// crash drops a store without releasing anything, as a dying process
// does, and starts a new one with a new owner in its place.
func (m *model) crash(t *rapid.T) {
	i := rapid.IntRange(0, len(m.slots)-1).Draw(t, "slot")
	old := m.slots[i]
	if err := old.store.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	m.dead[old.owner] = true
	m.slots[i] = m.newSlot()
}

// check compares every key's live holder with the model: at most one, and
// the right one.
func (m *model) check(t *rapid.T) {
	for _, key := range m.keys {
		r := m.records[key]
		got, err := m.slots[0].store.Holder(ctxBG, key)
		if !m.live(r) {
			if !errors.Is(err, lease.ErrNotFound) {
				t.Fatalf("Holder(%s) at %v = %+v, %v; want ErrNotFound (record %+v)", key, m.clock.Now(), got, err, r)
			}
			continue
		}
		if err != nil || got.Owner != r.owner || got.Epoch != r.epoch || got.Released || !got.ExpiresAt.Equal(r.expiry()) {
			t.Fatalf("Holder(%s) at %v = %+v, %v; want %+v", key, m.clock.Now(), got, err, r)
		}
	}
}
