package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// waiter is one key of a Hold or HoldEach call, waiting for the key. Its
// fields are guarded by its keeper's mu.
type waiter struct {
	key       string
	cfg       holdConfig
	ctx       context.Context // the caller's: the Held keeps its values
	ch        chan<- HoldResult
	due       time.Time     // next look, when first in its key's queue
	backoff   time.Duration // the wait before the look after next
	last      error         // the last completed look's error
	held      error         // the last look that found the key held, if any
	looked    bool          // at least one look completed
	looking   bool          // a look for it is in flight
	got       *Grant        // what its look in flight got, answered before the look's other keys
	gaveBack  bool          // it left, and what its look got went back at once
	done      bool          // answered, or gone
	gone      bool          // its caller stopped waiting
	watch     func()        // ends the store's release watch, if any
	watched   bool          // the store tells of releases: look rarely otherwise
	queued    bool          // in the loop's woken list
	gather    bool          // its first look waits gatherWindow for others to share it
	waiting   bool          // a look found the key held or storage failing: it waits
	waitSince time.Time     // when it began to wait, for the observer
	started   time.Time     // when it began waiting
	notBefore time.Time     // its next look comes no earlier: a grant it got went back unused

	lookAt int // its place in k.looks (schedule)
}

// gatherWindow is how long a Hold's first look waits for other Holds to
// share its storage call, so that concurrent Holds coalesce into a few
// batched looks instead of one call each. Only a Hold that finds company
// waits (gathers, hasCompanyLocked). A Hold that comes alone looks at
// once, however soon after the store's previous Hold: a worker holding
// one key after another never waits (the first Hold of a burst neither;
// the rest gather behind it). HoldEach's keys, and FailIfHeld Holds, look
// at once.
const gatherWindow = time.Millisecond

// enqueue makes a waiter for each key, answering on ch, and returns the
// waiters it queued; a key it could answer at once (the store closed, or
// FailIfHeld while the store's own Held of the key is live) is answered on
// ch and not returned.
func (k *keeper) enqueue(ctx context.Context, cfg holdConfig, keys []string, ch chan<- HoldResult) []*waiter {
	k.mu.Lock()
	defer k.mu.Unlock()
	ws := make([]*waiter, 0, len(keys))
	now := time.Now()
	gather := len(keys) == 1 && !cfg.failIfHeld && k.hasCompanyLocked(now)
	for _, key := range keys {
		if k.stopped {
			ch <- HoldResult{Key: key, Err: ErrClosed}
			continue
		}
		if h := k.helds[key]; h != nil && mutant == mutantShareGrant {
			shared := &Held{s: k.s, k: k, key: key, grant: h.Grant()}
			shared.ctx, shared.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
			ch <- HoldResult{Key: key, Held: shared}
			continue
		}
		if h := k.helds[key]; h != nil && cfg.failIfHeld {
			ch <- HoldResult{Key: key, Err: ownHeldError(h.Grant())}
			continue
		}
		if st := k.settling[key]; st.n > 0 && cfg.failIfHeld {
			// The store holds the key until the write giving it up lands.
			ch <- HoldResult{Key: key, Err: ownHeldError(st.g)}
			continue
		}
		w := &waiter{key: key, cfg: cfg, ctx: ctx, ch: ch, backoff: holdMinBackoff, started: now, due: now, gather: gather}
		if len(keys) == 1 {
			k.lastHold = w
		}
		k.queues[key] = append(k.queues[key], w)
		k.promoteLocked(key, now)
		if cfg.failIfHeld {
			k.lookNowLocked(key, now, len(keys) == 1)
		}
		ws = append(ws, w)
	}
	if len(ws) > 0 {
		k.startLookLocked(now) // a look due now starts here, not a hand-off later in the loop
		k.startLocked()
		k.poke()
	}
	return ws
}

