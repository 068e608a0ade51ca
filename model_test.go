package lease

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// modelTTL is short so that clock steps cross expiries often.
const modelTTL = 100 * time.Millisecond

// modelKeys are the keys the model's stores fight over.
var modelKeys = []string{"profile:1", "jobs/nightly"}

// modelBackend is a store kind the model test runs against. Backends other
// than memory register themselves from an init in their own test file.
type modelBackend struct {
	name string
	// expires: grants expire at now+TTL. When false (the local store), a
	// holder's lease ends only when its store crashes or releases.
	expires bool
	// newBackend makes fresh shared storage for one run and returns a
	// function that opens one more store on it, with the given owner, the
	// clock and modelTTL. Stores are closed by the model.
	newBackend func(t *rapid.T, clock *fakeClock) (open func(owner string) Store)
}

var modelBackends = []modelBackend{
	{name: "memory", expires: true, newBackend: func(t *rapid.T, clock *fakeClock) func(string) Store {
		d := NewMemoryDriver()
		return func(owner string) Store {
			s, err := NewDocumentStore(d, WithOwner(owner), WithClock(clock.Now), WithTTL(modelTTL))
			if err != nil {
				t.Fatalf("NewDocumentStore: %v", err)
			}
			return s
		}
	}},
}

// TestModel checks every store kind against a reference model of R2-R7
// under random acquires, renews, releases, clock steps and crashes.
// `make mutants` runs it against broken variants of decide: it must fail.
func TestModel(t *testing.T) {
	for _, b := range modelBackends {
		t.Run(b.name, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) { newModel(rt, b).run() })
		})
	}
}

// modelRecord is what the model believes a key's record says.
type modelRecord struct {
	owner    string
	epoch    uint64
	expires  time.Time
	released bool
}

// modelSlot is one store instance: a process that may crash and restart
// with a new owner.
type modelSlot struct {
	store  Store
	owner  string
	grants map[string]Grant // the last grant this instance got per key, held or not
}

type model struct {
	t       *rapid.T
	b       modelBackend
	clock   *fakeClock
	open    func(owner string) Store
	slots   []*modelSlot
	records map[string]*modelRecord
	dead    map[string]bool // owners whose store crashed
	owners  int
}

func newModel(t *rapid.T, b modelBackend) *model {
	m := &model{t: t, b: b, clock: newFakeClock(), records: map[string]*modelRecord{}, dead: map[string]bool{}}
	m.open = b.newBackend(t, m.clock)
	for range rapid.IntRange(2, 4).Draw(t, "stores") {
		m.slots = append(m.slots, m.newSlot())
	}
	t.Cleanup(func() {
		for _, s := range m.slots {
			s.store.Close()
		}
	})
	return m
}

func (m *model) newSlot() *modelSlot {
	m.owners++
	owner := fmt.Sprintf("owner-%d", m.owners)
	return &modelSlot{store: m.open(owner), owner: owner, grants: map[string]Grant{}}
}

func (m *model) run() {
	m.t.Repeat(map[string]func(*rapid.T){
		"acquire": m.acquire,
		"renew":   m.renew,
		"release": m.release,
		"advance": m.advance,
		"to expiry": func(t *rapid.T) {
			m.toExpiry(t)
		},
		"crash": m.crash,
		"":      m.check,
	})
}

func (m *model) pick(t *rapid.T) (*modelSlot, string) {
	i := rapid.IntRange(0, len(m.slots)-1).Draw(t, "slot")
	return m.slots[i], rapid.SampledFrom(modelKeys).Draw(t, "key")
}

// live reports whether the model's record names a holder that may still work.
func (m *model) live(r *modelRecord) bool {
	if r == nil || r.released {
		return false
	}
	if m.b.expires {
		return m.clock.Now().Before(r.expires)
	}
	return !m.dead[r.owner]
}

func (m *model) newExpiry() time.Time {
	if !m.b.expires {
		return time.Time{}
	}
	return m.clock.Now().Add(modelTTL)
}

// holds reports whether slot holds the grant the record names.
func holds(s *modelSlot, key string, r *modelRecord) bool {
	g, ok := s.grants[key]
	return ok && r != nil && !r.released && g.Owner == r.owner && g.Epoch == r.epoch
}

