//go:build unix && !aix

package sessionproc

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
)

// probe is a node's driver: it counts round trips (testkit.TripCounter),
// journals each write that takes a key for the node before sending it,
// reads the store's clock before each such write (when now is set), and
// notes every session write by session.
type probe struct {
	*testkit.TripCounter
	owner string
	j     *journal
	now   func(context.Context) (time.Time, error) // nil: not read

	mu        sync.Mutex // guards the fields below
	firstTake time.Time  // the store's clock before the first take write was sent: the least reading
	takeMono  int64      // CLOCK_MONOTONIC then: the least reading
	sessions  map[string]*sessionWrites
	err       error // the first failure of the journal or of the clock
}

var (
	_ lease.BatchDriver   = (*probe)(nil)
	_ lease.BatchReader   = (*probe)(nil)
	_ lease.SessionDriver = (*probe)(nil)
	_ lease.DriverInfo    = (*probe)(nil)
)

// sessionWrites are a node's writes of one session record.
type sessionWrites struct {
	attempts, landed int
	last             lease.SessionRecord // the last write that landed
	version          uint64              // its version
	killAt           time.Time           // the store's clock before the kill that landed was sent
	killMono         int64               // CLOCK_MONOTONIC then
}

func newProbe(d lease.Driver, owner string, j *journal, now func(context.Context) (time.Time, error)) *probe {
	return &probe{TripCounter: &testkit.TripCounter{Driver: d}, owner: owner, j: j, now: now, sessions: map[string]*sessionWrites{}}
}

func (p *probe) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
}

// Err is the first failure of the journal or of the clock.
func (p *probe) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// clock reads the store's clock, or returns zero when it is not read.
func (p *probe) clock(ctx context.Context) time.Time {
	if p.now == nil {
		return time.Time{}
	}
	now, err := p.now(ctx)
	if err != nil {
		p.fail(err)
	}
	return now
}

// beforeTakes journals the writes among recs that take a key for the node,
// before they are sent, and reads the store's clock for them.
func (p *probe) beforeTakes(ctx context.Context, recs ...lease.Record) {
	var takes []keyEpoch
	for _, r := range recs {
		if r.Owner == p.owner && !r.Released {
			takes = append(takes, keyEpoch{r.Key, r.Epoch})
		}
	}
	if len(takes) == 0 {
		return
	}
	at := p.clock(ctx)
	mono := monoNow()
	if err := p.j.writeAt(mono, evTake, p.owner, takes...); err != nil {
		p.fail(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.takeMono == 0 || mono < p.takeMono {
		p.takeMono = mono
	}
	if p.firstTake.IsZero() || at.Before(p.firstTake) {
		p.firstTake = at
	}
}

// Put journals a take, then forwards.
func (p *probe) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	p.beforeTakes(ctx, rec)
	return p.TripCounter.Put(ctx, rec, pre)
}

// PutMany journals the takes, then forwards.
func (p *probe) PutMany(ctx context.Context, ws []lease.Write) ([]lease.PutResult, error) {
	recs := make([]lease.Record, len(ws))
	for i, w := range ws {
		recs[i] = w.Rec
	}
	p.beforeTakes(ctx, recs...)
	return p.TripCounter.PutMany(ctx, ws)
}

// PutSession notes the write by session, and forwards. A write that ends
// a session unclean is a kill (R21): the store's clock is read before it
// is sent.
func (p *probe) PutSession(ctx context.Context, rec lease.SessionRecord, pre lease.Precondition) (uint64, error) {
	var at time.Time
	var mono int64
	if rec.State == lease.SessionEndedUnclean {
		at, mono = p.clock(ctx), monoNow()
	}
	v, err := p.TripCounter.PutSession(ctx, rec, pre)
	p.mu.Lock()
	defer p.mu.Unlock()
	sw := p.sessions[rec.ID]
	if sw == nil {
		sw = &sessionWrites{}
		p.sessions[rec.ID] = sw
	}
	sw.attempts++
	if err == nil {
		sw.landed++
		sw.last, sw.version = rec, v
		if rec.State == lease.SessionEndedUnclean {
			sw.killAt, sw.killMono = at, mono
		}
	}
	return v, err
}

// writesOf returns the node's writes of session id.
func (p *probe) writesOf(id string) sessionWrites {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sw := p.sessions[id]; sw != nil {
		return *sw
	}
	return sessionWrites{}
}

// takeStart returns the store's clock and CLOCK_MONOTONIC before the first
// take write was sent.
func (p *probe) takeStart() (time.Time, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.firstTake, p.takeMono
}

// node is a node's Helds as the journal tells them.
type node struct {
	owner string
	j     *journal

	mu        sync.Mutex // guards the fields below
	live      map[string]*lease.Held
	grants    []lease.Grant // of every Held yielded, in order
	lost      int
	releasing bool // ReleaseAll is ending its Helds: not a loss
	err       error
}

func newNode(owner string, j *journal) *node {
	return &node{owner: owner, j: j, live: map[string]*lease.Held{}}
}

// got journals a Held just yielded and watches its end.
func (n *node) got(h *lease.Held) {
	g := h.Grant()
	n.mu.Lock()
	n.live[g.Key] = h
	n.grants = append(n.grants, g)
	n.mu.Unlock()
	n.journal(evGot, keyEpoch{g.Key, g.Epoch})
	context.AfterFunc(h.Context(), func() {
		n.mu.Lock()
		if n.releasing || n.live[g.Key] != h {
			n.mu.Unlock()
			return
		}
		delete(n.live, g.Key)
		n.lost++
		n.mu.Unlock()
		n.journal(evLost, keyEpoch{g.Key, g.Epoch})
	})
}

func (n *node) journal(event string, subjects ...keyEpoch) {
	if err := n.j.write(event, n.owner, subjects...); err != nil {
		n.mu.Lock()
		n.err = errors.Join(n.err, err)
		n.mu.Unlock()
	}
}

// journalErr is the first failure to write the journal.
func (n *node) journalErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// counts returns how many Helds are live and how many were lost.
func (n *node) counts() (live, lost int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.live), n.lost
}

// releaseAll releases every key with one ReleaseAll, then journals the
// end of each Held: after the call returned, when the node holds it no
// longer.
func (n *node) releaseAll(ctx context.Context, s lease.Store) error {
	n.mu.Lock()
	n.releasing = true
	n.mu.Unlock()
	if err := s.ReleaseAll(ctx); err != nil {
		return err
	}
	n.mu.Lock()
	ends := make([]keyEpoch, 0, len(n.live))
	for key, h := range n.live {
		ends = append(ends, keyEpoch{key, h.Grant().Epoch})
	}
	clear(n.live)
	n.mu.Unlock()
	n.journal(evEnd, ends...)
	return n.journalErr()
}
