package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// This file is the one home of R16 and R17 in the keeper: a grant reaches
// a Held only through grantedLocked, and every way a grant is given up,
// a Held's or one nobody holds, goes through the functions below, which
// end the grant's Held before the write that frees the key (R17).
//
// R16, one Held per key and store: enqueue answers a FailIfHeld Hold of a
// key that a Held of the store holds, or whose grant a write in flight is
// giving up (settling: the store holds it until the write lands), at once
// (ownHeldError); a look's
// grant goes to its key's first waiter (grantedLocked), never to a second
// Held of the key nor as a grant a Held had already (spentLocked: the
// key's spent grant, or any grant attached to a session whose Helds
// ended together); the FailIfHeld waiters behind a new Held are answered
// (failQueuedLocked).
//
// R17, the ways a grant is given up:
//   - Held.Release (release): giveUp ends the Held, the store's Release
//     writes, and settled reports the write;
//   - a bare Release or ReleaseAll on the store: the store calls
//     keeperSlot.giveUp (giveUpGrants) before its write; ReleaseAll of a
//     session calls keeperSlot.giveUpSession, which ends every Held of
//     the session in one pass (endSessionLocked, holdsession.go);
//   - a grant no Held will have (its waiter left, its Hold failed, a Held
//     has the key already, or a Held had that grant): giveBackLocked
//     releases it with a context of its own, as soon as the look's answer
//     comes (grantedLocked, lookAnswered, giveBackIfLeftLocked);
//   - Helds that HoldEach got but its caller no longer wanted:
//     giveBackUnyielded releases them through Held.Release.
//
// Close gives nothing up (R15): keeper.close ends every Held and leaves
// the grants to expire. A Held that ends for any reason goes through
// endLocked, or with all of its session's (endWithSessionLocked); while
// a write that gives a key's grant up is in flight
// (settling), the key's waiters do not look.

// ownHeldError is the *HeldError a FailIfHeld Hold gets for a key that a
// Held of its own store holds (R16).
func ownHeldError(g Grant) error {
	return &HeldError{Key: g.Key, Owner: g.Owner, Epoch: g.Epoch, ExpiresAt: g.ExpiresAt}
}

// grantedLocked hands g, which a look for w got, to the first waiter of
// its key that still waits, or gives it back. A grant that a Held of this
// store had already (the store kept it after a failed release, R4c) is
// never handed on: each Held gets a grant of its own (R16).
func (k *keeper) grantedLocked(w *waiter, g Grant, ss *storeSession, start reading, renewal bool) {
	key := w.key
	if w.gone {
		k.dequeueLocked(w)
	}
	if k.spentLocked(g, ss) {
		k.giveBackLocked(g)
		k.retryLocked(key, holdMinBackoff)
		return
	}
	if h := k.helds[key]; h != nil {
		if hg := h.Grant(); hg.Epoch != g.Epoch || hg.Owner != g.Owner {
			k.giveBackLocked(g) // never ours to keep: a live Held has the key
		}
		return // the live Held's own grant, found again (R4c): never give it up
	}
	ws := k.queues[key]
	if len(ws) == 0 {
		if mutant != mutantOrphan {
			k.giveBackLocked(g) // nobody waits for it any more (R17)
		}
		return
	}
	to := ws[0]
	p, deadline, err := k.planLocked(to.cfg, g, ss, start, renewal)
	switch {
	case errors.Is(err, errUnmeasured), err == nil && !deadline.IsZero() && !time.Now().Before(deadline):
		// The grant came too late to be worth anything (its renewal at
		// once failed), or the wall clock stepped during every call that
		// could measure its store's TTL: it goes back rather than stay
		// held by nobody (R17), and the waiter looks again once it is
		// given back (settled), for a new epoch, after a growing backoff:
		// a store whose renewals keep failing must not be asked at the
		// speed of its calls.
		to.notBefore = time.Now().Add(jitter(to.backoff))
		to.backoff = min(2*to.backoff, holdMaxBackoff)
		k.giveBackLocked(g)
	case err != nil:
		k.dequeueLocked(to)
		k.giveBackLocked(g)
		k.answerLocked(to, HoldResult{Key: key, Err: err})
	default:
		h := k.newHeldLocked(to, g, ss, start, renewal, p) // first: the next waiter must see the key held
		k.dequeueLocked(to)
		k.answerLocked(to, HoldResult{Key: key, Held: h})
		k.failQueuedLocked(key, h)
	}
}

