package lease

import (
	"math"
	"time"
)

// acquireInput is everything R4 looks at to decide an acquire.
type acquireInput struct {
	Stored  *Record      // the stored record; nil when none was ever written
	Mine    bool         // this instance holds Stored's owner and epoch in its table (R4c/d)
	Expired bool         // Stored's holder is past its time: expired(Stored.ExpiresAt, now) for documents (judgeSession for a session-attached key), "flock free" for the local store
	Clean   bool         // Stored's session was ended clean (R22): the key is free as if released
	Place   placeVerdict // what the key's place says (R25)
	Owner   string       // this store's owner
	Expires time.Time
}

// acquireOutcome is decide's answer: reuse the held grant, write Next, or fail.
type acquireOutcome struct {
	Reuse bool  // R4c: return the grant this instance already holds, write nothing
	Next  Grant // the grant to write and return when !Reuse and Err == nil
	Err   error // *HeldError or ErrEpochExhausted
}

// decide applies R2 and R4: the one rule every store uses to decide an
// acquire. It does no I/O.
func decide(in acquireInput) acquireOutcome {
	rec := in.Stored
	if rec == nil { // R4a
		return acquireOutcome{Next: Grant{Owner: in.Owner, Epoch: 1, ExpiresAt: in.Expires}}
	}
	unclean := false
	switch {
	case rec.Released, in.Clean: // R4b; R21: a key of a session ended clean
	case in.Mine && !in.Expired: // R4c
		return acquireOutcome{Reuse: true}
	case in.Mine: // R4d: our own lease ran out; nobody else was harmed
	case !in.Expired: // R4e
		return acquireOutcome{Err: heldBy(*rec)}
	default: // R4f: the holder died or stalled without releasing
		unclean = mutant != mutantDropUnclean
	}
	if in.Place.Other && mutant != mutantBargePlace { // R25: a free key goes to the owner of its place
		return acquireOutcome{Err: &HeldError{Key: rec.Key, Owner: in.Place.Owner, Epoch: rec.Epoch, ExpiresAt: in.Place.Until}}
	}
	if rec.Epoch == math.MaxUint64 {
		return acquireOutcome{Err: ErrEpochExhausted}
	}
	next := rec.Epoch + 1
	if mutant == mutantKeepEpoch {
		next = rec.Epoch
	}
	return acquireOutcome{Next: Grant{Owner: in.Owner, Epoch: next, ExpiresAt: in.Expires, PreviousUnclean: unclean}}
}

// sessionVerdict is what a session says of a key attached to it at now
// (R20–R22).
type sessionVerdict struct {
	Expired bool // the key's holder is gone: its session expired or ended
	Clean   bool // its session was ended clean: the key is free as if released (R22)
	Kill    bool // its session is live past its expiry: a taker ends it first (R21)
}

// judgeSession applies R20–R22 to a key attached to a session in state
// st that expires at exp. It does no I/O.
func judgeSession(st SessionState, exp, now time.Time) sessionVerdict {
	switch st {
	case SessionEndedClean:
		return sessionVerdict{Expired: true, Clean: true}
	case SessionEndedUnclean:
		return sessionVerdict{Expired: true}
	}
	if expired(exp, now) {
		return sessionVerdict{Expired: true, Kill: true}
	}
	return sessionVerdict{}
}

// expired reports whether a lease that ends at exp is over at now (R4, R6):
// the end instant itself belongs to the next holder.
func expired(exp, now time.Time) bool {
	if mutant == mutantEarly {
		now = now.Add(time.Millisecond)
	}
	return !now.Before(exp)
}

// live reports whether rec names a holder that may still be working at now.
func live(rec Record, now time.Time) bool {
	return !rec.Released && !expired(rec.ExpiresAt, now)
}

// placeVerdict is what a key's place says of an acquire by this store
// (R25).
type placeVerdict struct {
	Other bool      // a live place of another waiter, or a hand-off to another owner: only it may take the key
	Mine  bool      // this store's live place: its waiter's, or a hand-off to its owner
	Owner string    // Other's owner
	Until time.Time // when Other ends at the latest: a hand-off's bound; zero for a waiter's place
}

// judgePlace applies R25 to p, the place of a key whose record is at
// epoch, for a store of owner whose live session is mine ("" if none), at
// now. sessionLive says whether p's session, when p names one, is live.
// A place is for the next grant only: one taken at another epoch is void.
// It does no I/O.
func judgePlace(p place, epoch uint64, owner, mine string, sessionLive bool, now time.Time) placeVerdict {
	switch {
	case p.version == 0, p.cleared, p.epoch != epoch:
		return placeVerdict{}
	case p.handoff():
		if expired(p.at, now) {
			return placeVerdict{} // the named owner did not come: the key is free (Handoff)
		}
		if p.owner == owner {
			return placeVerdict{Mine: true}
		}
		return placeVerdict{Other: true, Owner: p.owner, Until: p.at}
	case !sessionLive:
		return placeVerdict{} // its waiter is gone with its session
	case p.owner == owner && p.session == mine:
		return placeVerdict{Mine: true}
	}
	return placeVerdict{Other: true, Owner: p.owner}
}

// outranks reports whether a waiter that began waiting at since takes
// the place p, which says v, from whoever has it (R25): a void place is
// anybody's, a hand-off is nobody's but its owner's, and of two waiters
// the one that began waiting first has it.
func outranks(p place, v placeVerdict, since time.Time) bool {
	switch {
	case v.Mine:
		return false // ours already
	case !v.Other:
		return true
	case p.handoff():
		return false
	}
	return since.Before(p.at)
}
