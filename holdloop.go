package lease

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
)

// keeper is one store's loop for Hold: it renews every Held of the store,
// in batches where the store can batch (R12), ends each Held at its own
// deadline, ends them all when the store closes (R15), and looks for the
// keys that Holds wait for, all of them in one round. It runs one
// goroutine while it has Helds or waiters, plus one for the storage call
// in flight, whatever the number of keys.
type keeper struct {
	s      Store
	closed <-chan struct{} // closed when the store closes; nil if it cannot say

	mu      sync.Mutex // guards the fields below and every Held's schedule
	helds   map[string][]*Held
	waits   map[string][]*waiter
	wake    chan struct{} // pokes the loop; made when the loop starts
	running bool          // the loop goroutine is running
	busy    bool          // a storage call is in flight
	stopped bool          // the store closed: no more Helds or waits

	cancelLook context.CancelFunc // ends the look in flight, if any
}

// keeperSlot is embedded by the stores this package ships, so that each
// store instance finds its keeper without a global table.
type keeperSlot struct {
	once sync.Once
	k    *keeper
}

func (ks *keeperSlot) keeper(s Store) *keeper {
	ks.once.Do(func() { ks.k = newKeeper(s) })
	return ks.k
}

// ended ends the Helds of grants that the store gave up by itself
// (ReleaseAll), each with cause(g).
func (ks *keeperSlot) ended(gs []Grant, cause func(Grant) error) {
	if k := ks.k; k != nil && len(gs) > 0 {
		k.endGrants(gs, cause)
	}
}

// releasedCause is why a Held ends when its grant was released.
func releasedCause(g Grant) error {
	return fmt.Errorf("%w: %q epoch %d was released", ErrLost, g.Key, g.Epoch)
}

// foreignKeepers holds the keepers of stores this package does not ship,
// while they have Helds or waiters.
var foreignKeepers struct {
	sync.Mutex
	m map[Store]*keeper
}

func newKeeper(s Store) *keeper {
	k := &keeper{s: s, helds: make(map[string][]*Held), waits: make(map[string][]*waiter)}
	if c, ok := s.(interface{ closedSignal() <-chan struct{} }); ok {
		k.closed = c.closedSignal()
	}
	return k
}

// keeperFor returns s's keeper. A store of a type that cannot be a map key
// gets a keeper of its own per call: correct, only not shared.
func keeperFor(s Store) *keeper {
	if ks, ok := s.(interface{ keeperSlot() *keeperSlot }); ok {
		return ks.keeperSlot().keeper(s)
	}
	if !reflect.TypeOf(s).Comparable() {
		return newKeeper(s)
	}
	foreignKeepers.Lock()
	defer foreignKeepers.Unlock()
	if foreignKeepers.m == nil {
		foreignKeepers.m = make(map[Store]*keeper)
	}
	k, ok := foreignKeepers.m[s]
	if !ok {
		k = newKeeper(s)
		foreignKeepers.m[s] = k
	}
	return k
}