// spentLocked reports whether g, attached to ss (nil: kept per key), is
// a grant that a Held of this store had already: its key's spent grant or
// an older one, or one of a session whose Helds all ended (heldsEnded),
// which stands for the spent grant of each of its keys.
func (k *keeper) spentLocked(g Grant, ss *storeSession) bool {
	if ss != nil && ss.heldsEnded.Load() {
		return true
	}
	sp, ok := k.spent[g.Key]
	return ok && sp.Owner == g.Owner && g.Epoch <= sp.Epoch
}

// failQueuedLocked answers the FailIfHeld waiters of key now that h holds it.
func (k *keeper) failQueuedLocked(key string, h *Held) {
	for _, o := range slices.Clone(k.queues[key]) {
		if o.cfg.failIfHeld && !o.looking {
			k.dequeueLocked(o)
			k.answerLocked(o, HoldResult{Key: key, Err: ownHeldError(h.Grant())})
		}
	}
}

// endLocked ends h with cause (loss: the lease was lost rather than given
// up), takes it off the loop, and lets the key's next waiter look once no
// write giving the grant up is in flight.
func (k *keeper) endLocked(h *Held, cause error, loss bool) {
	k.leaveLocked(h)
	if !h.end(cause, loss) {
		return
	}
	if k.helds[h.key] == h {
		delete(k.helds, h.key)
	}
	k.spent[h.key] = h.Grant()
	k.promoteLocked(h.key, time.Now())
	k.poke()
}

// lose ends h because the lease was lost.
func (k *keeper) lose(h *Held, cause error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.endLocked(h, cause, true)
}

// releasedCause is why a Held ends when its grant is given up.
func releasedCause(g Grant) error { return &endedError{key: g.Key, epoch: g.Epoch} }

// endedError is why a Held ended: its grant was given up (why is nil), or
// why, which matches ErrLost. It matches ErrLost and unwraps to why. Its
// text is made when it is read, not when the Held ends: a session's end
// ends every Held of it at once, and most causes are never read.
type endedError struct {
	key   string
	epoch uint64
	why   error
}

func (e *endedError) Error() string {
	if e.why == nil {
		return fmt.Sprintf("%v: %q epoch %d was released", ErrLost, e.key, e.epoch)
	}
	return fmt.Sprintf("%v: %q epoch %d: %s", ErrLost, e.key, e.epoch, oneLine(e.why))
}

func (e *endedError) Is(target error) bool { return target == ErrLost }
func (e *endedError) Unwrap() error        { return e.why }

// closedCause is why a Held ends when its store closes (R15).
func closedCause(g Grant) error {
	return fmt.Errorf("%w: %q epoch %d: %w", ErrLost, g.Key, g.Epoch, ErrClosed)
}

// release gives h's grant up for Held.Release: it ends h, then writes
// the release, then lets the key's waiters look (R7, R17).
func (k *keeper) release(ctx context.Context, h *Held) error {
	g := k.giveUp(h)
	err := k.s.Release(ctx, g)
	k.settled(g, err)
	return err
}

// handoff is release, reserving the key for owner (R25).
func (k *keeper) handoff(ctx context.Context, h *Held, hs handoffStore, owner string) error {
	g := k.giveUp(h)
	err := hs.handoff(ctx, g, owner)
	k.settled(g, err)
	return err
}

// giveUp ends h before Release writes (R17) and returns the grant to
// release. The key's waiters wait until settled reports the write.
func (k *keeper) giveUp(h *Held) Grant {
	k.mu.Lock()
	defer k.mu.Unlock()
	g := h.Grant()
	k.settleLocked(g)
	k.endLocked(h, releasedCause(g), false)
	return g
}

// settle is the writes in flight that give a key's grant up: how many,
// and the newest grant they give up, which the store holds until they
// land.
type settle struct {
	n int
	g Grant
}

// settleLocked counts a write giving g up, until settled reports it.
func (k *keeper) settleLocked(g Grant) {
	st := k.settling[g.Key]
	if st.n++; st.n == 1 || g.Epoch > st.g.Epoch {
		st.g = g
	}
	k.settling[g.Key] = st
}

