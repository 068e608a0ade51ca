package leasetest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasekit/lease"
)

// heldFaults is the driver under TestHeldModel's document stores. It lets
// reads through, slows every call by a fixed latency, fails chosen writes
// (late, unknown, hanging, a failed batch), and, at the moment each write
// would land, checks R17: no live Held of the grant a write gives up. It
// serialises writes, so that the check and the write see one state.
//
// It hides sessions (it states no Sessions, R24); over a driver that has
// them, the stores get it as a heldSessionFaults (driver), which forwards
// them with faults of their own.
type heldFaults struct {
	lease.Driver
	m       *heldModel
	latency time.Duration // before every call; a call whose ctx ends meanwhile reaches nothing

	mu        sync.Mutex // guards the fields below; serialises writes
	late      map[string]time.Duration
	hang      map[string]bool
	unknown   map[string]bool // one-shot
	failBatch bool            // one-shot: the next PutMany fails
	batchAll  bool            // ... after applying all its writes (else none)
	inflight  map[string]int  // writes in flight per key
	sess      sessionFaults   // faults of session writes
}

// sessionFaults are the faults armed for session writes (PutSession),
// whatever the session: a store has one session at a time, and its
// renewal is the one write that keeps all its keys (R20).
type sessionFaults struct {
	fail     bool          // every session write fails before it lands, until healed
	late     time.Duration // every session write answers this much after it landed
	slow     time.Duration // one-shot: the next session write lands this much after it was sent, whatever its ctx says
	hang     bool          // every session write hangs until its ctx ends; nothing lands
	unknown  bool          // one-shot: the next session write lands and reports an unknown outcome (R9)
	reread   bool          // ... and the GetSession after it fails too, so the outcome stays unknown
	failGets int           // fail this many following GetSessions
}

func newHeldFaults(d lease.Driver, m *heldModel, latency time.Duration) *heldFaults {
	return &heldFaults{Driver: d, m: m, latency: latency,
		late: map[string]time.Duration{}, hang: map[string]bool{}, unknown: map[string]bool{}, inflight: map[string]int{}}
}

// Capabilities states what the wrapped driver states, but Sessions: it
// does not forward session methods (heldSessionFaults does).
func (f *heldFaults) Capabilities() lease.Capabilities { return withoutSessions(f.Driver) }

// driver is what the stores use: f, or f with sessions when the wrapped
// driver states them and implements them (R24).
func (f *heldFaults) driver() lease.Driver {
	if sd, ok := f.Driver.(lease.SessionDriver); ok && lease.DriverCapabilities(f.Driver).Sessions {
		return &heldSessionFaults{heldFaults: f, sd: sd}
	}
	return f
}

// sessions reports whether the stores keep their Helds through sessions.
func (f *heldFaults) sessions() bool {
	_, ok := f.driver().(*heldSessionFaults)
	return ok
}

// heal ends every fault.
func (f *heldFaults) heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.late)
	clear(f.hang)
	clear(f.unknown)
	f.failBatch = false
	f.sess = sessionFaults{}
}

// busy reports whether a write of key is in flight.
func (f *heldFaults) busy(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inflight[key] > 0
}

func (f *heldFaults) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *heldFaults) Get(ctx context.Context, key string) (lease.Record, uint64, error) {
	if err := f.wait(ctx, f.latency); err != nil {
		return lease.Record{}, 0, err
	}
	return f.Driver.Get(ctx, key)
}

// GetMany reads each key, in one call when the wrapped driver can.
func (f *heldFaults) GetMany(ctx context.Context, keys []string) ([]lease.GetResult, error) {
	if err := f.wait(ctx, f.latency); err != nil {
		return nil, err
	}
	if br, ok := f.Driver.(lease.BatchReader); ok {
		return br.GetMany(ctx, keys)
	}
	out := make([]lease.GetResult, len(keys))
	for i, key := range keys {
		out[i].Rec, out[i].Version, out[i].Err = f.Driver.Get(ctx, key)
	}
	return out, nil
}

// enter counts writes of keys in flight and returns what ends them.
func (f *heldFaults) enter(ws []lease.Write) (exit func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range ws {
		f.inflight[w.Rec.Key]++
	}
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, w := range ws {
			f.inflight[w.Rec.Key]--
		}
	}
}

// faultPlan is what the faults armed now do to one call writing ws.
type faultPlan struct {
	hang     bool          // wait for ctx; nothing lands
	late     time.Duration // answer this much after landing, whatever ctx says
	unknown  map[int]bool  // these writes land and report an unknown outcome
	failAll  bool          // the batch fails as a whole
	applyAll bool          // ... after its writes landed
}