// hasCompanyLocked reports whether a Hold that comes now has other Holds
// to gather with: a look is in flight or due within gatherWindow, or the
// store's previous Hold came within gatherWindow and still waits or holds
// its key. A Hold that follows one its caller already released (a worker
// holding one key after another) has none.
func (k *keeper) hasCompanyLocked(now time.Time) bool {
	if k.looking {
		return true
	}
	if w, ok := k.looks.First(); ok && w.due.Sub(now) < gatherWindow {
		return true
	}
	prev := k.lastHold
	return prev != nil && now.Sub(prev.started) < gatherWindow && (!prev.done || k.helds[prev.key] != nil)
}

// promoteLocked lets the first waiter of key look, if the key has no live
// Held here and no write giving it up is in flight.
func (k *keeper) promoteLocked(key string, now time.Time) {
	ws := k.queues[key]
	if len(ws) == 0 || k.helds[key] != nil || k.settling[key].n > 0 {
		return
	}
	w := ws[0]
	if w.looking || k.looks.Scheduled(w) {
		return
	}
	w.due = now // first in line, or the Held it queued behind has ended
	if w.due.Before(w.notBefore) {
		w.due = w.notBefore
	}
	if !w.looked && w.gather {
		w.due = now.Add(gatherWindow) // concurrent Holds share their first look
	}
	k.looks.Set(w)
	k.startLocked()
}

// lookNowLocked brings the next look at key forward to now, for a
// FailIfHeld waiter: it is answered by the look of the key's first waiter
// (R16), and must wait neither for that waiter's backoff or poll nor for
// a look of other keys in flight (there is one at a time, which may take
// up to lookTimeout): then the first waiter looks at once, in a call of
// its own, for a Hold of one key (alone; HoldEach's keys share the next
// look, as their number may be large). A look of the key in flight
// answers it as it comes.
func (k *keeper) lookNowLocked(key string, now time.Time, alone bool) {
	w := k.queues[key][0]
	if !k.looks.Scheduled(w) {
		return // its look is in flight
	}
	if !k.looking || !alone {
		if w.due.After(now) {
			w.due = now
			k.looks.Set(w)
		}
		return
	}
	k.looks.Remove(w)
	w.looking = true
	k.ownLooks++
	k.calls.Add(1)
	go k.look([]*waiter{w}, true)
}

// answerLocked answers w once, and reports the end of its wait.
func (k *keeper) answerLocked(w *waiter, r HoldResult) {
	if w.done {
		return
	}
	k.observeWaitEndedLocked(w, r)
	w.done = true
	if w.watch != nil {
		w.watch()
		w.watch = nil
	}
	w.ch <- r
}

// dequeueLocked takes w out of its key's queue and schedules, and lets the
// next waiter look.
func (k *keeper) dequeueLocked(w *waiter) {
	k.looks.Remove(w)
	ws := slices.DeleteFunc(k.queues[w.key], func(o *waiter) bool { return o == w })
	if len(ws) == 0 {
		delete(k.queues, w.key)
		k.leavePlaceLocked(w.key)
	} else {
		k.queues[w.key] = ws
	}
	k.promoteLocked(w.key, time.Now())
}

// abandon ends w's wait because ctx ended, unless it was answered first.
// It returns the error for w and true, or false if w's answer is (or will
// be) on its channel. A look in flight for w stays in flight; its grant,
// if it gets one, goes to the key's next waiter or back to the store.
func (k *keeper) abandon(w *waiter, ctx context.Context) (error, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if w.done {
		return nil, false
	}
	err := &waitError{key: w.key, ctx: ctx.Err(), held: w.held, last: w.last}
	if err.last == nil {
		err.last = errors.New("no look completed")
	}
	k.observeWaitEndedLocked(w, HoldResult{Key: w.key, Err: err})
	w.done, w.gone = true, true
	if w.watch != nil {
		w.watch()
		w.watch = nil
	}
	if !w.looking {
		k.dequeueLocked(w)
	}
	k.giveBackIfLeftLocked(w)
	k.poke()
	return err, true
}

