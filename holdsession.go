package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// This file keeps the Helds whose keys are attached to a session of their
// store (R18–R20). They are not renewed key by key: the keeper renews the
// session, once per period whatever the number of keys, and a Held's
// deadline is the session's (the time its last renewal was sent, plus T)
// less the Held's own margin (R8). A renewal or a deadline costs O(1);
// only the end of a session touches each of its Helds, once, in the
// order they joined it: that is about the order they were made in, and
// so in memory, which makes ending 100,000 of them several times cheaper
// than visiting them in a map's order.

// sessionStore is a store that keeps Helds through sessions (the
// DocumentStore over a driver that states Sessions).
type sessionStore interface {
	// renewSession renews ss while every Held that counts on margin
	// may still be working (R19); an error matching ErrLost means ss is
	// over, and its store has told the keeper (keeperSlot.sessionEnded).
	renewSession(ctx context.Context, ss *storeSession, margin time.Duration) error
}

// sessionRound is the Helds of one session.
type sessionRound struct {
	ss       *storeSession
	ttl      time.Duration         // R8's T for its Helds
	helds    []*Held               // its live Helds, in the order they joined; nil where one left
	live     int                   // how many of helds are not nil
	margins  map[time.Duration]int // how many of them have each safety margin
	renews   map[time.Duration]int // and each renewal interval
	due      time.Time             // the next renewal, monotonic
	renewing bool                  // a renewal is in flight
	retry    time.Duration         // the wait before the next retry of a failed renewal
	renewErr error                 // the last failed renewal's error, nil after a success
}

// deadline is when the Helds of sr with margin must stop working, unless
// a renewal succeeds first.
func (sr *sessionRound) deadline(margin time.Duration) time.Time {
	return sr.ss.renewedAt().Add(sr.ttl - margin)
}

// least and most return the smallest and largest duration counted in m.
func least(m map[time.Duration]int) time.Duration {
	first := true
	var d time.Duration
	for k := range m {
		if first || k < d {
			d, first = k, false
		}
	}
	return d
}

func most(m map[time.Duration]int) time.Duration {
	var d time.Duration
	for k := range m {
		d = max(d, k)
	}
	return d
}

// joinSessionLocked adds h, a new Held of a grant attached to h.sess, to
// its session's round.
func (k *keeper) joinSessionLocked(h *Held) {
	sr := k.sessions[h.sess]
	if sr == nil {
		sr = &sessionRound{
			ss: h.sess, ttl: h.ttl, due: h.sess.renewedAt().Add(h.renew),
			margins: make(map[time.Duration]int),
			renews:  make(map[time.Duration]int),
			retry:   max(h.renew/8, time.Millisecond),
		}
		k.sessions[h.sess] = sr
	}
	if sr.live < len(sr.helds)/2 {
		sr.compact()
	}
	h.sr, h.slot = sr, len(sr.helds)
	sr.helds = append(sr.helds, h)
	sr.live++
	sr.margins[h.margin]++
	sr.renews[h.renew]++
	sr.due = earliest(sr.due, h.sess.renewedAt().Add(h.renew))
}

// compact drops the places of the Helds that left sr, keeping the order
// of the others. Only a join compacts, never a leave: a leave may come
// while sr.helds is being walked.
func (sr *sessionRound) compact() {
	live := sr.helds[:0]
	for _, h := range sr.helds {
		if h != nil {
			h.slot = len(live)
			live = append(live, h)
		}
	}
	clear(sr.helds[len(live):])
	sr.helds = live
}

// leaveSessionLocked takes h out of its session's round.
func (k *keeper) leaveSessionLocked(h *Held) {
	sr := h.sr
	if sr == nil {
		return
	}
	h.sr = nil
	sr.helds[h.slot] = nil
	sr.live--
	uncount(sr.margins, h.margin)
	uncount(sr.renews, h.renew)
	if sr.live == 0 && !sr.renewing {
		delete(k.sessions, sr.ss)
	}
}

func uncount(m map[time.Duration]int, d time.Duration) {
	if m[d]--; m[d] <= 0 {
		delete(m, d)
	}
}

// expireSessionsLocked ends the Helds whose session deadline has come:
// its renewals kept failing until the session's expiry minus their margin.
func (k *keeper) expireSessionsLocked(now time.Time) {
	if mutant == mutantNoDeadline {
		return
	}
	for _, sr := range k.sessions {
		for margin := range sr.margins {
			if now.Before(sr.deadline(margin)) {
				continue
			}
			for _, h := range sr.helds {
				if h != nil && h.margin == margin {
					k.expireHeldLocked(h)
				}
			}
		}
	}
}

// startSessionRenewalsLocked starts the renewal of every session whose
// Helds are due: one call each, whatever the number of keys.
func (k *keeper) startSessionRenewalsLocked(now time.Time) {
	for _, sr := range k.sessions {
		if sr.renewing || sr.live == 0 || now.Before(sr.due) {
			continue
		}
		sr.renewing = true
		k.calls.Add(1)
		go k.renewSession(sr, least(sr.margins), sr.deadline(most(sr.margins)))
	}
}