func (f *heldFaults) planFor(ws []lease.Write, batch bool) faultPlan {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := faultPlan{unknown: map[int]bool{}}
	for i, w := range ws {
		key := w.Rec.Key
		p.hang = p.hang || f.hang[key]
		p.late = max(p.late, f.late[key])
		if f.unknown[key] {
			delete(f.unknown, key)
			p.unknown[i] = true
		}
	}
	if batch && f.failBatch {
		f.failBatch = false
		p.failAll, p.applyAll = true, f.batchAll
	}
	return p
}

// Put writes one record, as the faults say.
func (f *heldFaults) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	rs, err := f.write(ctx, []lease.Write{{Rec: rec, Pre: pre}}, false)
	if err != nil {
		return 0, err
	}
	return rs[0].Version, rs[0].Err
}

// PutMany writes each record as Put would, as one call that the faults
// treat as one: a hanging key hangs it all, a late key delays every answer.
func (f *heldFaults) PutMany(ctx context.Context, ws []lease.Write) ([]lease.PutResult, error) {
	return f.write(ctx, ws, true)
}

func (f *heldFaults) write(ctx context.Context, ws []lease.Write, batch bool) ([]lease.PutResult, error) {
	defer f.enter(ws)() // on its way from the start: a give-back still in its latency explains a held key
	if err := f.wait(ctx, f.latency); err != nil {
		return nil, err
	}
	p := f.planFor(ws, batch)
	if p.hang {
		f.m.faulted(ws, false)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	out := make([]lease.PutResult, len(ws))
	for i, w := range ws {
		if p.failAll && !p.applyAll {
			break
		}
		out[i].Version, out[i].Err = f.apply(ctx, w)
		if p.unknown[i] {
			f.m.faulted(ws[i:i+1], true)
			out[i] = lease.PutResult{Err: ErrInjected}
		}
	}
	if p.late > 0 {
		f.m.faulted(ws, false)
		time.Sleep(p.late) // the reply is on its way: it comes, whatever ctx says
	}
	if p.failAll {
		f.m.faulted(ws, true)
		return nil, ErrInjected
	}
	return out, nil
}

// apply makes one write, after checking that it gives up no grant that a
// live Held still has (R17).
func (f *heldFaults) apply(ctx context.Context, w lease.Write) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, version, err := f.Driver.Get(context.WithoutCancel(ctx), w.Rec.Key)
	exists := err == nil
	if err != nil && !errors.Is(err, lease.ErrNotFound) {
		return 0, err
	}
	lands := w.Pre.Absent != exists && (!exists || version == w.Pre.Version)
	isKey := lease.ValidateKey(w.Rec.Key) == nil // not a waiter's place, which grants nothing
	if lands && isKey && !w.Rec.Released && (!exists || w.Rec.Epoch != cur.Epoch) {
		f.m.taking(w.Rec)
	}
	if lands && exists && isKey && !cur.Released && (w.Rec.Released || w.Rec.Owner != cur.Owner || w.Rec.Epoch != cur.Epoch) {
		f.m.givingUp(cur, w.Rec)
		if !w.Rec.Released && w.Rec.Owner != cur.Owner && cur.Session != "" {
			f.takingFromSession(ctx, cur, w.Rec)
		}
	}
	return f.Driver.Put(ctx, w.Rec, w.Pre)
}

// takingFromSession checks R21 as another owner's write takes key record
// cur, attached to a session: the session must have ended first (a store
// taking a key of its own lapsed session need not end it, and an owner
// is one store here, but for a reopened store of the same owner).
func (f *heldFaults) takingFromSession(ctx context.Context, cur, next lease.Record) {
	sd, ok := f.Driver.(lease.SessionDriver)
	if !ok {
		return
	}
	sess, _, err := sd.GetSession(context.WithoutCancel(ctx), cur.Session)
	switch {
	case err != nil:
		f.m.record("R21: key %s: %s took it at epoch %d from session %s, which cannot be read: %v", cur.Key, next.Owner, next.Epoch, cur.Session, err)
	case sess.State == lease.SessionLive:
		f.m.record("R21: key %s: %s took it at epoch %d while its session %s of %s was still live (expiring %v ago)",
			cur.Key, next.Owner, next.Epoch, cur.Session, sess.Owner, time.Since(sess.ExpiresAt))
	}
}