// takeWokenLocked moves the waiters whose store told of a release to the
// front of the looks.
func (k *keeper) takeWokenLocked(now time.Time) {
	k.wokenMu.Lock()
	woken := k.woken
	k.woken = nil
	for _, w := range woken {
		w.queued = false
	}
	k.wokenMu.Unlock()
	for _, w := range woken {
		if k.looks.Scheduled(w) {
			w.due = now
			k.looks.Set(w)
		}
	}
}

// startLookLocked starts one look at the keys whose first waiter is due,
// or will be within half its backoff (so that waits fall into step), at
// most maxBatch of them, unless a look is in flight or a renewal is due
// and waiting for a lane (looks yield to renewals).
func (k *keeper) startLookLocked(now time.Time) {
	if k.looking {
		return
	}
	if r, ok := k.dues.First(); ok && !now.Before(r.due) {
		return // renewals first: every lane is busy and one is due
	}
	w, ok := k.looks.First()
	if !ok || now.Before(w.due) {
		return
	}
	limit := k.lookLimitLocked()
	var batch []*waiter
	for len(batch) < limit {
		w, ok := k.looks.First()
		if !ok || w.due.Sub(now) > w.backoff/2 {
			break
		}
		k.looks.Pop()
		w.looking = true
		batch = append(batch, w)
	}
	// In key order, as HoldEach gives them: the Helds of a look make a
	// round that is renewed in one call, which on SQLite then rewrites
	// few pages of the table.
	slices.SortFunc(batch, func(a, b *waiter) int { return strings.Compare(a.key, b.key) })
	k.looking = true
	k.calls.Add(1)
	go k.look(batch, false)
}

// lookLimitLocked is how many keys the next look may take: few enough
// that, at the time per key the last looks took, the look holds the store
// (SQLite's one writer, a busy server) for at most a quarter of the
// shortest renewal interval, so that a start-up's looks never delay a
// renewal past its due time by much, and for at most an eighth of the
// TTL, so that its grants come long before their session's deadline
// (a session nothing renews yet, at start-up, is not renewed during the
// look); at most maxBatch, and firstLook before a look was timed.
func (k *keeper) lookLimitLocked() int {
	if _, ok := k.s.(batchStore); !ok {
		return unbatchedCalls
	}
	switch {
	case !k.timedLook:
		return firstLook
	case k.lookPerKey <= 0:
		return maxBatch
	}
	budget := time.Second
	if r, ok := k.dues.First(); ok {
		budget = min(budget, r.renew/4)
	}
	for _, sr := range k.sessions {
		if len(sr.renews) > 0 {
			budget = min(budget, least(sr.renews)/4)
		}
	}
	if ttl := k.grantTTL(); ttl > 0 {
		budget = min(budget, ttl/8)
	}
	return max(unbatchedCalls, min(maxBatch, int(budget/k.lookPerKey)))
}

// firstLook bounds the keys of a store's first look, before the time a
// key takes is known.
const firstLook = 1000

// acquireAll acquires keys through s: in batches when s can, else a few
// at once, telling got of each key's answer as it comes.
func acquireAll(ctx context.Context, s Store, keys []string, waited []time.Duration, got func(i int, r grantResult)) []grantResult {
	if b, ok := s.(batchStore); ok {
		return b.acquireMany(ctx, keys, waited)
	}
	out := make([]grantResult, len(keys))
	eachAtOnce(len(keys), func(i int) {
		out[i].g, out[i].err = s.Acquire(ctx, keys[i])
		got(i, out[i])
	})
	return out
}

