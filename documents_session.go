package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// This file holds the DocumentStore's sessions (R18–R24). Over a driver
// that states Capabilities.Sessions, the keys a store's Helds hold are
// attached to its one live session: their records name it, and its
// record carries their expiry, so that one write per period renews every
// key (R20). Bare Acquire, Renew and Release stay per key (R4–R7).
//
// The session's life, in this store's hands:
//   - attach starts a session (its record durable first, R18) or joins
//     the live one, for an acquire that writes keys naming it;
//   - renewSession renews it while it is live by this store's reckoning:
//     not ended, and its deadline (the monotonic time its last write was
//     sent, plus T, minus the margin) not passed (R19);
//   - lapse ends it in this store when it lapsed or another store ended
//     it: every Held of it ends (R17), and the next attach starts a new
//     one; it is never renewed again (R19);
//   - endSession ends it clean for ReleaseAll, in one write (R22).
//
// A taker ends a dead session before it takes one of its keys (R21,
// killSession), and a session record that no key names any more is
// deleted an hour after it expired (sweepSessions, R22).

// sessionRetention is how long after its expiry a session that no key
// names is kept before a sweep deletes it (R22). A key write naming a
// session is sent only before the session's deadline, which is before its
// expiry, so a deletion an hour later strands no key unless a write lands
// an hour after it was sent.
const sessionRetention = time.Hour

// sessionSweep bounds the sessions one sweep deletes: a store sweeps when
// it starts a session, so sessions are deleted faster than they are made.
const sessionSweep = 100

// ctxMutex is a mutex whose lock gives up when ctx ends. The session's
// locks are held across a storage call, bounded by its own ctx (a
// keeper's renewal by half the time to its deadline, a session start by
// its Hold's): a Confirm or ReleaseAll waiting behind it returns when its
// own ctx ends, not when the other call does. A goroutine waiting on it is
// durably blocked, so that a testing/synctest bubble's clock (the Held
// model's) moves on and ends the call it waits for; on a sync.Mutex the
// bubble never goes idle and hangs.
type ctxMutex chan struct{}

func newCtxMutex() ctxMutex { return make(ctxMutex, 1) }

// lock takes m, or returns ctx's error once ctx ends.
func (m ctxMutex) lock(ctx context.Context) error {
	select {
	case m <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m ctxMutex) unlock() { <-m }

// storeSession is one session of a DocumentStore (R18).
type storeSession struct {
	id      string
	wmu     ctxMutex     // serialises this store's writes of the session's record
	expires atomic.Int64 // ExpiresAt of the last write that landed, Unix nanoseconds

	mu        sync.Mutex    // guards the fields below
	version   uint64        // the record's version, last written by this store
	base      time.Time     // monotonic: when the last write that landed was sent
	ended     bool          // lapsed, ended by another store, or ended clean: never written live again (R19)
	detached  bool          // ReleaseAll is ending it: no acquire joins it any more
	attaching int           // acquires writing keys that name it
	idle      chan struct{} // closed when attaching drops to 0 after ending began; nil otherwise

	// Guarded by its store's mu: the table's entries attached to it, in
	// the order they were attached (about the order they were made in,
	// and so in memory: its end walks them several times faster than the
	// table's map order); an entry since forgotten or attached elsewhere
	// stays until a compaction (attachedTo tells).
	entries  []*heldGrant
	attached int // how many of entries are attached to it

	// heldsEnded: the keeper ended every Held of it together (ReleaseAll,
	// or its lapse): a grant attached to it never makes a Held again.
	heldsEnded atomic.Bool
}

// expiresAt is the session's expiry as this store last wrote it: the
// ExpiresAt of every key attached to it (R20).
func (ss *storeSession) expiresAt() time.Time { return time.Unix(0, ss.expires.Load()).UTC() }

// renewedAt is the monotonic time at which the last write of the session
// that landed was sent: its Helds' deadlines count from it (R8).
func (ss *storeSession) renewedAt() time.Time {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.base
}

// isEnded reports whether the session is over for this store.
func (ss *storeSession) isEnded() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.ended
}