// renewSession renews sr's session, bounded by half the time to the
// earliest deadline of its Helds, so that a hanging call leaves time to
// try again; margin is the least of its Helds' margins, the one the
// session must still be renewable for (R19).
func (k *keeper) renewSession(sr *sessionRound, margin time.Duration, deadline time.Time) {
	defer k.calls.Done()
	bound := max(time.Until(deadline)/2, time.Millisecond)
	ctx, cancel := context.WithTimeout(k.ctx, bound)
	err := k.s.(sessionStore).renewSession(ctx, sr.ss, margin)
	cancel()

	k.mu.Lock()
	defer k.mu.Unlock()
	sr.renewing = false
	k.poke()
	switch {
	case k.stopped:
	case err == nil:
		sr.renewErr, sr.retry = nil, max(least(sr.renews)/8, time.Millisecond)
		sr.due = sr.ss.renewedAt().Add(least(sr.renews))
	case lossCause(err) != nil:
		k.endSessionLocked(sr.ss, err) // the store has ended them already, unless it was closed
	default: // storage failing: retry sooner; the deadline stops the work in time
		sr.renewErr = err
		sr.due = time.Now().Add(jitter(sr.retry))
		sr.retry = max(min(2*sr.retry, least(sr.renews)/4), time.Millisecond)
	}
	if sr.live == 0 && k.sessions[sr.ss] == sr {
		delete(k.sessions, sr.ss)
	}
}

// sessionEnded ends every Held of ss, which its store found over (R19):
// lapsed, ended by another store, or ended clean (R17: before anything
// frees their keys).
func (ks *keeperSlot) sessionEnded(ss *storeSession, cause error) {
	k := ks.current()
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.endSessionLocked(ss, cause)
}

// endSessionLocked ends every Held of ss together, and drops its round
// whole: with cause, which matches ErrLost, when ss is over (R19); given
// up when cause is nil, as ReleaseAll is about to end ss (R22). From then
// on no grant attached to ss makes a Held (grantedLocked), such as one a
// look in flight got: that mark on ss stands for the spent grant of each
// of its keys.
func (k *keeper) endSessionLocked(ss *storeSession, cause error) {
	ss.heldsEnded.Store(true)
	sr := k.sessions[ss]
	if sr == nil {
		return
	}
	now := time.Now()
	whole := len(k.helds) == sr.live
	if whole {
		clear(k.helds) // every live Held of the store is of ss: one clear, not a delete per key
	}
	if cause == nil {
		for _, h := range sr.helds {
			if h != nil {
				k.endWithSessionLocked(h, nil, false, now, whole)
			}
		}
	} else {
		loss := LossTaken
		if errors.Is(cause, errSessionLapsed) {
			loss = LossDeadline
		}
		helds := slices.DeleteFunc(slices.Clone(sr.helds), func(h *Held) bool { return h == nil })
		slices.SortFunc(helds, byKey)
		for _, h := range helds {
			k.endWithSessionLocked(h, cause, true, now, whole)
			k.observeLost(h.Grant(), loss)
		}
	}
	sr.helds, sr.live = nil, 0
	clear(sr.margins)
	clear(sr.renews)
	if !sr.renewing {
		delete(k.sessions, ss)
	}
	k.poke()
}

// endWithSessionLocked ends h, a Held of a session whose Helds all end
// now, as endLocked would, at a constant cost: its cause (why; nil: given
// up) is formatted only if read, the caller drops the session's round
// whole (and the store's Helds, when they were all of it: cleared) and
// marks the session rather than each key's spent grant, and the key's
// waiters, if any, may look.
func (k *keeper) endWithSessionLocked(h *Held, why error, loss bool, now time.Time, cleared bool) {
	h.sr = nil // its round goes whole
	k.leaveLocked(h)
	if !h.end(&endedError{key: h.key, epoch: h.Grant().Epoch, why: why}, loss) {
		return
	}
	if !cleared && k.helds[h.key] == h {
		delete(k.helds, h.key)
	}
	if len(k.queues) > 0 {
		k.promoteLocked(h.key, now)
	}
}

// sessionOverError says why a session is over for its store (R19). It
// matches ErrLost, and why.
type sessionOverError struct {
	id  string
	why error // errSessionLapsed, errSessionTaken or errSessionEndedClean
}

func (e *sessionOverError) Error() string        { return fmt.Sprintf("lease: session %s %v", e.id, e.why) }
func (e *sessionOverError) Is(target error) bool { return target == ErrLost }
func (e *sessionOverError) Unwrap() error        { return e.why }

// Why a session is over.
var (
	errSessionLapsed     = errors.New("lapsed: it was not renewed before its deadline")
	errSessionTaken      = errors.New("was ended by another store")
	errSessionEndedClean = errors.New("was ended clean")
)

// sessionOver is the error of session id being over for why.
func sessionOver(id string, why error) error { return &sessionOverError{id: id, why: why} }