// look tries to acquire the keys of batch for their waiters, bounded by
// lookTimeout but not by the waiters' contexts: a waiter that leaves does
// not cancel a write that may land (R17). own: it is a FailIfHeld's look
// of one key, beside the store's look in flight (lookNowLocked).
func (k *keeper) look(batch []*waiter, own bool) {
	defer k.calls.Done()
	keys := make([]string, len(batch))
	waited := make([]time.Duration, len(batch)) // how long each has waited: its place in line (R25)
	now := time.Now()
	for i, w := range batch {
		keys[i] = w.key
		if !w.cfg.failIfHeld && !w.cfg.many { // HoldEach's many keys would cost a write each
			waited[i] = max(now.Sub(w.started), time.Nanosecond)
		}
	}
	ctx, cancel := context.WithTimeout(k.ctx, lookTimeout)
	var answered []reading // when each key was answered, to measure a TTL the store does not state
	if storeTTL(k.s) == 0 {
		answered = make([]reading, len(batch))
	}
	start := k.sendReading()
	results := acquireAll(ctx, k.s, keys, waited, func(i int, r grantResult) {
		if answered != nil {
			answered[i] = readClocks()
		}
		k.lookAnswered(batch[i], r)
	})
	end := readClocks()
	starts := make([]reading, len(batch))
	renewed := make([]bool, len(batch)) // results[i] came from freshen's renewal
	for i := range batch {
		starts[i] = start
	}
	var short []int
	k.mu.Lock()
	for i, r := range results {
		if r.err != nil || batch[i].gaveBack {
			continue
		}
		if answered != nil {
			k.measureLocked(r.g, start, answeredAt(answered[i], end))
		}
		if r.sess == nil && k.short(batch[i].cfg, r.g, start) { // a session's Helds are renewed with it
			short = append(short, i)
		}
	}
	k.mu.Unlock()
	eachAtOnce(len(short), func(j int) { // one key's slow renewal must not hold up the others'
		i := short[j]
		results[i].g, starts[i], renewed[i] = k.freshen(ctx, results[i].g, start)
	})
	cancel()

	took := time.Since(start.mono)
	k.mu.Lock()
	if own {
		k.ownLooks--
	} else {
		k.looking = false
		k.lookPerKey = (k.lookPerKey + took/time.Duration(len(batch))) / 2
		k.timedLook = true
	}
	var watch []*waiter
	k.roundSize = len(batch)
	step := lookStep{at: readClocks(), spread: rand.Float64()}
	for i, w := range batch {
		w.looking = false
		if k.lookedLocked(w, results[i], starts[i], renewed[i], step) {
			watch = append(watch, w)
		}
		if c := results[i].claim; c != nil && !w.done {
			k.claimLocked(*c)
		}
	}
	k.roundSize = 0
	k.mu.Unlock()
	k.poke()
	for _, w := range watch {
		k.watch(w)
	}
}

// answeredAt is when a key's answer came: its own reading, if it has one,
// else the end of the call that answered every key.
func answeredAt(own, end reading) reading {
	if own.mono.IsZero() {
		return end
	}
	return own
}

// short reports whether g, acquired by a call that began at start, has
// less time left than a Held's plan needs, by the measure of its deadline
// (grantDeadline): a grant the store held already (R4c) may be short, so
// may one whose write was answered late, and so is one stamped by a clock
// stepped back during the call, or one of a store whose TTL is not known
// yet. A short grant is renewed at once (freshen): a renewal counts the
// whole TTL.
func (k *keeper) short(cfg holdConfig, g Grant, start reading) bool {
	if g.ExpiresAt.IsZero() {
		return false
	}
	ttl := k.grantTTL()
	renew, margin, err := cfg.plan(ttl)
	return err != nil || time.Until(grantDeadline(g, start, ttl, margin, false)) <= renew
}

// freshen renews a short grant g at once. It returns the grant to keep,
// when the call that made it was sent, and whether that was the renewal.
func (k *keeper) freshen(ctx context.Context, g Grant, start reading) (Grant, reading, bool) {
	sent := readClocks()
	next, err := k.s.Renew(ctx, g)
	if err != nil {
		return g, start, false // grantedLocked finds it too short and gives it back
	}
	answered := readClocks()
	k.mu.Lock()
	k.measureLocked(next, sent, answered)
	k.mu.Unlock()
	return next, sent, true
}

