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
// only the end of a session touches each of its Helds, once.

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
	helds    map[*Held]struct{}    // its live Helds
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
			helds:   make(map[*Held]struct{}),
			margins: make(map[time.Duration]int),
			renews:  make(map[time.Duration]int),
			retry:   max(h.renew/8, time.Millisecond),
		}
		k.sessions[h.sess] = sr
	}
	sr.helds[h] = struct{}{}
	sr.margins[h.margin]++
	sr.renews[h.renew]++
	sr.due = earliest(sr.due, h.sess.renewedAt().Add(h.renew))
	h.sr = sr
}

// leaveSessionLocked takes h out of its session's round.
func (k *keeper) leaveSessionLocked(h *Held) {
	sr := h.sr
	if sr == nil {
		return
	}
	h.sr = nil
	delete(sr.helds, h)
	uncount(sr.margins, h.margin)
	uncount(sr.renews, h.renew)
	if len(sr.helds) == 0 && !sr.renewing {
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
			for h := range sr.helds {
				if h.margin == margin {
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
		if sr.renewing || len(sr.helds) == 0 || now.Before(sr.due) {
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
	if len(sr.helds) == 0 && k.sessions[sr.ss] == sr {
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

// endSessionLocked ends every Held of ss with cause, which matches ErrLost.
func (k *keeper) endSessionLocked(ss *storeSession, cause error) {
	sr := k.sessions[ss]
	if sr == nil {
		return
	}
	loss := LossTaken
	if errors.Is(cause, errSessionLapsed) {
		loss = LossDeadline
	}
	helds := make([]*Held, 0, len(sr.helds))
	for h := range sr.helds {
		helds = append(helds, h)
	}
	slices.SortFunc(helds, byKey)
	for _, h := range helds {
		g := h.Grant()
		k.endLocked(h, fmt.Errorf("%w: %q epoch %d: %w", ErrLost, g.Key, g.Epoch, quoted{cause}), true)
		k.observeLost(g, loss)
	}
	if !sr.renewing {
		delete(k.sessions, ss)
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
