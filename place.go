package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// This file is fair waiting and hand-off in the DocumentStore (R25). A key
// may have a place: a record of its own beside the key's, under the
// reserved key placePrefix + key (R1 forbids '!', so no user key is one),
// naming who the key goes to when it is next free. A waiter that finds the
// key held takes the place unless a waiter that began waiting earlier has
// it; Held.Handoff writes a place for the owner it names. An acquire of a
// free key whose place is live and another's fails as if the key were
// held (decide), so the key goes to the longest waiter, not to whoever
// looks first.
//
// A place dies without a write: it is for the next grant only (it names
// the key's epoch when it was taken); a waiter's dies with the waiter's
// session (R18–R22), so a crashed waiter stalls nobody once its session
// has expired; a hand-off's ends at its bound. A waiter that gives up
// clears its place (leavePlaces). Places are kept only over a driver with
// sessions: its waiters have a session for their places to die with.

// placePrefix begins the key of every place record.
const placePrefix = "!next!"

// placeKey is the key of key's place record.
func placeKey(key string) string { return placePrefix + key }

// isPlaceKey reports whether a stored key is a place record's, which
// listings skip.
func isPlaceKey(key string) bool { return strings.HasPrefix(key, placePrefix) }

// place is a key's place record, as it is stored in a Record: Owner is
// the place's owner, Session the waiter's session ("" for a hand-off),
// Epoch the key's epoch when the place was taken, ExpiresAt a waiter's
// start (since) or a hand-off's end, Released a place given up.
type place struct {
	owner   string
	session string    // the waiter's session: the place dies with it; "" for a hand-off
	epoch   uint64    // the key's epoch when the place was taken: it is for the next grant only
	at      time.Time // a waiter's: when it began waiting; a hand-off's: when it ends
	cleared bool      // given up by its waiter
	version uint64    // the record's version; 0: no record
}

// handoff reports whether p was written by Held.Handoff.
func (p place) handoff() bool { return p.session == "" }

func placeOf(rec *Record, version uint64) place {
	if rec == nil {
		return place{}
	}
	return place{owner: rec.Owner, session: rec.Session, epoch: rec.Epoch, at: rec.ExpiresAt, cleared: rec.Released, version: version}
}

// record is p stored under key's place key.
func (p place) record(key string) Record {
	return Record{Key: placeKey(key), Owner: p.owner, Epoch: p.epoch, ExpiresAt: p.at, Released: p.cleared, Session: p.session}
}

// precondition is the compare-and-swap that replaces p.
func (p place) precondition() Precondition {
	return Precondition{Absent: p.version == 0, Version: p.version}
}

// placesOn reports whether the store keeps places (R25).
func (s *DocumentStore) placesOn() bool { return s.sessionsOn() }

// readPlace reads key's place record; the zero place when none exists.
// A record that no store could have written fails closed (R10).
func (s *DocumentStore) readPlace(ctx context.Context, op, key string) (place, error) {
	rec, version, err := s.get(ctx, placeKey(key))
	return s.placeResult(op, key, rec, version, err)
}

// placeResult checks a place record that Get or GetMany returned.
func (s *DocumentStore) placeResult(op, key string, rec Record, version uint64, err error) (place, error) {
	switch {
	case errors.Is(err, ErrNotFound):
		return place{}, nil
	case err == nil:
		err = checkRecord(rec, placeKey(key))
	}
	if err != nil {
		return place{}, &StorageError{Op: op, Key: key, Err: fmt.Errorf("its place: %w", err)}
	}
	return placeOf(&rec, version), nil
}