// forget drops an idle foreign keeper from the table.
func (k *keeper) forget() {
	foreignKeepers.Lock()
	defer foreignKeepers.Unlock()
	if foreignKeepers.m[k.s] != k {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.running {
		delete(foreignKeepers.m, k.s)
	}
}

// startLocked runs the loop if it is not running. k.mu must be held.
func (k *keeper) startLocked() {
	if !k.running {
		k.running = true
		k.wake = make(chan struct{}, 1)
		go k.loop()
	}
}

// pokeLocked makes the loop look again now. k.mu must be held.
func (k *keeper) pokeLocked() {
	if k.running {
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
}

// hold makes a Held of g, acquired by a call that began at start, and
// schedules its renewals. reused says that the store already held g
// before this Hold (R4c): a failed Hold gives back only a grant it took.
func (k *keeper) hold(ctx context.Context, cfg holdConfig, g Grant, start time.Time, reused bool) (*Held, error) {
	h := &Held{s: k.s, k: k, key: g.Key, grant: g}
	h.ctx, h.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	if !g.ExpiresAt.IsZero() {
		var err error
		if g, start, err = k.plan(ctx, h, cfg, g, start); err != nil {
			h.cancel(err)
			if !reused && !errors.Is(err, ErrLost) {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
				defer cancel()
				err = errors.Join(err, k.s.Release(rctx, g))
			}
			return nil, err
		}
		h.grant = g
	}
	if g.ExpiresAt.IsZero() && k.closed == nil {
		return h, nil // nothing to renew and no close to watch: the loop is not needed
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		h.cancel(closedCause(g))
		return nil, ErrClosed
	}
	k.scheduleLocked(h, g, start)
	k.helds[g.Key] = append(k.helds[g.Key], h)
	k.startLocked()
	k.pokeLocked()
	return h, nil
}

// plan sets h's renewal interval and margin from the store's TTL (or, for
// a store that does not say, the grant's), and renews g at once when it
// has less time left than that plan needs (a grant held before, R4c).
func (k *keeper) plan(ctx context.Context, h *Held, cfg holdConfig, g Grant, start time.Time) (Grant, time.Time, error) {
	ttl := storeTTL(k.s)
	if ttl <= 0 {
		ttl = g.ExpiresAt.Sub(start)
	}
	var err error
	h.renew, h.margin, err = cfg.plan(ttl)
	if err == nil && g.ExpiresAt.Sub(start) > h.renew+h.margin {
		return g, start, nil
	}
	start = time.Now()
	next, rerr := k.s.Renew(ctx, g)
	if rerr != nil {
		return g, start, errors.Join(err, rerr)
	}
	if err != nil { // the grant's own time was short: plan again on a full one
		if h.renew, h.margin, err = cfg.plan(next.ExpiresAt.Sub(start)); err != nil {
			return next, start, err
		}
	}
	return next, start, nil
}

// heldBefore returns the grant the store holds for key before a Hold
// acquires it, where the store can say.
func (k *keeper) heldBefore(key string) (Grant, bool) {
	if st, ok := k.s.(interface{ tableGrantOf(string) (Grant, bool) }); ok {
		return st.tableGrantOf(key)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if hs := k.helds[key]; len(hs) > 0 {
		return hs[0].Grant(), true
	}
	return Grant{}, false
}

// scheduleLocked plans h's next renewal and deadline after a grant g
// obtained by a call that began at start. The deadline is on the
// monotonic clock, so a step of the wall clock cannot move it (R8).
func (k *keeper) scheduleLocked(h *Held, g Grant, start time.Time) {
	if g.ExpiresAt.IsZero() {
		return // never expires: nothing to renew
	}
	h.deadline = start.Add(g.ExpiresAt.Sub(start) - h.margin)
	h.due = earliest(start.Add(h.renew), h.deadline.Add(-h.renew/4))
	h.retry, h.renewErr = max(h.renew/8, time.Millisecond), nil
}

// remove takes h off the loop (Release).
func (k *keeper) remove(h *Held) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.removeLocked(h)
}

func (k *keeper) removeLocked(h *Held) {
	hs := slices.DeleteFunc(k.helds[h.key], func(o *Held) bool { return o == h })
	if len(hs) == 0 {
		delete(k.helds, h.key)
	} else {
		k.helds[h.key] = hs
	}
	k.pokeIfIdleLocked()
}

// pokeIfIdleLocked wakes the loop when it has nothing left, so that it
// returns now rather than at its next timer.
func (k *keeper) pokeIfIdleLocked() {
	if len(k.helds) == 0 && len(k.waits) == 0 {
		k.pokeLocked()
	}
}

// lose ends h with cause and takes it off the loop.
func (k *keeper) lose(h *Held, cause error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.removeLocked(h)
	h.lose(cause)
}

// renewed installs a grant renewed by a call that began at start, and
// reports whether h still holds (false: it ended meanwhile).
func (k *keeper) renewed(h *Held, next Grant, start time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !h.install(next) {
		return false
	}
	k.scheduleLocked(h, next, start)
	return true
}

// endGrants ends the Helds of grants the store gave up by itself.
func (k *keeper) endGrants(gs []Grant, cause func(Grant) error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, g := range gs {
		for _, h := range slices.Clone(k.helds[g.Key]) {
			if hg := h.Grant(); hg.Epoch == g.Epoch && hg.Owner == g.Owner {
				k.removeLocked(h)
				h.lose(cause(g))
			}
		}
	}
}

// closedCause is why a Held ends when its store closes (R15).
func closedCause(g Grant) error {
	return fmt.Errorf("%w: %q epoch %d: %w", ErrLost, g.Key, g.Epoch, ErrClosed)
}

// loop is the keeper's goroutine. Each turn it ends the Helds past their
// deadline, starts the next storage call if none is in flight, and sleeps
// until something is due, it is poked, or the store closes. It returns
// when nothing is left to keep or wait for.
func (k *keeper) loop() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		k.mu.Lock()
		if len(k.helds) == 0 && len(k.waits) == 0 && !k.busy {
			k.running = false
			k.mu.Unlock()
			k.forget()
			return
		}
		now := time.Now()
		k.expireLocked(now)
		if !k.busy {
			if job := k.nextJobLocked(now); job != nil {
				k.busy = true
				go k.runJob(job)
			}
		}
		next := k.nextWakeLocked(now)
		wake := k.wake
		k.mu.Unlock()

		timer.Reset(next.Sub(now))
		select {
		case <-timer.C:
		case <-wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-k.closed:
			k.closeAll()
			k.closed = nil // seen; loop on until the call in flight is done
		}
	}
}

// runJob runs one storage call off the loop, so that deadlines are kept
// while it is in flight, and pokes the loop when it is done.
func (k *keeper) runJob(job func()) {
	job()
	k.mu.Lock()
	k.busy = false
	k.pokeLocked()
	k.mu.Unlock()
}

