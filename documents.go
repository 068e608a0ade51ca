package lease

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DocumentStore is a Store over a compare-and-swap Driver. Each instance is
// one owner; it keeps a table of the grants it holds, so that Renew and
// Release cost one conditional write and Acquire at most a read and a write.
// It is safe for concurrent use; calls on one key are serialised.
type DocumentStore struct {
	d     Driver
	caps  Capabilities // what d states about itself
	clock *serverClock // the server's clock (R8); nil: judge by cfg.now
	cfg   config
	locks keyLocks
	obs   *observer // nil without WithObserver

	holds keeperSlot    // Hold's loop for this store
	done  chan struct{} // closed by Close (R15)

	sd      SessionDriver                // d, when it states Sessions; nil: every key is kept per key
	sr      SessionDriver                // d, when it can read sessions at all (other stores' keys may name them)
	sessMu  ctxMutex                     // guards sess and lastID; serialises starting a session
	sess    *storeSession                // the session new Helds' keys are attached to; nil or ended: none yet
	current atomic.Pointer[storeSession] // sess, for readers that do not take sessMu (places)
	lastID  string                       // the id of the last session started
	bg      sync.WaitGroup               // sweeps in flight (sweepSessions)
	closing context.Context              // ends at Close: the sweeps' context
	stopBG  context.CancelFunc           // ends closing

	scratchMu sync.Mutex
	scratch   []*batchScratch // kept for the next batched renewals

	mu   sync.Mutex            // guards the fields below
	held map[string]*heldGrant // grants this instance holds, by key; an entry changes in place under s.mu (and its key's lock, but at a session's end): copy it under s.mu (entry)
	// attached: the sessions that entries of held are attached to, each
	// with its entries (storeSession.entries; setSessionLocked).
	attached map[*storeSession]struct{}
	pending  map[string][]pendingWrite // writes whose outcome is still unknown (R9), by key, oldest first
	// unseen: releases whose Release returned an error but which a later
	// read showed landed, by key; a retried Release of that grant succeeds.
	unseen map[string]Grant
	closed bool
	writes uint64 // numbers pending writes
}

var _ Store = (*DocumentStore)(nil)

// heldGrant is a grant this instance holds and the record version it wrote.
// Hold's keeper keeps a pointer to it for the next renewal (a ticket), so
// that renewing N keys does not look each up: gone says the table has
// dropped it.
type heldGrant struct {
	grant   Grant
	version uint64
	gone    bool
	lock    *keyLock      // the key's lock, pinned while the entry is in the table, for per-key renewals; nil when first written attached to a session (which renews no key); set once
	sess    *storeSession // the session the key is attached to (R20); nil: kept per key
}

// current is the grant with its session's expiry, for a key attached to
// one: the record's own ExpiresAt is SessionKeyExpiry.
func (h heldGrant) current() Grant {
	g := h.grant
	if h.sess != nil {
		g.ExpiresAt = h.sess.expiresAt()
	}
	return g
}

// entry returns a copy of key's entry in the table. s.mu must be held:
// the key's lock is not enough, since the end of a session changes its
// entries under s.mu alone (forgetSession, detachSession).
func (s *DocumentStore) entry(key string) (heldGrant, bool) {
	h, ok := s.held[key]
	if !ok {
		return heldGrant{}, false
	}
	return *h, true
}

// forgetLocked drops key's entry from the table. s.mu must be held.
func (s *DocumentStore) forgetLocked(key string) {
	if h, ok := s.held[key]; ok {
		if h.sess != nil {
			s.unattachLocked(h.sess)
		}
		h.gone = true
		delete(s.held, key)
		if h.lock != nil {
			s.locks.unpin(h.lock)
		}
	}
}

// pendingWrite is a write whose outcome neither Put nor a re-read settled.
// The next read of its key settles it before anything else happens, so that
// a retried Acquire finds its own earlier write instead of taking it for
// another holder's.
type pendingWrite struct {
	id    uint64        // tells two pending writes of one key apart
	want  Record        // what the write would have stored
	grant Grant         // the grant it would have granted (or released)
	pre   Precondition  // the state it was written against
	sess  *storeSession // the session it attaches the key to; nil: none
}

// maxAcquireAttempts bounds how often Acquire re-reads after losing a
// compare-and-swap to a record that then stopped being live.
const maxAcquireAttempts = 4

