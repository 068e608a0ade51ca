package lease

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"
)

// lookTimeout bounds one round of looks for waiting Holds.
const lookTimeout = 30 * time.Second

// waiter is a Hold waiting for a held key. Its fields but woken are
// guarded by its keeper's mu.
type waiter struct {
	key     string
	ch      chan waitResult // receives the one answer
	due     time.Time       // next look
	backoff time.Duration   // the wait before the look after next
	watched bool            // the store tells of releases: no polling
	last    error           // the last completed look's error
	held    error           // the last look that found the key held, if any
	done    bool            // answered, or gone
	woken   atomic.Bool     // the store told of a release since the last look
}

type waitResult struct {
	g     Grant
	start time.Time // when the acquire that got g began
	err   error
}

// finish answers w once. The keeper's mu must be held.
func (w *waiter) finish(r waitResult) {
	if !w.done {
		w.done = true
		w.ch <- r
	}
}

// releaseWatcher is a store that can tell at once when a key may have
// become free (the local store, through the kernel).
type releaseWatcher interface {
	watchRelease(key string, wake func()) (stop func(), err error)
}

// wait waits for key, which the first attempt found held (or storage
// failing: first), until the keeper's loop acquires it or ctx ends.
func (k *keeper) wait(ctx context.Context, key string, first error) (Grant, time.Time, error) {
	w := &waiter{key: key, ch: make(chan waitResult, 1), last: first, backoff: holdMinBackoff}
	if errors.Is(first, ErrHeld) {
		w.held = first
	}
	stop := k.watch(w)
	defer stop()
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return Grant{}, time.Time{}, ErrClosed
	}
	k.rescheduleLocked(w, first, time.Now())
	if w.watched {
		w.due = time.Now() // one look after the watch began: a release before it raised no notice
	}
	k.waits[key] = append(k.waits[key], w)
	k.startLocked()
	k.pokeLocked()
	k.mu.Unlock()

	select {
	case r := <-w.ch:
		return r.g, r.start, r.err
	case <-ctx.Done():
	}
	k.mu.Lock()
	k.dropWaiterLocked(w)
	last, held := w.last, w.held
	k.mu.Unlock()
	select {
	case r := <-w.ch: // answered just before it was dropped
		return r.g, r.start, r.err
	default:
	}
	return Grant{}, time.Time{}, &waitError{key: key, ctx: ctx.Err(), held: held, last: last}
}

// watch asks the store to tell of releases of w's key, if it can.
func (k *keeper) watch(w *waiter) (stop func()) {
	rw, ok := k.s.(releaseWatcher)
	if !ok {
		return func() {}
	}
	stop, err := rw.watchRelease(w.key, func() {
		w.woken.Store(true)
		k.poke()
	})
	if err != nil {
		return func() {}
	}
	w.watched = true
	return stop
}

// poke makes the loop look again now, from any goroutine.
func (k *keeper) poke() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pokeLocked()
}

func (k *keeper) dropWaiterLocked(w *waiter) {
	w.done = true
	ws := slices.DeleteFunc(k.waits[w.key], func(o *waiter) bool { return o == w })
	if len(ws) == 0 {
		delete(k.waits, w.key)
	} else {
		k.waits[w.key] = ws
	}
	if len(k.waits) == 0 && k.cancelLook != nil {
		k.cancelLook() // nobody waits for what the look in flight would find
	}
	k.pokeIfIdleLocked()
}

// rescheduleLocked plans w's next look after a look that found err: when
// the holder's grant runs out, or after a growing backoff for an early
// release, whichever comes first; a watched key is looked at when the
// store tells of a release, and rarely otherwise.
func (k *keeper) rescheduleLocked(w *waiter, err error, now time.Time) {
	wait := jitter(w.backoff)
	if w.watched {
		wait = watchedPoll
	}
	if he := (*HeldError)(nil); errors.As(err, &he) && !he.ExpiresAt.IsZero() {
		wait = min(wait, max(time.Until(he.ExpiresAt), holdMinBackoff/2))
	}
	w.due = now.Add(wait)
	w.backoff = min(2*w.backoff, holdMaxBackoff)
}

// waitJobLocked returns a round of looks at every waited-for key that is
// due, or will be within half its backoff (so that waits fall into step),
// or nil if none is due yet.
func (k *keeper) waitJobLocked(now time.Time) func() {
	ready := func(w *waiter, window time.Duration) bool {
		return w.woken.Load() || w.due.Sub(now) <= window
	}
	due := false
	for _, ws := range k.waits {
		for _, w := range ws {
			due = due || ready(w, 0)
		}
	}
	if !due {
		return nil
	}
	var keys []string
	for key, ws := range k.waits {
		for _, w := range ws {
			window := w.backoff / 2
			if w.watched {
				window = 0
			}
			if ready(w, window) {
				w.woken.Store(false)
				keys = append(keys, key)
				break
			}
		}
	}
	slices.Sort(keys)
	return func() { k.lookBatch(keys) }
}

// acquireAll acquires keys through s: in batches when s can, else one at
// a time.
func acquireAll(ctx context.Context, s Store, keys []string) []grantResult {
	if b, ok := s.(batchStore); ok {
		return b.acquireMany(ctx, keys)
	}
	out := make([]grantResult, len(keys))
	for i, key := range keys {
		out[i].g, out[i].err = s.Acquire(ctx, key)
	}
	return out
}

// lookBatch tries to acquire keys for their waiters and answers each
// waiter whose key it got, or whose look failed for good. A key acquired
// after all its waiters left is released at once.
func (k *keeper) lookBatch(keys []string) {
	ctx, cancel := context.WithTimeout(context.Background(), lookTimeout)
	defer cancel()
	k.mu.Lock()
	k.cancelLook = cancel
	k.mu.Unlock()
	start := time.Now()
	results := acquireAll(ctx, k.s, keys)
	var orphans []Grant
	k.mu.Lock()
	k.cancelLook = nil
	now := time.Now()
	for i, key := range keys {
		r, ws := results[i], k.waits[key]
		switch {
		case r.err == nil && len(ws) == 0:
			orphans = append(orphans, r.g)
		case r.err == nil || !retryable(r.err):
			for _, w := range ws {
				w.finish(waitResult{g: r.g, start: start, err: r.err})
			}
			delete(k.waits, key)
		default:
			for _, w := range ws {
				w.last = r.err
				if errors.Is(r.err, ErrHeld) {
					w.held = r.err
				}
				k.rescheduleLocked(w, r.err, now)
			}
		}
	}
	k.mu.Unlock()
	for _, g := range orphans {
		_ = k.s.Release(ctx, g) // if it fails, the grant expires as a crashed holder's would
	}
}