// expireLocked ends every Held whose deadline has come: renewals kept
// failing until ExpiresAt minus the safety margin.
func (k *keeper) expireLocked(now time.Time) {
	if mutant == mutantNoDeadline {
		return // keep holding past the deadline
	}
	for _, hs := range k.helds {
		for _, h := range slices.Clone(hs) {
			if h.deadline.IsZero() || now.Before(h.deadline) {
				continue
			}
			g := h.Grant()
			cause := fmt.Errorf("%w: %q epoch %d was not renewed before its expiry minus the safety margin (%v)",
				ErrLost, g.Key, g.Epoch, h.margin)
			if h.renewErr != nil {
				cause = fmt.Errorf("%w; last renewal: %w", cause, quoted{h.renewErr})
			}
			k.removeLocked(h)
			h.lose(cause)
			k.observeLost(g, LossDeadline)
		}
	}
}

// nextWakeLocked is when the loop must look next: the earliest renewal,
// deadline or waiter look.
func (k *keeper) nextWakeLocked(now time.Time) time.Time {
	next := now.Add(time.Hour)
	for _, hs := range k.helds {
		for _, h := range hs {
			if !h.deadline.IsZero() && mutant != mutantNoDeadline { // the mutant must not wake for a deadline it ignores
				next = earliest(next, h.deadline)
			}
			if !h.due.IsZero() && !k.busy {
				next = earliest(next, h.due)
			}
		}
	}
	if !k.busy {
		for _, ws := range k.waits {
			for _, w := range ws {
				next = earliest(next, w.due)
			}
		}
	}
	if next.Before(now) {
		return now
	}
	return next
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// nextJobLocked picks the next storage call: a batch of renewals if any is
// due, else a round of looks for waiters if any is due.
func (k *keeper) nextJobLocked(now time.Time) func() {
	if job := k.renewJobLocked(now); job != nil {
		return job
	}
	return k.waitJobLocked(now)
}

// closeAll ends every Held and wait of a store that closed (R15).
func (k *keeper) closeAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	for _, hs := range k.helds {
		for _, h := range hs {
			h.lose(closedCause(h.Grant()))
		}
	}
	clear(k.helds)
	for _, ws := range k.waits {
		for _, w := range ws {
			w.finish(waitResult{err: ErrClosed})
		}
	}
	clear(k.waits)
}

// oneLine returns err's text on one line without a leading "lease: ", for
// use as the last part of another error's message.
func oneLine(err error) string {
	return strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\n", "; "), "lease: ")
}

// quoted is an error quoted inside another's message: it reads as oneLine
// and still unwraps to the error, so errors.Is and errors.As see through it.
type quoted struct{ err error }

func (q quoted) Error() string { return oneLine(q.err) }
func (q quoted) Unwrap() error { return q.err }

// grantResult answers one key of a batched renew or acquire.
type grantResult struct {
	g   Grant
	err error
}

// batchStore is a Store that can renew and acquire many keys in few
// storage round trips (R12); the keeper uses it when the store has it.
// Each result answers the grant or key at the same index.
type batchStore interface {
	renewMany(ctx context.Context, gs []Grant) []grantResult
	acquireMany(ctx context.Context, keys []string) []grantResult
}

// renewAll renews gs through s: in batches when s can, else one at a time.
func renewAll(ctx context.Context, s Store, gs []Grant) []grantResult {
	if b, ok := s.(batchStore); ok {
		return b.renewMany(ctx, gs)
	}
	out := make([]grantResult, len(gs))
	for i, g := range gs {
		out[i].g, out[i].err = s.Renew(ctx, g)
	}
	return out
}

// renewJobLocked returns a renewal of every key that is due, or will be
// within half its interval (early, so that the Helds of a store fall into
// step and share their batches; never late), or nil if none is due yet.
func (k *keeper) renewJobLocked(now time.Time) func() {
	due := false
	for _, hs := range k.helds {
		for _, h := range hs {
			due = due || (!h.due.IsZero() && !now.Before(h.due))
		}
	}
	if !due {
		return nil
	}
	var grants []Grant
	var deadline time.Time
	for _, hs := range k.helds {
		for _, h := range hs {
			if h.due.IsZero() || h.due.Sub(now) > h.renew/2 {
				continue
			}
			grants = append(grants, h.Grant()) // the Helds of a key share its grant
			if deadline.IsZero() || h.deadline.Before(deadline) {
				deadline = h.deadline
			}
			break
		}
	}
	return func() { k.renewBatch(grants, deadline) }
}

// renewBatch renews grants, bounded by the earliest deadline among them,
// and installs each answer in every Held of its key: a renewed grant, a
// loss, or a failure retried soon.
func (k *keeper) renewBatch(grants []Grant, deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	results := renewAll(ctx, k.s, grants)
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	for i, g := range grants {
		r := results[i]
		for _, h := range slices.Clone(k.helds[g.Key]) {
			if hg := h.Grant(); hg.Epoch != g.Epoch || hg.Owner != g.Owner {
				continue
			}
			switch cause := lossCause(r.err); {
			case r.err == nil:
				if h.install(r.g) {
					k.scheduleLocked(h, r.g, start)
				}
			case cause != nil:
				k.removeLocked(h)
				h.lose(cause)
			default: // storage failing: retry sooner; the deadline stops the work in time
				h.renewErr = r.err
				h.due = now.Add(jitter(h.retry))
				h.retry = max(min(2*h.retry, h.renew/4), time.Millisecond)
			}
		}
	}
}