// NewDocumentStore returns a store over d. The store does not close d: the
// caller may share one driver among several stores and closes it itself.
// It keeps expiries to the resolution d states (DriverCapabilities); a
// driver that states nothing is taken to keep them exactly. Unless given
// WithClock, it judges expiry by the clock of d's server when d states
// Capabilities.ServerClock, else by time.Now (R8).
func NewDocumentStore(d Driver, opts ...Option) (*DocumentStore, error) {
	if d == nil {
		return nil, errors.New("lease: NewDocumentStore given a nil driver")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	caps := DriverCapabilities(d)
	var clock *serverClock
	if caps.ServerClock && !cfg.clockGiven {
		clock = newServerClock()
	}
	sr, _ := d.(SessionDriver)
	var sd SessionDriver
	if caps.Sessions {
		sd = sr // a driver that states Sessions without the methods is kept per key
	}
	closing, stopBG := context.WithCancel(context.Background())
	return &DocumentStore{
		sd:       sd,
		sr:       sr,
		sessMu:   newCtxMutex(),
		closing:  closing,
		stopBG:   stopBG,
		d:        d,
		caps:     caps,
		clock:    clock,
		cfg:      cfg,
		obs:      newObserver(cfg.observer, d.Name(), cfg.owner),
		done:     make(chan struct{}),
		held:     make(map[string]*heldGrant),
		attached: make(map[*storeSession]struct{}),
		pending:  make(map[string][]pendingWrite),
		unseen:   make(map[string]Grant),
	}, nil
}

// closeDriver makes the store close its driver on Close; Open uses it.
func closeDriver() Option { return func(c *config) { c.ownsDriver = true } }

// Owner returns the owner id this store writes into records.
func (s *DocumentStore) Owner() string { return s.cfg.owner }

func (s *DocumentStore) keeperSlot() *keeperSlot { return &s.holds }
func (s *DocumentStore) logger() *slog.Logger    { return s.cfg.logger }

// Acquire takes key (R4). A loser of a race re-reads and returns a
// *HeldError naming the winner (R5).
func (s *DocumentStore) Acquire(ctx context.Context, key string) (Grant, error) {
	g, err := s.acquire(ctx, key)
	if err == nil {
		s.obs.acquired(g)
	}
	return g, err
}

func (s *DocumentStore) acquire(ctx context.Context, key string) (Grant, error) {
	g, _, err := s.acquireIn(ctx, key, nil)
	return g, err
}

// acquireIn is acquire, attaching a new grant to ss when ss is not nil
// (R18). It returns the grant and the session it is attached to: ss, or
// nil for a grant the store held already per key (R4c).
func (s *DocumentStore) acquireIn(ctx context.Context, key string, ss *storeSession) (Grant, *storeSession, error) {
	unlock, err := s.begin(ctx, key)
	if err != nil {
		return Grant{}, nil, err
	}
	defer unlock()
	raced, seen := false, uint64(0) // a compare-and-swap failed; the epoch it was decided against
	for range maxAcquireAttempts {
		rec, version, p, err := s.readWithPlace(ctx, "acquire", key)
		if err != nil {
			return Grant{}, nil, err
		}
		now := s.now()
		mine, isMine := s.heldAt(key, rec)
		sessions := sessionsSeen{}
		view, err := s.viewKey(ctx, "acquire", key, rec, mineOrNil(mine, isMine), now, sessions)
		if err != nil {
			return Grant{}, nil, err
		}
		if view.place, err = s.judgePlaceAt(ctx, "acquire", key, p, rec, now, sessions); err != nil {
			return Grant{}, nil, err
		}
		if raced && !isMine && rec != nil && rec.Epoch > seen {
			// R5: another store acquired between our read and our write.
			// We lost the race, even if the winner has released since.
			return Grant{}, nil, heldBy(*view.rec)
		}
		if rec != nil {
			seen = rec.Epoch
		}
		out := s.decideAcquire(view, isMine, now)
		switch {
		case out.Err != nil:
			return Grant{}, nil, out.Err
		case out.Reuse:
			return mine.current(), mine.sess, nil
		}
		if view.verdict.Kill {
			switch renewed, err := s.killSession(ctx, view.sess); {
			case err != nil:
				return Grant{}, nil, err
			case renewed:
				continue // its holder renewed it: decide again on the fresh session
			}
		}
		g := out.Next
		g.Key = key
		pre := Precondition{Absent: rec == nil, Version: version}
		switch err := s.writeIn(ctx, "acquire", g, false, pre, ss); {
		case err == nil:
			if g.PreviousUnclean {
				s.cfg.logger.Info("lease: took over from a holder that did not release",
					"key", key, "previous_owner", rec.Owner, "epoch", g.Epoch)
			}
			if ss != nil {
				g.ExpiresAt = ss.expiresAt()
			}
			return g, ss, nil
		case errors.Is(err, errSuperseded), errors.Is(err, ErrConflict):
			raced = true
			continue // someone else wrote first: re-read and decide again
		default:
			return Grant{}, nil, err
		}
	}
	return Grant{}, nil, &StorageError{Op: "acquire", Key: key, Err: ErrConflict}
}

// mineOrNil is the table's entry for a key when the store holds it.
func mineOrNil(mine heldGrant, isMine bool) *heldGrant {
	if !isMine {
		return nil
	}
	return &mine
}

// Renew extends g to now + TTL, keeping its epoch (R6). It costs one
// conditional write when this instance holds g.
func (s *DocumentStore) Renew(ctx context.Context, g Grant) (Grant, error) {
	if ss := s.sessionOfGrant(g); ss != nil {
		return s.renewInSession(ctx, g, ss) // reported as its session's renewal
	}
	next, err := s.renew(ctx, g)
	s.obs.renewed(g, err, 1)
	return next, err
}

func (s *DocumentStore) renew(ctx context.Context, g Grant) (Grant, error) {
	unlock, err := s.begin(ctx, g.Key)
	if err != nil {
		return Grant{}, err
	}
	defer unlock()
	for attempt := 0; ; attempt++ {
		h, err := s.holding(ctx, "renew", g, true, attempt > 0)
		if err != nil {
			return Grant{}, err
		}
		if expired(h.grant.ExpiresAt, s.renewNow()) && mutant != mutantRenewExpired {
			if attempt == 0 {
				continue // the table may be behind the record (R6): read it
			}
			return Grant{}, lostExpired(g.Key, g.Epoch)
		}
		next := h.grant
		next.ExpiresAt = s.expiry(s.now())
		err = s.write(ctx, "renew", next, false, Precondition{Version: h.version})
		if err == nil {
			return next, nil
		}
		if err = s.lostOr(g, err); attempt == 0 && errors.Is(err, ErrLost) {
			continue // the version moved: re-read, the record may still name g (R6)
		}
		return Grant{}, err
	}
}

// Release marks g's record released, keeping its epoch (R7). It costs one
// conditional write when this instance holds g. If the write fails, the
// store keeps the grant and the caller may retry.
func (s *DocumentStore) Release(ctx context.Context, g Grant) error {
	err := s.release(ctx, g)
	s.obs.released(g, false, err)
	return err
}

func (s *DocumentStore) release(ctx context.Context, g Grant) error {
	unlock, err := s.begin(ctx, g.Key)
	if err != nil {
		return err
	}
	defer unlock()
	return s.releaseLocked(ctx, g)
}

// releaseLocked is release under g's key lock.
func (s *DocumentStore) releaseLocked(ctx context.Context, g Grant) error {
	if mutant == mutantLateEnd {
		defer s.holds.giveUp(g)
	} else {
		s.holds.giveUp(g) // its Held ends before the key can pass on (R17)
	}
	for attempt := 0; ; attempt++ {
		h, err := s.holding(ctx, "release", g, false, attempt > 0)
		if errors.Is(err, errReleased) {
			return nil // R9: an earlier, unsettled release of g landed
		}
		if err != nil {
			return err
		}
		if mutant == mutantReleaseLost {
			return nil // report success without writing
		}
		err = s.write(ctx, "release", h.grant, true, Precondition{Version: h.version})
		if err == nil {
			return nil
		}
		if err = s.lostOr(g, err); attempt == 0 && errors.Is(err, ErrLost) {
			continue // the version moved: re-read, the record may still name g (R7)
		}
		return err
	}
}

// Holder returns the record of key's live holder, or ErrNotFound when the
// key is free: never written, released, or expired at the store's clock.
func (s *DocumentStore) Holder(ctx context.Context, key string) (Record, error) {
	unlock, err := s.begin(ctx, key)
	if err != nil {
		return Record{}, err
	}
	defer unlock()
	rec, _, err := s.read(ctx, "holder", key)
	if err != nil {
		return Record{}, err
	}
	if rec == nil {
		return Record{}, ErrNotFound
	}
	view, isLive, err := s.liveView(ctx, "holder", *rec, s.now(), sessionsSeen{})
	switch {
	case err != nil:
		return Record{}, err
	case !isLive:
		return Record{}, ErrNotFound
	}
	return view, nil
}

// holdersPage is how many records Holders asks a ListDriver for at once.
const holdersPage = 500

// Holders yields the live holders of every key that begins with prefix, in
// key order (R14), reading the driver's listing a page at a time. A record
// that does not parse is yielded as an error matching ErrCorrupt, and the
// listing goes on. A driver that cannot list yields one error saying so.
func (s *DocumentStore) Holders(ctx context.Context, prefix string) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		if err := s.usable(ctx); err != nil {
			yield(Record{}, err)
			return
		}
		ld, ok := s.d.(ListDriver)
		if !ok {
			yield(Record{}, fmt.Errorf("lease: holders: the %s driver cannot list keys (it is not a ListDriver)", s.d.Name()))
			return
		}
		seen := sessionsSeen{}
		for after := ""; ; {
			recs, err := s.list(ctx, ld, prefix, after)
			if err != nil {
				yield(Record{}, &StorageError{Op: "holders", Key: prefix, Err: err})
				return
			}
			now := s.now()
			for _, rec := range recs {
				if isPlaceKey(rec.Key) {
					continue // a waiter's place, not a key (R25)
				}
				if err := checkRecord(rec, rec.Key); err != nil {
					if !yield(Record{}, &StorageError{Op: "holders", Key: rec.Key, Err: err}) {
						return
					}
					continue
				}
				view, isLive, err := s.liveView(ctx, "holders", rec, now, seen)
				if err != nil {
					if !yield(Record{}, err) {
						return
					}
					continue
				}
				if isLive && !yield(view, nil) {
					return
				}
			}
			if len(recs) < holdersPage {
				return
			}
			after = recs[len(recs)-1].Key
		}
	}
}