// lookedLocked handles one key's look: a grant goes to the key's first
// waiter still waiting (or back to the store if none is), a held key or a
// storage error schedules the next look, anything else answers the
// waiter. It reports whether w should start watching for releases.
func (k *keeper) lookedLocked(w *waiter, r grantResult, start reading, renewal bool, step lookStep) (watch bool) {
	gaveBack := w.gaveBack
	w.got, w.gaveBack = nil, false
	if k.stopped {
		return false // Close answered every waiter; a grant stays as a crash's would (R15)
	}
	if gaveBack {
		k.dequeueLocked(w) // it left, and its grant went back
		return false
	}
	if r.err == nil {
		delete(k.places, w.key) // taken: the grant used the place up
		k.grantedLocked(w, r.g, r.sess, start, renewal)
		return false
	}
	if errors.Is(r.err, ErrHeld) {
		k.placedLocked(w.key, r.placed)
	}
	if w.gone {
		k.dequeueLocked(w)
		return false
	}
	w.looked, w.last = true, r.err
	if errors.Is(r.err, ErrHeld) {
		w.held = r.err
	}
	if !w.waiting && retryable(r.err) && !w.cfg.failIfHeld {
		w.waiting, w.waitSince = true, k.observeWaitStart(w.key)
	}
	k.failWaitersBehindLocked(w, r.err)
	if !retryable(r.err) || w.cfg.failIfHeld {
		k.dequeueLocked(w)
		k.answerLocked(w, HoldResult{Key: w.key, Err: r.err})
		return false
	}
	k.rescheduleLocked(w, r.err, step)
	return !w.watched && errors.Is(r.err, ErrHeld)
}

// failWaitersBehindLocked answers the FailIfHeld waiters that queue
// behind w, the first waiter of its key, with err, what w's look found: a
// FailIfHeld Hold makes one look, and the first waiter's serves it.
func (k *keeper) failWaitersBehindLocked(w *waiter, err error) {
	for _, o := range slices.Clone(k.queues[w.key]) {
		if o != w && o.cfg.failIfHeld {
			k.dequeueLocked(o)
			k.answerLocked(o, HoldResult{Key: w.key, Err: err})
		}
	}
}

// retryLocked makes key's first waiter look again after wait.
func (k *keeper) retryLocked(key string, wait time.Duration) {
	if ws := k.queues[key]; len(ws) > 0 && !ws[0].looking {
		ws[0].due = time.Now().Add(wait)
		k.looks.Set(ws[0])
		k.startLocked()
	}
}

// planLocked returns how a Held of g is to be kept, and its deadline; g
// came from a call sent at sent, a renewal or an acquire. The deadline is
// zero for a grant that never expires.
func (k *keeper) planLocked(cfg holdConfig, g Grant, ss *storeSession, sent reading, renewal bool) (p holdPlan, deadline time.Time, err error) {
	if g.ExpiresAt.IsZero() {
		return holdPlan{}, time.Time{}, nil
	}
	if p.ttl = k.grantTTL(); p.ttl <= 0 {
		return holdPlan{}, time.Time{}, errUnmeasured
	}
	if p.renew, p.margin, err = cfg.plan(p.ttl); err != nil {
		return holdPlan{}, time.Time{}, err
	}
	if ss != nil { // the session's deadline, from its last renewal (R8, R20)
		return p, ss.renewedAt().Add(p.ttl - p.margin), nil
	}
	return p, grantDeadline(g, sent, p.ttl, p.margin, renewal), nil
}

// grantTTL is R8's T for k's store: the TTL it states, else the most its
// grants measured (measureLocked); 0 while none did.
func (k *keeper) grantTTL() time.Duration {
	if ttl := storeTTL(k.s); ttl > 0 {
		return ttl
	}
	return k.ttlSeen
}

// errUnmeasured is why a grant of a store that does not state its TTL
// cannot be planned: no call measured the TTL yet.
var errUnmeasured = errors.New("lease: the store's TTL is not measured yet")