// readWithPlace reads key's record and, when the store keeps places and
// the record exists, its place: in one round trip where the driver can.
func (s *DocumentStore) readWithPlace(ctx context.Context, op, key string) (*Record, uint64, place, error) {
	br, ok := s.d.(BatchReader)
	if !s.placesOn() || !ok {
		rec, version, err := s.read(ctx, op, key)
		if err != nil || rec == nil || !s.placesOn() {
			return rec, version, place{}, err
		}
		p, err := s.readPlace(ctx, op, key)
		return rec, version, p, err
	}
	results, err := s.getMany(ctx, br, []string{key, placeKey(key)})
	if err == nil && len(results) != 2 {
		err = fmt.Errorf("driver answered %d of 2 reads", len(results))
	}
	if err != nil {
		return nil, 0, place{}, &StorageError{Op: op, Key: key, Err: err}
	}
	rec, version, err := s.readResult(op, key, results[0].Rec, results[0].Version, results[0].Err)
	if err != nil || rec == nil {
		return rec, version, place{}, err
	}
	p, err := s.placeResult(op, key, results[1].Rec, results[1].Version, results[1].Err)
	return rec, version, p, err
}

// judgePlaceAt is judgePlace for key's place p, reading the session it
// names (once per call: seen) unless it is this store's own.
func (s *DocumentStore) judgePlaceAt(ctx context.Context, op, key string, p place, rec *Record, now time.Time, seen sessionsSeen) (placeVerdict, error) {
	if rec == nil || p.version == 0 || p.cleared || p.epoch != rec.Epoch {
		return placeVerdict{}, nil
	}
	cur, mine := s.current.Load(), ""
	if cur != nil {
		mine = cur.id
	}
	live := false
	switch {
	case p.handoff():
	case p.session == mine: // this store's own session: no read
		live = !cur.isEnded() && !expired(cur.expiresAt(), now)
	default:
		got, err := s.sessionOf(ctx, op, key, p.session, seen)
		if err != nil {
			return placeVerdict{}, err
		}
		live = !judgeSession(got.rec.State, got.rec.ExpiresAt, now).Expired
	}
	return judgePlace(p, rec.Epoch, s.cfg.owner, mine, live, now), nil
}

// placeClaim is a waiter's claim on a key's place, to write once the
// acquire knows its session.
type placeClaim struct {
	idx   int       // the caller's index for the key
	key   string    //
	prev  place     // the place it replaces
	epoch uint64    // the key's epoch
	since time.Time // when the waiter began waiting, by the store's clock
}

// claimFor returns the claim a waiter that waited for waited (0: a caller
// that does not wait) makes on key's place p, after its acquire found the
// key held: none when the place is its own already or another waiter's
// who came first.
func claimFor(i int, key string, rec *Record, p place, v placeVerdict, waited time.Duration, now time.Time) (placeClaim, bool) {
	since := now.Add(-waited)
	if waited <= 0 || rec == nil || !outranks(p, v, since) {
		return placeClaim{}, false
	}
	return placeClaim{idx: i, key: key, prev: p, epoch: rec.Epoch, since: since}, true
}

// claimPlaces writes the places claimed, for waiters of the store's
// session (started first if it must be: R18), and reports which landed.
// A claim that fails is left: the waiter claims again at its next look.
func (s *DocumentStore) claimPlaces(ctx context.Context, claims []placeClaim) []bool {
	landed := make([]bool, len(claims))
	if len(claims) == 0 {
		return landed
	}
	ss, err := s.attachIfSessions(ctx)
	if err != nil || ss == nil {
		return landed
	}
	defer ss.detach()
	ws := make([]Write, len(claims))
	for j, c := range claims {
		p := place{owner: s.cfg.owner, session: ss.id, epoch: c.epoch, at: c.since}
		ws[j] = Write{Rec: p.record(c.key), Pre: c.prev.precondition()}
	}
	for j, err := range s.putPlaces(ctx, ws) {
		landed[j] = err == nil
	}
	return landed
}