// usable refuses a call on a closed store or with an ended ctx.
func (s *DocumentStore) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.isClosed() {
		return ErrClosed
	}
	return nil
}

// Close makes later calls fail with ErrClosed and ends the context of
// every Held made through the store (R15). It closes the driver only if
// the store was made by Open. Grants still held stay in storage until they
// expire, as if the process had crashed.
func (s *DocumentStore) Close() error {
	s.holds.close()
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if !already {
		close(s.done)
		s.stopBG()
		s.bg.Wait()
		s.obs.closed()
	}
	if already || !s.cfg.ownsDriver {
		return nil
	}
	return s.d.Close()
}

// begin checks a call's key, context and store, then takes key's lock.
func (s *DocumentStore) begin(ctx context.Context, key string) (unlock func(), err error) {
	return s.locks.begin(ctx, key, s.isClosed)
}

func (s *DocumentStore) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// ttl is R8's T for a Held: the least time a grant lasts after its stamp,
// the TTL less what rounding its expiry down (expiry) may take.
func (s *DocumentStore) ttl() time.Duration {
	if r := s.caps.ExpiryResolution; r > 0 && r < s.cfg.ttl {
		return s.cfg.ttl - r
	}
	return s.cfg.ttl
}

// expiry is when a grant made at now ends: now + TTL (R4), rounded down
// to what the driver's records keep, so that the grant returned equals the
// record stored. Rounding down only shortens the holder's own lease.
func (s *DocumentStore) expiry(now time.Time) time.Time {
	exp := now.Add(s.cfg.ttl)
	if r := s.caps.ExpiryResolution; r > 0 {
		exp = exp.Truncate(r)
	}
	return exp
}