// measureLocked learns the TTL of a store that does not state it from g,
// got by a call sent at sent and answered at answered. No measure exceeds
// the TTL (measureTTL), and a grant the store held already (R4c) measures
// less: the TTL learnt is the most measured.
func (k *keeper) measureLocked(g Grant, sent, answered reading) {
	if g.ExpiresAt.IsZero() || storeTTL(k.s) > 0 {
		return
	}
	if ttl, ok := measureTTL(g, sent, answered); ok && ttl > k.ttlSeen {
		k.ttlSeen = ttl
	}
}

// measureTTL is the TTL that g measures, got by a call sent at sent and
// answered at answered: ExpiresAt minus the wall clock when the answer
// came, which counts none of the call's time into it, less any step of
// the wall clock during the call (its elapsed time that the monotonic
// clock's does not match), wherever in the call the step fell, so that it
// never exceeds the TTL the store grants (R8) by one step of the clock
// the store stamps with. ok is false when the step exceeds the call's
// duration: nothing is learnt across a step; the grant counts as short,
// and its renewal at once (freshen) measures again.
func measureTTL(g Grant, sent, answered reading) (ttl time.Duration, ok bool) {
	took := answered.mono.Sub(sent.mono)
	step := (answered.wall.Sub(sent.wall) - took).Abs()
	if step > took {
		return 0, false
	}
	ttl = g.ExpiresAt.Sub(answered.wall) - step
	return ttl, ttl > 0
}

// lookStep is what the keys of one look count their next look from: the
// reading taken as the look ended, and one jitter for all of them.
type lookStep struct {
	at     reading
	spread float64 // in [0, 1): where in [backoff/2, backoff) the next look falls
}

// rescheduleLocked plans w's next look after a look that found err: when
// the holder's grant runs out, or after a growing backoff for an early
// release, whichever comes first; a watched key is looked at when the
// store tells of a release, and rarely otherwise. The keys of one look
// that wait alike stay in step (one reading, one jitter): their next look
// is again one range of keys, which a takeover writes in a few pages of
// SQLite's table rather than one page per key.
func (k *keeper) rescheduleLocked(w *waiter, err error, step lookStep) {
	wait := w.backoff/2 + time.Duration(step.spread*float64(w.backoff-w.backoff/2))
	if w.watched {
		wait = watchedPoll
	}
	if he := (*HeldError)(nil); errors.As(err, &he) && !he.ExpiresAt.IsZero() {
		wait = min(wait, max(he.ExpiresAt.Sub(step.at.wall), holdMinBackoff/2))
	}
	w.due = step.at.mono.Add(wait)
	w.backoff = min(2*w.backoff, holdMaxBackoff)
	k.looks.Set(w)
}

// watch asks the store to tell of releases of w's key, if it can, and
// looks once more after the watch began: a release before it raised no
// notice.
func (k *keeper) watch(w *waiter) {
	rw, ok := k.s.(releaseWatcher)
	if !ok {
		return
	}
	stop, err := rw.watchRelease(w.key, func() { k.woke(w) })
	if err != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if w.done {
		stop()
		return
	}
	w.watch, w.watched = stop, true
	if k.looks.Scheduled(w) {
		w.due = time.Now()
		k.looks.Set(w)
		k.poke()
	}
}

// observeWaitEndedLocked reports how w's wait ended, if it waited.
func (k *keeper) observeWaitEndedLocked(w *waiter, r HoldResult) {
	if !w.waiting || w.done {
		return
	}
	var g Grant
	if r.Held != nil {
		g = r.Held.Grant()
	}
	k.observeWaitEnd(w.key, w.waitSince, g, r.Err)
}

// woke is called by the store's watch when w's key may have become free.
// It never blocks on the keeper's mu, so the watch may call it anywhere.
func (k *keeper) woke(w *waiter) {
	k.wokenMu.Lock()
	if !w.queued {
		w.queued = true
		k.woken = append(k.woken, w)
	}
	k.wokenMu.Unlock()
	k.poke()
}