// landed takes a write of the session that landed, sent at sent.
func (ss *storeSession) landed(rec SessionRecord, version uint64, sent time.Time) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.version = version
	if sent.After(ss.base) {
		ss.base = sent
	}
	ss.expires.Store(rec.ExpiresAt.UnixNano())
}

// detach ends one acquire's attach. A nil ss does nothing.
func (ss *storeSession) detach() {
	if ss == nil {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.attaching--; ss.attaching == 0 && ss.idle != nil {
		close(ss.idle)
		ss.idle = nil
	}
}

// sessionsOn reports whether the store keeps Helds through sessions.
func (s *DocumentStore) sessionsOn() bool { return s.sd != nil }

// sessionMargin is the margin of the store's own deadline for its
// session (R19): a sixth of the TTL, Hold's default safety margin.
func (s *DocumentStore) sessionMargin() time.Duration { return s.ttl() / 6 }

// attach returns the live session that an acquire for Helds writes its
// keys into, starting one when there is none or the last one lapsed, and
// counts the acquire in until it calls detach: ReleaseAll waits for it.
func (s *DocumentStore) attach(ctx context.Context) (*storeSession, error) {
	if err := s.sessMu.lock(ctx); err != nil {
		return nil, err
	}
	defer s.sessMu.unlock()
	if ss := s.sess; ss != nil {
		usable, idle := s.attachable(ss)
		if usable && idle {
			// No Held kept it renewed: renew it first, so that the keys
			// attached now get a whole TTL before their deadline.
			err := s.renewSession(ctx, ss, s.sessionMargin())
			if err != nil && !errors.Is(err, ErrLost) {
				return nil, err
			}
			usable = err == nil
		}
		if usable && ss.join() {
			return ss, nil
		}
		s.lapse(ss, sessionOver(ss.id, errSessionLapsed))
	}
	ss, err := s.startSession(ctx)
	if err != nil {
		return nil, err
	}
	ss.attaching++
	s.sess = ss
	s.current.Store(ss)
	return ss, nil
}

// attachIfSessions is attach for a store that keeps sessions; nil for
// one that keeps every key per key. detach of nil does nothing.
func (s *DocumentStore) attachIfSessions(ctx context.Context) (*storeSession, error) {
	if !s.sessionsOn() || s.usable(ctx) != nil {
		return nil, nil
	}
	return s.attach(ctx)
}

// attachable reports whether keys may be attached to ss now: it is live
// for this store, before its deadline and its expiry; and whether it is
// idle: not renewed for a renewal interval (a third of the TTL), as when
// no Held kept it.
func (s *DocumentStore) attachable(ss *storeSession) (usable, idle bool) {
	now := readClocks().mono
	ss.mu.Lock()
	defer ss.mu.Unlock()
	usable = !ss.ended && !ss.detached && now.Before(ss.base.Add(s.ttl()-s.sessionMargin())) &&
		!expired(ss.expiresAt(), s.renewNow())
	return usable, !now.Before(ss.base.Add(s.ttl() / 3))
}

// join counts an acquire in as attaching to ss, unless ss is over.
func (ss *storeSession) join() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended || ss.detached {
		return false
	}
	ss.attaching++
	return true
}

// startSession creates a session record with a fresh id (R18), durable
// before any key names it, and sweeps old sessions in the background.
func (s *DocumentStore) startSession(ctx context.Context) (*storeSession, error) {
	if err := s.readServerClock(ctx); err != nil {
		return nil, err
	}
	for range 3 {
		id := newSessionID()
		if mutant == mutantSessionIDReused && s.lastID != "" {
			id = s.lastID
		}
		rec := SessionRecord{ID: id, Owner: s.cfg.owner, ExpiresAt: s.expiry(s.now()), State: SessionLive}
		sent := readClocks()
		pre := Precondition{Absent: true}
		if mutant == mutantSessionIDReused && id == s.lastID {
			_, v, _ := s.getSession(ctx, id)
			pre = Precondition{Version: v}
		}
		version, err := s.putSession(ctx, rec, pre)
		if errors.Is(err, ErrConflict) {
			continue // the id is taken: never reuse one (R18)
		}
		if err != nil {
			if version, err = s.settleSession(ctx, rec, err); err != nil {
				return nil, err
			}
		}
		ss := &storeSession{id: id, wmu: newCtxMutex()}
		ss.landed(rec, version, sent.mono)
		s.lastID = id
		s.obs.session(EventSessionStarted, id, nil)
		s.sweepSessions()
		return ss, nil
	}
	return nil, &StorageError{Op: "start session", Key: "", Err: errors.New("three fresh session ids were all taken")}
}