// read gets key's record (nil when none exists), refuses one that does not
// parse (R10), and settles what the table and any pending write learn from it.
func (s *DocumentStore) read(ctx context.Context, op, key string) (*Record, uint64, error) {
	rec, version, err := s.get(ctx, key)
	return s.readResult(op, key, rec, version, err)
}

// readResult checks and settles one record that Get or GetMany returned.
func (s *DocumentStore) readResult(op, key string, rec Record, version uint64, err error) (*Record, uint64, error) {
	if errors.Is(err, ErrNotFound) {
		s.settle(key, nil, 0)
		return nil, 0, nil
	}
	if err == nil {
		err = checkRecord(rec, key)
	}
	if mutant == mutantCorruptAbsent && errors.Is(err, ErrCorrupt) {
		s.settle(key, nil, 0)
		return nil, 0, nil // read a corrupt record as no record
	}
	if err != nil {
		return nil, 0, &StorageError{Op: op, Key: key, Err: err}
	}
	s.settle(key, &rec, version)
	return &rec, version, nil
}

// checkRecord refuses a record that no store could have written (R10).
func checkRecord(rec Record, key string) error {
	switch {
	case rec.Key != key:
		return corrupt("record for key %q stored under %q", rec.Key, key)
	case rec.Epoch == 0:
		return corrupt("epoch 0")
	case validateOwner(rec.Owner) != nil:
		return corrupt("owner %q", rec.Owner)
	case rec.Session != "":
		return ValidateSessionID(rec.Session)
	}
	return nil
}