// putPlaces writes place records, in one call where the driver can
// batch. A place grants nothing, so a write of unknown outcome is left
// unknown: the next look reads what landed.
func (s *DocumentStore) putPlaces(ctx context.Context, ws []Write) []error {
	errs := make([]error, len(ws))
	bd, ok := s.d.(BatchDriver)
	if !ok || len(ws) == 1 {
		for j, w := range ws {
			_, errs[j] = s.put(ctx, w.Rec, w.Pre)
		}
		return errs
	}
	results, err := s.putMany(ctx, bd, ws)
	if err == nil && len(results) != len(ws) {
		err = fmt.Errorf("driver answered %d of %d writes", len(results), len(ws))
	}
	for j := range ws {
		if errs[j] = err; err == nil {
			errs[j] = results[j].Err
		}
	}
	return errs
}

// leavePlaces clears the places of keys that this store's waiters took
// and no longer need: nobody of the store waits for them any more. A
// place another waiter has taken since is left alone.
func (s *DocumentStore) leavePlaces(ctx context.Context, keys []string) {
	if !s.placesOn() || len(keys) == 0 {
		return
	}
	places := make([]place, len(keys))
	if br, ok := s.d.(BatchReader); ok {
		pkeys := make([]string, len(keys))
		for i, key := range keys {
			pkeys[i] = placeKey(key)
		}
		results, err := s.getMany(ctx, br, pkeys)
		if err != nil || len(results) != len(keys) {
			return
		}
		for i, r := range results {
			places[i], _ = s.placeResult("leave place", keys[i], r.Rec, r.Version, r.Err)
		}
	} else {
		for i, key := range keys {
			places[i], _ = s.readPlace(ctx, "leave place", key)
		}
	}
	var ws []Write
	for i, p := range places {
		if p.version == 0 || p.cleared || p.handoff() || p.owner != s.cfg.owner || !s.ownSession(p.session) {
			continue
		}
		left := p
		left.cleared = true
		ws = append(ws, Write{Rec: left.record(keys[i]), Pre: p.precondition()})
	}
	if len(ws) > 0 {
		s.putPlaces(ctx, ws)
	}
}

// ownSession reports whether id is this store's current session: a
// place of an earlier one died with it.
func (s *DocumentStore) ownSession(id string) bool {
	cur := s.current.Load()
	return cur != nil && cur.id == id
}

// handoff releases g reserved for owner (R25): it writes the key's place
// for owner, until a TTL from now, and then releases the key, so that
// nobody else can take the key once it is free. If the place cannot be
// written the key is not released.
func (s *DocumentStore) handoff(ctx context.Context, g Grant, owner string) error {
	if !s.placesOn() {
		return fmt.Errorf("lease: handoff of %q: %w: the %s driver keeps no sessions, so no places", g.Key, errors.ErrUnsupported, s.d.Name())
	}
	unlock, err := s.begin(ctx, g.Key)
	if err != nil {
		return err
	}
	defer unlock()
	s.holds.giveUp(g) // its Held ends before the key can pass on (R17)
	if mutant == mutantHandoffAfter {
		if err := s.releaseLocked(ctx, g); err != nil {
			return err
		}
	}
	if err := s.reserve(ctx, g, owner); err != nil {
		return err
	}
	if mutant == mutantHandoffAfter {
		return nil
	}
	return s.releaseLocked(ctx, g)
}

// reserve writes key's place for owner, at g's epoch, until a TTL from
// now: the bound of a hand-off.
func (s *DocumentStore) reserve(ctx context.Context, g Grant, owner string) error {
	for range maxAcquireAttempts {
		prev, err := s.readPlace(ctx, "handoff", g.Key)
		if err != nil {
			return err
		}
		next := place{owner: owner, epoch: g.Epoch, at: s.expiry(s.now())}
		_, err = s.put(ctx, next.record(g.Key), prev.precondition())
		if !errors.Is(err, ErrConflict) {
			if err != nil {
				return &StorageError{Op: "handoff", Key: g.Key, Err: err}
			}
			return nil
		}
		// A waiter took the place meanwhile: read it again and replace it.
	}
	return &StorageError{Op: "handoff", Key: g.Key, Err: ErrConflict}
}
