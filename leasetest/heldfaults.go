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
}

func newHeldFaults(d lease.Driver, m *heldModel, latency time.Duration) *heldFaults {
	return &heldFaults{Driver: d, m: m, latency: latency,
		late: map[string]time.Duration{}, hang: map[string]bool{}, unknown: map[string]bool{}, inflight: map[string]int{}}
}

// Capabilities states what the wrapped driver states.
func (f *heldFaults) Capabilities() lease.Capabilities { return lease.DriverCapabilities(f.Driver) }

// heal ends every fault.
func (f *heldFaults) heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.late)
	clear(f.hang)
	clear(f.unknown)
	f.failBatch = false
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
	if lands && exists && !cur.Released && (w.Rec.Released || w.Rec.Owner != cur.Owner || w.Rec.Epoch != cur.Epoch) {
		f.m.givingUp(cur, w.Rec)
	}
	return f.Driver.Put(ctx, w.Rec, w.Pre)
}