// heldSessionFaults is heldFaults over a driver with sessions: it states
// Sessions and forwards the session methods, failing session writes as
// the session faults say, and checking, as each session write would land,
// that it ends no session while a Held of one of its keys is live (R17)
// and revives or renews no session that ended or expired (R19).
type heldSessionFaults struct {
	*heldFaults
	sd lease.SessionDriver
}

// Capabilities states what the wrapped driver states, Sessions included.
func (f *heldSessionFaults) Capabilities() lease.Capabilities {
	return lease.DriverCapabilities(f.Driver)
}

// GetSession reads through, unless a failed re-read is due.
func (f *heldSessionFaults) GetSession(ctx context.Context, id string) (lease.SessionRecord, uint64, error) {
	if err := f.wait(ctx, f.latency); err != nil {
		return lease.SessionRecord{}, 0, err
	}
	f.mu.Lock()
	fail := f.sess.failGets > 0
	if fail {
		f.sess.failGets--
	}
	f.mu.Unlock()
	if fail {
		return lease.SessionRecord{}, 0, ErrInjected
	}
	return f.sd.GetSession(ctx, id)
}

// sessionPlan is what the faults armed now do to one session write.
func (f *heldSessionFaults) sessionPlan() sessionFaults {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.sess
	if p.fail || p.hang {
		return p
	}
	if f.sess.unknown {
		f.sess.unknown, f.sess.reread = false, false
		if p.reread {
			f.sess.failGets++
		}
	}
	f.sess.slow = 0
	return p
}

// PutSession writes a session record, as the session faults say.
func (f *heldSessionFaults) PutSession(ctx context.Context, rec lease.SessionRecord, pre lease.Precondition) (uint64, error) {
	if err := f.wait(ctx, f.latency); err != nil {
		return 0, err
	}
	p := f.sessionPlan()
	switch {
	case p.hang:
		f.m.sessionFaulted(rec.Owner)
		<-ctx.Done()
		return 0, ctx.Err()
	case p.fail:
		f.m.sessionFaulted(rec.Owner)
		return 0, ErrInjected
	}
	sent := time.Now()
	if p.slow > 0 {
		f.m.sessionFaulted(rec.Owner)
		time.Sleep(p.slow) // on the wire: it lands, whatever ctx says, and races what came since (R21)
	}
	version, err := f.applySession(ctx, rec, pre, sent)
	if p.unknown {
		f.m.sessionFaulted(rec.Owner)
		version, err = 0, ErrInjected
	}
	if p.late > 0 {
		f.m.sessionFaulted(rec.Owner)
		time.Sleep(p.late) // the reply is on its way: it comes, whatever ctx says
	}
	return version, err
}

// applySession makes one session write, after checking R17 and R19
// against the state it would change.
func (f *heldSessionFaults) applySession(ctx context.Context, rec lease.SessionRecord, pre lease.Precondition, sent time.Time) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, version, err := f.sd.GetSession(context.WithoutCancel(ctx), rec.ID)
	exists := err == nil
	if err != nil && !errors.Is(err, lease.ErrNotFound) {
		return 0, err
	}
	if lands := pre.Absent != exists && (!exists || version == pre.Version); lands && exists {
		f.checkSessionWrite(ctx, cur, rec, sent)
	}
	return f.sd.PutSession(ctx, rec, pre)
}

// checkSessionWrite checks a write of next over cur, sent at sent, that
// lands: a live session is renewed only by a write sent before its
// expiry, and an ended one is never written live again (R19); a session
// ends only once no Held of a key attached to it is live (R17).
func (f *heldSessionFaults) checkSessionWrite(ctx context.Context, cur, next lease.SessionRecord, sent time.Time) {
	switch {
	case next.State != lease.SessionLive && cur.State == lease.SessionLive:
		for _, key := range f.m.keys {
			rec, _, err := f.Driver.Get(context.WithoutCancel(ctx), key)
			if err == nil && !rec.Released && rec.Session == cur.ID {
				f.m.givingUpSession(rec, next)
			}
		}
	case next.State == lease.SessionLive && cur.State != lease.SessionLive:
		f.m.record("R19: session %s of %s, %v, was written live again", cur.ID, cur.Owner, cur.State)
	case next.State == lease.SessionLive && !sent.Before(cur.ExpiresAt):
		f.m.record("R19: session %s of %s was renewed by a write sent %v after its expiry", cur.ID, cur.Owner, sent.Sub(cur.ExpiresAt))
	}
}

// RemoveSessions deletes old sessions, serialised with the writes.
func (f *heldSessionFaults) RemoveSessions(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := f.wait(ctx, f.latency); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sd.RemoveSessions(ctx, before, limit)
}