func (m *model) acquire(t *rapid.T) {
	s, key := m.pick(t)
	r := m.records[key]
	got, err := s.store.Acquire(ctxBG, key)

	if holds(s, key, r) && m.live(r) { // R4c
		if err != nil || got != s.grants[key] {
			t.Fatalf("re-entrant Acquire(%s) by %s = %+v, %v; want the same grant %+v", key, s.owner, got, err, s.grants[key])
		}
		return
	}
	if m.live(r) { // R4e
		var held *HeldError
		if !errors.As(err, &held) || held.Owner != r.owner || held.Epoch != r.epoch {
			t.Fatalf("Acquire(%s) by %s at %v = %+v, %v; want ErrHeld naming %s epoch %d until %v",
				key, s.owner, m.clock.Now(), got, err, r.owner, r.epoch, r.expires)
		}
		return
	}
	want := Grant{Key: key, Owner: s.owner, Epoch: 1, ExpiresAt: m.newExpiry()}
	if r != nil { // R4b, R4d, R4f
		want.Epoch = r.epoch + 1
		want.PreviousUnclean = !r.released && !holds(s, key, r)
	}
	if err != nil || got.Key != want.Key || got.Owner != want.Owner || got.Epoch != want.Epoch ||
		got.PreviousUnclean != want.PreviousUnclean || !got.ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("Acquire(%s) by %s at %v = %+v, %v; want %+v (record %+v)", key, s.owner, m.clock.Now(), got, err, want, r)
	}
	if r != nil && got.Epoch <= r.epoch { // R2, stated on its own
		t.Fatalf("epoch went from %d to %d", r.epoch, got.Epoch)
	}
	m.records[key] = &modelRecord{owner: got.Owner, epoch: got.Epoch, expires: got.ExpiresAt}
	s.grants[key] = got
}

// matches reports whether the record still names g, unreleased (R6, R7).
func matches(r *modelRecord, g Grant) bool {
	return r != nil && !r.released && r.owner == g.Owner && r.epoch == g.Epoch
}

func (m *model) renew(t *rapid.T) {
	s, key := m.pick(t)
	g, ok := s.grants[key]
	if !ok {
		t.Skip("no grant to renew")
	}
	r := m.records[key]
	got, err := s.store.Renew(ctxBG, g)
	if !matches(r, g) || !m.live(r) { // R6: after a steal, a release or expiry
		if !errors.Is(err, ErrLost) || errors.Is(err, ErrHeld) {
			t.Fatalf("Renew(%+v) at %v = %+v, %v; want ErrLost (record %+v)", g, m.clock.Now(), got, err, r)
		}
		return
	}
	want := g
	want.ExpiresAt = m.newExpiry()
	if err != nil || got.Key != want.Key || got.Owner != want.Owner || got.Epoch != want.Epoch || !got.ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("Renew(%+v) = %+v, %v; want %+v", g, got, err, want)
	}
	r.expires = got.ExpiresAt
	s.grants[key] = got
}

func (m *model) release(t *rapid.T) {
	s, key := m.pick(t)
	g, ok := s.grants[key]
	if !ok {
		t.Skip("no grant to release")
	}
	r := m.records[key]
	err := s.store.Release(ctxBG, g)
	if !matches(r, g) { // R7: after a steal or a release
		if !errors.Is(err, ErrLost) {
			t.Fatalf("Release(%+v) = %v; want ErrLost (record %+v)", g, err, r)
		}
		return
	}
	if err != nil { // R7: also after expiry, if nobody took over
		t.Fatalf("Release(%+v) at %v = %v; want nil (record %+v)", g, m.clock.Now(), err, r)
	}
	r.released = true
}

func (m *model) advance(t *rapid.T) {
	m.clock.Advance(time.Duration(rapid.IntRange(0, 2*int(modelTTL/time.Millisecond)).Draw(t, "ms")) * time.Millisecond)
}

// toExpiry moves the clock to a live record's expiry or 1ms before it,
// where off-by-one rules break.
func (m *model) toExpiry(t *rapid.T) {
	r := m.records[rapid.SampledFrom(modelKeys).Draw(t, "key")]
	if !m.b.expires || !m.live(r) {
		t.Skip("no live expiring record")
	}
	at := r.expires
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
	for _, key := range modelKeys {
		r := m.records[key]
		got, err := m.slots[0].store.Holder(ctxBG, key)
		if !m.live(r) {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("Holder(%s) at %v = %+v, %v; want ErrNotFound (record %+v)", key, m.clock.Now(), got, err, r)
			}
			continue
		}
		if err != nil || got.Owner != r.owner || got.Epoch != r.epoch || got.Released || !got.ExpiresAt.Equal(r.expires) {
			t.Fatalf("Holder(%s) at %v = %+v, %v; want %+v", key, m.clock.Now(), got, err, r)
		}
	}
}