// settle brings the table and the pending write for key up to date with a
// record just read (nil: none).
func (s *DocumentStore) settle(key string, rec *Record, version uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settlePendingLocked(key, rec, version)
	if u, ok := s.unseen[key]; ok && (rec == nil || !rec.Released || rec.Owner != u.Owner || rec.Epoch != u.Epoch) {
		delete(s.unseen, key) // the release was superseded: a retry is ErrLost
	}
	h, ok := s.held[key]
	if !ok {
		return
	}
	if rec == nil || rec.Released || rec.Owner != h.grant.Owner || rec.Epoch != h.grant.Epoch || rec.Session != sessionID(h.sess) {
		s.forgetLocked(key) // lost, or released through a copy of the grant
		return
	}
	h.version = version
	if h.sess == nil {
		h.grant.ExpiresAt = rec.ExpiresAt
	}
}

// settlePendingLocked settles the unknown writes of key against a record
// just read (R9): one that shows a write landed is committed; one that
// may still land (the record is still in the state it was written
// against) is kept; the rest can never land and are forgotten. Every
// unsettled write is remembered, not only the newest: an older one may
// land after a newer one was sent. s.mu must be held.
func (s *DocumentStore) settlePendingLocked(key string, rec *Record, version uint64) {
	ps := s.pending[key]
	if len(ps) == 0 {
		return
	}
	var kept []pendingWrite
	for _, p := range ps {
		switch {
		case rec != nil && sameState(*rec, p.want): // it landed
			s.commitLocked(p.grant, p.want.Released, version, p.sess)
			if p.want.Released {
				s.unseen[key] = p.grant
			}
		case rec == nil && p.pre.Absent, rec != nil && !p.pre.Absent && version == p.pre.Version:
			kept = append(kept, p) // not landed yet; it may still land
		}
	}
	if len(kept) == 0 {
		delete(s.pending, key)
	} else {
		s.pending[key] = kept
	}
}

// sameState reports whether two records say the same thing.
func sameState(a, b Record) bool {
	return a.Owner == b.Owner && a.Epoch == b.Epoch && a.Released == b.Released && a.ExpiresAt.Equal(b.ExpiresAt) && a.Session == b.Session
}

// commitLocked records a write that landed, which attached the key to ss
// if not nil. s.mu must be held.
func (s *DocumentStore) commitLocked(g Grant, released bool, version uint64, ss *storeSession) {
	if !released {
		if g.Owner != s.cfg.owner {
			return // another owner's grant, renewed here, is not ours (R4c)
		}
		h, ok := s.held[g.Key]
		if !ok {
			h = &heldGrant{}
			if ss == nil { // renewed per key: its lock spares each renewal a lookup
				h.lock = s.locks.pin(g.Key)
			}
			s.held[g.Key] = h
		}
		h.grant, h.version = g, version
		s.setSessionLocked(h, ss)
		return
	}
	if h, ok := s.held[g.Key]; ok && h.grant.Owner == g.Owner && h.grant.Epoch == g.Epoch {
		s.forgetLocked(g.Key)
	}
}

// sessionID is ss's id; "" for nil.
func sessionID(ss *storeSession) string {
	if ss == nil {
		return ""
	}
	return ss.id
}

// heldAt reports whether this instance holds the grant that rec names.
func (s *DocumentStore) heldAt(key string, rec *Record) (heldGrant, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[key]
	if !ok || rec == nil {
		return heldGrant{}, false // settle dropped any entry rec does not name
	}
	return *h, true
}