// settled reports the outcome of a write that gave g up, begun after
// giveUp: the key's next waiter may now look.
func (k *keeper) settled(g Grant, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if st := k.settling[g.Key]; st.n > 1 {
		st.n--
		k.settling[g.Key] = st
	} else {
		delete(k.settling, g.Key)
	}
	if err == nil && k.spent[g.Key] == g {
		delete(k.spent, g.Key) // released: the next acquire gets a new epoch
	}
	k.promoteLocked(g.Key, time.Now())
	k.poke()
}

// giveUp ends the Helds of grants the store is about to give up by itself
// (a bare Release, ReleaseAll), before their writes (R17).
func (ks *keeperSlot) giveUp(gs ...Grant) {
	if k := ks.current(); k != nil {
		k.giveUpGrants(gs)
	}
}

// giveUpSession ends every Held of ss, whose keys the store is about to
// free with one write (ReleaseAll, R22), before that write (R17).
func (ks *keeperSlot) giveUpSession(ss *storeSession) {
	k := ks.current()
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.endSessionLocked(ss, nil)
}

// giveUpGrants ends the Helds of gs, which the store is about to give up.
func (k *keeper) giveUpGrants(gs []Grant) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, g := range gs {
		if h := k.helds[g.Key]; h != nil {
			if hg := h.Grant(); hg.Epoch == g.Epoch && hg.Owner == g.Owner {
				k.endLocked(h, releasedCause(g), false)
				continue
			}
		}
		// A look in flight may have taken g for a waiter: it must not
		// hand g on once g is being given up.
		if sp, ok := k.spent[g.Key]; !ok || sp.Epoch < g.Epoch {
			k.spent[g.Key] = g
		}
	}
}

// lookAnswered takes one key's answer as it comes, before the look's
// other keys are answered: a grant whose waiter has left goes back at once
// (giveBackIfLeftLocked); else the waiter keeps it until the look ends, in
// case it leaves meanwhile.
func (k *keeper) lookAnswered(w *waiter, r grantResult) {
	if r.err != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	w.got = &r.g
	k.giveBackIfLeftLocked(w)
}

// giveBackIfLeftLocked gives back the grant that w's look in flight got
// when w has left and nothing else of the store wants the key, rather than
// once the rest of the look's keys are answered: until then the key would
// be held by nobody (R17).
func (k *keeper) giveBackIfLeftLocked(w *waiter) {
	if w.got == nil || !w.gone || w.gaveBack || k.stopped || k.helds[w.key] != nil ||
		slices.ContainsFunc(k.queues[w.key], func(o *waiter) bool { return !o.gone }) {
		return // the look's answer decides, as for any other key
	}
	k.giveBackLocked(*w.got)
	w.gaveBack = true
}

// giveBackTries bounds how often a grant nobody waits for is released.
const giveBackTries = 3

// giveBackLocked releases g, which no Held has, with a context of its
// own, a few times if it must (R17). If it cannot, g expires as a crashed
// holder's would. The key's waiters wait until it is done.
func (k *keeper) giveBackLocked(g Grant) {
	k.settleLocked(g)
	k.calls.Add(1)
	go func() {
		defer k.calls.Done()
		var err error
		for try := range giveBackTries {
			ctx, cancel := context.WithTimeout(k.ctx, releaseTimeout)
			err = k.s.Release(ctx, g)
			cancel()
			if err == nil || errors.Is(err, ErrLost) || errors.Is(err, ErrClosed) || k.ctx.Err() != nil {
				break // given back, lost already, or never to be given back by this store (R15)
			}
			if pause(k.ctx, try) != nil {
				break
			}
		}
		if err != nil && !errors.Is(err, ErrLost) && !errors.Is(err, ErrClosed) && k.ctx.Err() == nil {
			storeLogger(k.s).Warn("lease: could not give back a grant nobody waits for; it will expire",
				"key", g.Key, "epoch", g.Epoch, "err", err)
		}
		k.settled(g, err)
	}()
}

// giveBackUnyielded releases the Helds that HoldEach got but its caller
// no longer wanted.
func giveBackUnyielded(ch chan HoldResult) {
	for {
		select {
		case r := <-ch:
			if r.Held != nil {
				ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
				r.Held.Release(ctx) // if it fails, the grant expires as a crashed holder's would
				cancel()
			}
		default:
			return
		}
	}
}