// waitError is why Hold gave up waiting: its context ended; the last look
// that completed found the key held or storage failing; and, if any look
// found the key held, that look's *HeldError. It matches all of them (so
// ErrHeld whenever the key was found held), in one line.
type waitError struct {
	key  string
	ctx  error // the context's error
	held error // the last look that found the key held; nil if none did
	last error // the last completed look's error
}

func (e *waitError) Error() string {
	msg := fmt.Sprintf("lease: gave up waiting for %q: %v", e.key, e.ctx)
	if e.held != nil && e.held != e.last {
		msg += "; " + oneLine(e.held)
	}
	return msg + "; last look: " + oneLine(e.last)
}

func (e *waitError) Unwrap() []error {
	if e.held != nil && e.held != e.last {
		return []error{e.ctx, e.held, e.last}
	}
	return []error{e.ctx, e.last}
}

// leaveTimeout bounds a call that clears places, which Close waits for.
const leaveTimeout = 5 * time.Second

// placedLocked notes whether the store has key's place for this store's
// waiters (R25), as a look that found the key held said.
func (k *keeper) placedLocked(key string, placed bool) {
	if placed {
		k.places[key] = true
	} else {
		delete(k.places, key)
	}
}

// leavePlaceLocked clears key's place, if the store has it for this
// store's waiters, now that none of them waits for the key: a place left
// behind would keep the key from everyone else while the store's session
// lives.
func (k *keeper) leavePlaceLocked(key string) {
	if !k.places[key] {
		return
	}
	delete(k.places, key)
	ps, ok := k.s.(placeStore)
	if !ok || k.stopped {
		return
	}
	k.leaving = append(k.leaving, key)
	k.placeWorkLocked(ps)
}

// claimLocked has the place c claimed for the key's waiters, after the
// look that found the key held.
func (k *keeper) claimLocked(c placeClaim) {
	ps, ok := k.s.(placeStore)
	if !ok || k.stopped {
		return
	}
	k.claiming = append(k.claiming, c)
	k.placeWorkLocked(ps)
}

// tookSince reports whether a Held of this store has had c's key at an
// epoch after c's: the place was used up. k.mu must be held.
func (k *keeper) tookSince(c placeClaim) bool {
	if h := k.helds[c.key]; h != nil && h.Grant().Epoch > c.epoch {
		return true
	}
	sp, ok := k.spent[c.key]
	return ok && sp.Epoch > c.epoch
}

// placeWorkLocked starts the goroutine that writes places, unless it runs.
func (k *keeper) placeWorkLocked(ps placeStore) {
	if !k.unplacing {
		k.unplacing = true
		k.calls.Add(1)
		go k.writePlaces(ps)
	}
}

// writePlaces claims the places in k.claiming and clears those in
// k.leaving until none is left. Close waits for it rather than cancel it:
// a waiter that gave up before Close clears its place, as a process that
// exits after a Hold timed out does.
func (k *keeper) writePlaces(ps placeStore) {
	defer k.calls.Done()
	for {
		k.mu.Lock()
		claims, leaving := k.claiming, k.leaving
		k.claiming, k.leaving = nil, nil
		if len(claims)+len(leaving) == 0 {
			k.unplacing = false
			k.mu.Unlock()
			return
		}
		k.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		for chunk := range slices.Chunk(claims, maxBatch) {
			k.claimed(chunk, ps.claimPlaces(ctx, chunk))
		}
		for chunk := range slices.Chunk(leaving, maxBatch) {
			ps.leavePlaces(ctx, chunk)
		}
		cancel()
	}
}

// claimed notes the places that landed: the key's waiters have them, or,
// if none waits any more, they are cleared next.
func (k *keeper) claimed(claims []placeClaim, landed []bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for j, c := range claims {
		switch {
		case !landed[j], k.tookSince(c):
			// Not written, or void: the key had a grant since (R25).
		case len(k.queues[c.key]) > 0 && !k.stopped:
			k.places[c.key] = true
		default:
			k.leaving = append(k.leaving, c.key)
		}
	}
}