// readServerClock makes sure that a store that judges by its server's
// clock (R8) has read it before it stamps a session's expiry: a session
// is started before the store's first read, and a host's clock minutes
// behind would stamp it expired. Any call reports the server's clock; a
// read of a session no record has is the cheapest.
func (s *DocumentStore) readServerClock(ctx context.Context) error {
	if s.clock == nil {
		return nil
	}
	if _, _, ok := s.clock.bounds(); ok {
		return nil
	}
	_, _, err := s.getSession(ctx, newSessionID())
	if err != nil && !errors.Is(err, ErrNotFound) {
		return &StorageError{Op: "start session", Key: "", Err: err}
	}
	return nil
}

// newSessionID returns 128 random bits in hex (R18).
func newSessionID() string {
	var b [sessionIDLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// settleSession settles a write of rec whose outcome is unknown (cause)
// by reading the session back (R9): its version when it landed, else a
// *StorageError, safe to retry.
func (s *DocumentStore) settleSession(ctx context.Context, rec SessionRecord, cause error) (uint64, error) {
	got, version, err := s.getSession(ctx, rec.ID)
	if err == nil && got.Owner == rec.Owner && got.State == rec.State && got.ExpiresAt.Equal(rec.ExpiresAt) {
		return version, nil
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		cause = fmt.Errorf("%w; re-read: %w", cause, quoted{err})
	}
	return 0, &StorageError{Op: "session", Key: rec.ID, Err: cause}
}

// sweepSessions deletes, in the background, up to sessionSweep sessions
// that expired an hour ago and that no key names (R22).
func (s *DocumentStore) sweepSessions() {
	before := s.now().Add(-sessionRetention)
	s.bg.Go(func() {
		ctx, cancel := context.WithTimeout(s.closing, lookTimeout)
		defer cancel()
		start := s.obs.start()
		n, err := s.sd.RemoveSessions(s.clock.probe(ctx), before, sessionSweep)
		s.obs.storage(OpRemoveSessions, "", n, start, err)
		if err != nil && s.closing.Err() == nil {
			s.cfg.logger.Warn("lease: could not remove old sessions; the next session's start tries again", "err", err)
		}
	})
}

// lapse ends ss in this store (R19): it is never written live again, the
// next attach starts a new session (attach finds it ended), and every
// Held of it ends (R17).
// cause matches ErrLost.
func (s *DocumentStore) lapse(ss *storeSession, cause error) {
	ss.mu.Lock()
	already := ss.ended
	ss.ended = true
	ss.mu.Unlock()
	if !already {
		s.obs.session(EventSessionEnded, ss.id, cause)
	}
	s.holds.sessionEnded(ss, cause)
}

// renewSession renews ss (R19): one write that extends every key attached
// to it (R20). It refuses, with an error matching ErrLost, a session that
// ended, whose deadline for this store (the time its last write was
// sent, plus T, minus margin) has passed, or that another store ended;
// then ss lapses and every Held of it ends. Other errors leave it
// standing, to be tried again before the deadline.
func (s *DocumentStore) renewSession(ctx context.Context, ss *storeSession, margin time.Duration) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if err := ss.wmu.lock(ctx); err != nil {
		return err
	}
	defer ss.wmu.unlock()
	sent := readClocks()
	ss.mu.Lock()
	ended, version, deadline := ss.ended, ss.version, ss.base.Add(s.ttl()-margin)
	ss.mu.Unlock()
	switch {
	case ended:
		return sessionOver(ss.id, errSessionLapsed)
	case !sent.mono.Before(deadline) && mutant != mutantSessionPastDeadline,
		expired(ss.expiresAt(), s.renewNow()) && mutant != mutantSessionPastDeadline:
		cause := sessionOver(ss.id, errSessionLapsed)
		s.lapse(ss, cause)
		return cause
	}
	rec := SessionRecord{ID: ss.id, Owner: s.cfg.owner, ExpiresAt: s.expiry(s.now()), State: SessionLive}
	next, err := s.putSession(ctx, rec, Precondition{Version: version})
	if err != nil && !errors.Is(err, ErrConflict) {
		next, err = s.settleSessionWrite(ctx, rec, version, err)
	}
	switch {
	case err == nil:
		ss.landed(rec, next, sent.mono)
		s.obs.session(EventSessionRenewed, ss.id, nil)
		return nil
	case errors.Is(err, ErrConflict) && mutant == mutantRenewAfterKill:
		if _, v, rerr := s.getSession(ctx, ss.id); rerr == nil {
			if next, err = s.putSession(ctx, rec, Precondition{Version: v}); err == nil {
				ss.landed(rec, next, sent.mono)
				return nil
			}
		}
		fallthrough
	case errors.Is(err, ErrConflict):
		cause := sessionOver(ss.id, errSessionTaken)
		s.lapse(ss, cause)
		return cause
	}
	s.obs.session(EventSessionRenewed, ss.id, err)
	return err
}

// settleSessionWrite settles a write of rec against version whose outcome
// is unknown (cause), by reading the session back (R9): the new version
// when it landed; ErrConflict when another write took its place; else a
// *StorageError, safe to retry.
func (s *DocumentStore) settleSessionWrite(ctx context.Context, rec SessionRecord, version uint64, cause error) (uint64, error) {
	got, now, err := s.getSession(ctx, rec.ID)
	switch {
	case err != nil:
		return 0, &StorageError{Op: "session", Key: rec.ID, Err: fmt.Errorf("%w; re-read: %w", cause, quoted{err})}
	case got.Owner == rec.Owner && got.State == rec.State && got.ExpiresAt.Equal(rec.ExpiresAt):
		return now, nil
	case now != version:
		return 0, ErrConflict
	}
	return 0, &StorageError{Op: "session", Key: rec.ID, Err: cause}
}

// endSession ends ss clean, in one write (R22): every key attached to it
// is free at once. The caller has ended its Helds first (R17). Acquires
// writing keys that name it finish first, and new ones start a session
// of their own. A write that fails leaves ss to be ended by a retry; one
// that finds ss ended by another store is an error matching ErrLost.
func (s *DocumentStore) endSession(ctx context.Context, ss *storeSession) error {
	if err := ss.wmu.lock(ctx); err != nil {
		return err
	}
	defer ss.wmu.unlock()
	ss.mu.Lock()
	version := ss.version
	ss.mu.Unlock()
	rec := SessionRecord{ID: ss.id, Owner: s.cfg.owner, ExpiresAt: ss.expiresAt(), State: SessionEndedClean}
	_, err := s.putSession(ctx, rec, Precondition{Version: version})
	if err != nil && !errors.Is(err, ErrConflict) {
		_, err = s.settleSessionWrite(ctx, rec, version, err)
	}
	switch {
	case err == nil:
		s.lapse(ss, sessionOver(ss.id, errSessionEndedClean))
		return nil
	case errors.Is(err, ErrConflict):
		cause := sessionOver(ss.id, errSessionTaken)
		s.lapse(ss, cause)
		return cause
	}
	return err
}

// waitAttached stops new acquires from joining ss (they start a session
// of their own) and waits until the ones writing keys that name it are
// answered.
func (s *DocumentStore) waitAttached(ctx context.Context, ss *storeSession) error {
	ss.mu.Lock()
	ss.detached = true
	var idle chan struct{}
	if ss.attaching > 0 {
		if ss.idle == nil {
			ss.idle = make(chan struct{})
		}
		idle = ss.idle
	}
	ss.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// seenSession is a session record an acquire or a listing read.
type seenSession struct {
	rec     SessionRecord
	version uint64
	err     error
}

// sessionsSeen caches the session records one call read, by id: a key
// record names one of a few sessions, read once each.
type sessionsSeen map[string]*seenSession

// sessionOf reads the session that key's record names, once per call
// (seen). A session that is missing or does not parse makes the key
// fail closed (R23, R10).
func (s *DocumentStore) sessionOf(ctx context.Context, op, key, id string, seen sessionsSeen) (*seenSession, error) {
	if got, ok := seen[id]; ok {
		return got, got.err
	}
	got := &seenSession{}
	got.rec, got.version, got.err = s.getSession(ctx, id)
	switch {
	case errors.Is(got.err, ErrNotFound):
		got.err = corrupt("session %s, which the record names, is missing", id)
	case got.err == nil:
		got.err = CheckSessionRecord(got.rec)
		if got.err == nil && got.rec.ID != id {
			got.err = corrupt("session %s stored under %s", got.rec.ID, id)
		}
	}
	if got.err != nil {
		if mutant == mutantUnreadSessionFree && errors.Is(got.err, ErrCorrupt) {
			got.err, got.rec = nil, SessionRecord{ID: id, State: SessionEndedClean}
		} else {
			got.err = &StorageError{Op: op, Key: key, Err: got.err}
		}
	}
	seen[id] = got
	return got, got.err
}

// keyView is a key's record as its session says it is at now (R20–R22):
// the record with the session's expiry, and the verdict an acquire
// decides on.
type keyView struct {
	rec     *Record
	verdict sessionVerdict
	sess    *seenSession // the session read, which a takeover ends first (R21)
	place   placeVerdict // what the key's place says (R25)
}

// viewKey reads the session that rec names, unless this store's table
// holds rec's grant (mine) in a session of its own, which it knows.
func (s *DocumentStore) viewKey(ctx context.Context, op, key string, rec *Record, mine *heldGrant, now time.Time, seen sessionsSeen) (keyView, error) {
	if rec == nil || rec.Released || rec.Session == "" {
		v := keyView{rec: rec}
		if rec != nil && !rec.Released {
			v.verdict.Expired = expired(rec.ExpiresAt, now)
		}
		return v, nil
	}
	eff := *rec
	if mine != nil && mine.sess != nil && mine.sess.id == rec.Session {
		eff.ExpiresAt = mine.sess.expiresAt()
		over := mine.sess.isEnded() || expired(eff.ExpiresAt, now) // this store's own session lapsed: R4d
		return keyView{rec: &eff, verdict: sessionVerdict{Expired: over}}, nil
	}
	got, err := s.sessionOf(ctx, op, key, rec.Session, seen)
	if err != nil {
		return keyView{}, err
	}
	eff.ExpiresAt = got.rec.ExpiresAt
	return keyView{rec: &eff, verdict: judgeSession(got.rec.State, got.rec.ExpiresAt, now), sess: got}, nil
}

// killSession ends a live session past its expiry (R21), by a
// compare-and-swap on the version read: nil once it is ended, by this
// call or another; a *HeldError-ready record when its holder renewed it
// meanwhile (renewed true); an error when storage failed.
func (s *DocumentStore) killSession(ctx context.Context, got *seenSession) (renewed bool, err error) {
	if got.rec.State != SessionLive {
		return false, nil // ended already: nothing to end
	}
	if mutant == mutantTakeWithoutKill {
		return false, nil
	}
	for range maxAcquireAttempts {
		dead := got.rec
		dead.State = SessionEndedUnclean
		version, err := s.putSession(ctx, dead, Precondition{Version: got.version})
		if err != nil && !errors.Is(err, ErrConflict) {
			version, err = s.settleSessionWrite(ctx, dead, got.version, err)
		}
		if err == nil {
			got.rec, got.version = dead, version
			s.cfg.logger.Info("lease: ended a session whose holder did not renew it",
				"session", dead.ID, "previous_owner", dead.Owner)
			s.obs.session(EventSessionKilled, dead.ID, nil)
			return false, nil
		}
		if !errors.Is(err, ErrConflict) {
			return false, err
		}
		// Another write came first: read again (R21).
		rec, version, err := s.getSession(ctx, dead.ID)
		if err == nil {
			err = CheckSessionRecord(rec)
		}
		if err != nil {
			return false, &StorageError{Op: "acquire", Key: dead.ID, Err: err}
		}
		got.rec, got.version = rec, version
		switch v := judgeSession(rec.State, rec.ExpiresAt, s.now()); {
		case !v.Expired:
			return true, nil // renewed: its keys are held
		case !v.Kill:
			return false, nil // ended by another taker or by its store
		}
	}
	return false, &StorageError{Op: "acquire", Key: got.rec.ID, Err: ErrConflict}
}

// liveView returns rec as Holder and Holders show it (R23): with its
// session's expiry, and whether it is live at now. A session-attached key
// is live while it is not released and its session is live by the
// store's clock; one whose session is missing or corrupt fails closed.
func (s *DocumentStore) liveView(ctx context.Context, op string, rec Record, now time.Time, seen sessionsSeen) (Record, bool, error) {
	if rec.Released || rec.Session == "" {
		return rec, live(rec, now), nil
	}
	got, err := s.sessionOf(ctx, op, rec.Key, rec.Session, seen)
	if err != nil {
		return Record{}, false, err
	}
	rec.ExpiresAt = got.rec.ExpiresAt
	return rec, got.rec.State == SessionLive && !expired(got.rec.ExpiresAt, now), nil
}

// sessionOfGrant returns the session that the table's entry for g is
// attached to; nil when g is kept per key or not in the table.
func (s *DocumentStore) sessionOfGrant(g Grant) *storeSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[g.Key]
	if !ok || h.sess == nil || h.grant.Owner != g.Owner || h.grant.Epoch != g.Epoch {
		return nil
	}
	return h.sess
}

// renewInSession renews g, attached to ss: it renews the session now (one
// write, which renews every key of it, R20) and checks that the key's
// record still names g in ss. Confirm comes here.
func (s *DocumentStore) renewInSession(ctx context.Context, g Grant, ss *storeSession) (Grant, error) {
	if err := s.renewSession(ctx, ss, s.sessionMargin()); err != nil {
		if errors.Is(err, ErrLost) {
			return Grant{}, fmt.Errorf("%w: %q epoch %d: %w", ErrLost, g.Key, g.Epoch, quoted{err})
		}
		return Grant{}, err
	}
	unlock, err := s.begin(ctx, g.Key)
	if err != nil {
		return Grant{}, err
	}
	defer unlock()
	rec, _, err := s.read(ctx, "renew", g.Key)
	if err != nil {
		return Grant{}, err
	}
	if rec == nil || rec.Released || rec.Owner != g.Owner || rec.Epoch != g.Epoch || rec.Session != ss.id {
		return Grant{}, lost(g.Key, g.Epoch)
	}
	g.ExpiresAt = ss.expiresAt()
	return g, nil
}

// attachedTo reports whether the table's entry h is attached to ss.
func (h *heldGrant) attachedTo(ss *storeSession) bool { return !h.gone && h.sess == ss }

// setSessionLocked attaches the table's entry h to ss (nil: kept per
// key), keeping each session's entries. s.mu must be held.
func (s *DocumentStore) setSessionLocked(h *heldGrant, ss *storeSession) {
	if h.sess == ss {
		return
	}
	if h.sess != nil {
		s.unattachLocked(h.sess)
	}
	h.sess = ss
	if ss == nil {
		return
	}
	if ss.attached < len(ss.entries)/2 {
		ss.entries = slices.DeleteFunc(ss.entries, func(e *heldGrant) bool { return !e.attachedTo(ss) })
	}
	ss.entries = append(ss.entries, h)
	if ss.attached++; ss.attached == 1 {
		s.attached[ss] = struct{}{}
	}
}

// unattachLocked counts one entry of ss fewer: it was forgotten or
// attached elsewhere. s.mu must be held.
func (s *DocumentStore) unattachLocked(ss *storeSession) {
	if ss.attached--; ss.attached == 0 {
		s.dropAttachedLocked(ss)
	}
}

// dropAttachedLocked forgets that entries are attached to ss, once none
// is. s.mu must be held.
func (s *DocumentStore) dropAttachedLocked(ss *storeSession) {
	ss.entries, ss.attached = nil, 0
	delete(s.attached, ss)
}

// forgetSession drops from the table every grant attached to ss, which
// ended: its keys are free or taken. When the store is observed it
// returns those grants, for their events; else nil.
func (s *DocumentStore) forgetSession(ss *storeSession) []Grant {
	s.mu.Lock()
	defer s.mu.Unlock()
	whole := ss.attached == len(s.held) // every entry is of ss
	var gone []Grant
	var locks []*keyLock
	for _, h := range ss.entries {
		if !h.attachedTo(ss) {
			continue
		}
		if s.obs != nil {
			gone = append(gone, h.grant)
		}
		h.gone = true
		if !whole {
			delete(s.held, h.grant.Key)
		}
		if h.lock != nil {
			locks = append(locks, h.lock)
		}
	}
	if whole {
		clear(s.held) // one clear, not a delete per key
	}
	s.dropAttachedLocked(ss)
	s.locks.unpinEach(locks) // under s.mu, as forgetLocked: a new entry of the key pins after
	return gone
}

// sessionsToEnd returns the sessions ReleaseAll ends (R22): the store's
// own, and any other that a grant in the table is attached to.
func (s *DocumentStore) sessionsToEnd(ctx context.Context) ([]*storeSession, error) {
	var out []*storeSession
	if err := s.sessMu.lock(ctx); err != nil {
		return nil, err // a session start is in flight, past ctx
	}
	if s.sess != nil && !s.sess.isEnded() {
		out = append(out, s.sess)
	}
	s.sessMu.unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for ss := range s.attached {
		if !slices.Contains(out, ss) {
			out = append(out, ss)
		}
	}
	return out, nil
}

// releaseSession ends ss clean for ReleaseAll, in one write, after every
// Held of it has ended (R17, R22): whatever the number of its keys, their
// Helds end in one call, and the table drops them in one pass.
func (s *DocumentStore) releaseSession(ctx context.Context, ss *storeSession) error {
	if mutant == mutantSessionEndFirst {
		defer s.holds.giveUpSession(ss)
	} else {
		s.holds.giveUpSession(ss) // their Helds end before their keys are free (R17)
	}
	switch err := s.endSession(ctx, ss); {
	case errors.Is(err, ErrLost):
		// Another store ended the session: its keys are free, but each
		// one nobody took yet is still this store's to release (R7).
		return s.releaseEach(ctx, s.detachSession(ss))
	case err != nil:
		return err // the grants stay: ReleaseAll again finishes the job (R13)
	}
	for _, g := range s.forgetSession(ss) {
		s.obs.released(g, true, nil)
	}
	return nil
}

// detachSession makes the table's grants of ss, which another store
// ended, grants kept per key: each is released or lost on its own. It
// returns them in key order, as releaseEach locks keys.
func (s *DocumentStore) detachSession(ss *storeSession) []Grant {
	s.mu.Lock()
	gs := make([]Grant, 0, ss.attached)
	for _, h := range ss.entries {
		if h.attachedTo(ss) {
			h.grant.ExpiresAt, h.sess = ss.expiresAt(), nil
			gs = append(gs, h.grant)
		}
	}
	s.dropAttachedLocked(ss)
	s.mu.Unlock()
	slices.SortFunc(gs, func(a, b Grant) int { return strings.Compare(a.Key, b.Key) })
	return gs
}