// holding finds the version to write g against: from the table when this
// instance holds g and reread is false, else from a read (a grant from
// another instance of the same owner). Renew also needs the record
// unexpired (R6).
func (s *DocumentStore) holding(ctx context.Context, op string, g Grant, renew, reread bool) (heldGrant, error) {
	s.mu.Lock()
	h, ok := s.entry(g.Key)
	unsettled := len(s.pending[g.Key]) > 0
	s.mu.Unlock()
	if ok && !unsettled && !reread && h.grant.Owner == g.Owner && h.grant.Epoch == g.Epoch {
		return h, nil
	}
	rec, version, err := s.read(ctx, op, g.Key)
	if err != nil {
		return heldGrant{}, err
	}
	if !renew && rec != nil && rec.Released && rec.Owner == g.Owner && rec.Epoch == g.Epoch {
		s.mu.Lock()
		u, ok := s.unseen[g.Key]
		if ok && u.Owner == g.Owner && u.Epoch == g.Epoch {
			delete(s.unseen, g.Key)
			s.mu.Unlock()
			return heldGrant{}, errReleased // a retried release finds its own write
		}
		s.mu.Unlock()
	}
	if mutant == mutantReleaseAnyEpoch && !renew && rec != nil {
		return heldGrant{grant: g, version: version}, nil // release whatever the record names
	}
	if rec == nil || rec.Released || rec.Owner != g.Owner || rec.Epoch != g.Epoch {
		return heldGrant{}, lost(g.Key, g.Epoch)
	}
	if rec.Session != "" {
		if renew { // a key of a session this store does not keep: renewing it per key would revive it (R19)
			return heldGrant{}, lost(g.Key, g.Epoch)
		}
		got, err := s.sessionOf(ctx, op, g.Key, rec.Session, sessionsSeen{})
		if err != nil {
			return heldGrant{}, err
		}
		if got.rec.State == SessionEndedClean {
			return heldGrant{}, lost(g.Key, g.Epoch) // released with its session (R22)
		}
		return heldGrant{grant: g, version: version}, nil
	}
	if renew && expired(rec.ExpiresAt, s.renewNow()) && mutant != mutantRenewExpired {
		return heldGrant{}, lostExpired(g.Key, g.Epoch)
	}
	g.ExpiresAt = rec.ExpiresAt
	return heldGrant{grant: g, version: version}, nil
}

// lostOr turns a failed renew or release write into ErrLost when the
// record's version moved, and drops g from the table so that a retry
// re-reads; storage errors pass through.
func (s *DocumentStore) lostOr(g Grant, err error) error {
	if errors.Is(err, ErrConflict) || errors.Is(err, errSuperseded) {
		s.mu.Lock()
		if h, ok := s.held[g.Key]; ok && h.grant.Epoch == g.Epoch && h.grant.Owner == g.Owner {
			s.forgetLocked(g.Key)
		}
		s.mu.Unlock()
		return lost(g.Key, g.Epoch)
	}
	return err
}

// errReleased: the read showed that an earlier release of the grant, whose
// outcome was unknown, has landed.
var errReleased = errors.New("lease: release landed")

// errSuperseded: an ambiguous write's re-read showed another write in its place.
var errSuperseded = errors.New("lease: write superseded")

// write stores g (released or not) if pre holds. It returns nil once the
// write is known to have landed, ErrConflict or errSuperseded when it is
// known not to have, and a *StorageError when its outcome stays unknown
// (R9): then the write is remembered, and the next read of the key settles it.
func (s *DocumentStore) write(ctx context.Context, op string, g Grant, released bool, pre Precondition) error {
	return s.writeIn(ctx, op, g, released, pre, nil)
}

// writeIn is write, attaching the key to ss when ss is not nil (R20).
func (s *DocumentStore) writeIn(ctx context.Context, op string, g Grant, released bool, pre Precondition, ss *storeSession) error {
	p := pendingWrite{want: recordOf(g, released, ss), grant: g, pre: pre, sess: ss}
	version, err := s.put(ctx, p.want, pre)
	if mutant == mutantNoReread && err != nil && !errors.Is(err, ErrConflict) {
		return &StorageError{Op: op, Key: g.Key, Err: err} // neither remembered nor re-read
	}
	if err = s.answered(op, &p, version, err); !isUnknown(err) {
		return err
	}
	rec, _, rerr := s.read(ctx, op, g.Key)
	return s.resolved(op, p, err, rec, rerr)
}

// recordOf is the record that stores g, attached to ss when ss is not nil
// and g is not released: the key's own expiry is then SessionKeyExpiry,
// and its session's is the one that counts (R20).
func recordOf(g Grant, released bool, ss *storeSession) Record {
	rec := Record{Key: g.Key, Owner: g.Owner, Epoch: g.Epoch, ExpiresAt: g.ExpiresAt, Released: released}
	if ss != nil && !released {
		rec.ExpiresAt, rec.Session = SessionKeyExpiry, ss.id
	}
	return rec
}

// unknownOutcome marks a write error whose outcome a re-read must settle.
type unknownOutcome struct{ err error }

func (u unknownOutcome) Error() string { return u.err.Error() }

func isUnknown(err error) bool {
	_, ok := err.(unknownOutcome)
	return ok
}

// answered takes the driver's answer to write p: nil once it landed (the
// table learns it), ErrConflict when it did not, and otherwise an
// unknownOutcome, after remembering p as pending.
func (s *DocumentStore) answered(op string, p *pendingWrite, version uint64, err error) error {
	key := p.want.Key
	switch {
	case err == nil:
		s.mu.Lock()
		delete(s.pending, key)
		delete(s.unseen, key)
		s.commitLocked(p.grant, p.want.Released, version, p.sess)
		s.mu.Unlock()
		return nil
	case errors.Is(err, ErrConflict):
		return ErrConflict
	}
	s.mu.Lock()
	s.writes++
	p.id = s.writes
	if mutant == mutantOnePending {
		s.pending[key] = nil // forget older unsettled writes
	}
	s.pending[key] = append(s.pending[key], *p)
	s.mu.Unlock()
	s.cfg.logger.Warn("lease: write outcome unknown; re-reading", "op", op, "key", key, "err", err)
	return unknownOutcome{err}
}

// resolved settles a write of unknown outcome (cause) by the re-read that
// followed it (rec, or rerr if the re-read failed too).
func (s *DocumentStore) resolved(op string, p pendingWrite, cause error, rec *Record, rerr error) error {
	key := p.want.Key
	cause = cause.(unknownOutcome).err
	if rerr != nil {
		return &StorageError{Op: op, Key: key, Err: fmt.Errorf("%w; re-read: %w", cause, quoted{rerr})}
	}
	if rec != nil && sameState(*rec, p.want) {
		s.mu.Lock()
		delete(s.unseen, key) // reported as landed: a second release is ErrLost
		s.mu.Unlock()
		return nil // it landed; the read settled the table
	}
	s.mu.Lock()
	unsettled := slices.ContainsFunc(s.pending[key], func(o pendingWrite) bool { return o.id == p.id })
	s.mu.Unlock()
	if unsettled {
		return &StorageError{Op: op, Key: key, Err: cause} // the old state: safe to retry
	}
	return errSuperseded
}

// Record returns key's stored record whatever its state (released,
// expired or live); ErrNotFound if the key was never written. It writes
// nothing. A key attached to a session (R20) is returned with its
// session's expiry, and as released if its session was ended clean
// (R22); one whose session is missing fails closed (R23). The command line's `lease holder` uses it to say what a free
// key's last holder left: its epoch and whether it released cleanly.
func (s *DocumentStore) Record(ctx context.Context, key string) (Record, error) {
	unlock, err := s.begin(ctx, key)
	if err != nil {
		return Record{}, err
	}
	defer unlock()
	rec, _, err := s.read(ctx, "record", key)
	if err != nil {
		return Record{}, err
	}
	if rec == nil {
		return Record{}, ErrNotFound
	}
	if rec.Released || rec.Session == "" {
		return *rec, nil
	}
	got, err := s.sessionOf(ctx, "record", key, rec.Session, sessionsSeen{})
	if err != nil {
		return Record{}, err
	}
	view := *rec
	view.ExpiresAt = got.rec.ExpiresAt
	view.Released = got.rec.State == SessionEndedClean // released with its session (R22)
	return view, nil
}

// decideAcquire applies the acquire rule (decide, R4) to a key's record
// as its session says it is at now (view, R20–R22); isMine says whether
// this store's table holds the grant the record names.
func (s *DocumentStore) decideAcquire(view keyView, isMine bool, now time.Time) acquireOutcome {
	return decide(acquireInput{
		Stored:  view.rec,
		Mine:    isMine,
		Expired: view.verdict.Expired,
		Clean:   view.verdict.Clean,
		Place:   view.place,
		Owner:   s.cfg.owner,
		Expires: s.expiry(now),
	})
}
