package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// This file holds the DocumentStore's batched operations (R12): Hold's
// loop renews and acquires many keys with one read and one write where the
// driver can batch (BatchReader, BatchDriver), and ReleaseAll releases
// every grant with one write. Every key keeps its own precondition and its
// own answer. The common case goes through the batch; any key that needs
// more (a lost compare-and-swap, a grant missing from the table, a busy
// key) is handed to the one-key operation, which knows every case.

// batchWrite is one key's write in a batch: grant stored (released or
// not) against pre.
type batchWrite struct {
	grant    Grant
	pre      Precondition
	released bool
	idx      int           // the caller's index for this key
	entry    *heldGrant    // a renewal's table entry, which it updates in place
	sess     *storeSession // the session an acquire attaches the key to (R20); nil: none
	kill     *seenSession  // the dead session an acquire ends before its write (R21)
}

// pending is w as a write whose outcome is unknown.
func (w batchWrite) pending() pendingWrite {
	return pendingWrite{want: recordOf(w.grant, w.released, w.sess), grant: w.grant, pre: w.pre, sess: w.sess}
}

// lockedKeys holds the key locks a batch took.
type lockedKeys []func()

func (l lockedKeys) unlock() {
	for _, u := range l {
		u()
	}
}

// batchScratch is the memory a batched renewal works in, for up to
// maxBatch keys: the keys, their locks, the writes and their answers. The
// store keeps one per renewal call the keeper may have in flight, so that
// renewing N keys every period does not allocate N-sized slices each time.
type batchScratch struct {
	keys  []string
	ok    []bool
	taken []*keyLock
	idx   []int
	batch []batchWrite
	ws    []Write
	errs  []error
}

// takeScratch returns a batchScratch: a kept one, or a new one.
func (s *DocumentStore) takeScratch() *batchScratch {
	s.scratchMu.Lock()
	defer s.scratchMu.Unlock()
	if n := len(s.scratch); n > 0 {
		bs := s.scratch[n-1]
		s.scratch = s.scratch[:n-1]
		return bs
	}
	return &batchScratch{}
}

// keepScratch keeps bs for a later renewal, unless enough are kept.
func (s *DocumentStore) keepScratch(bs *batchScratch) {
	s.scratchMu.Lock()
	defer s.scratchMu.Unlock()
	if len(s.scratch) < maxRenewCalls {
		s.scratch = append(s.scratch, bs)
	}
}

// renewMany renews sc.grants, each as Renew would (R6, R12); the results
// are in sc.out. The keys it finds in the table,
// unexpired and with no write of unknown outcome, are locked, checked and
// written together; Renew takes the rest, one at a time, and knows every
// case. sc.tickets, if not nil, holds the table entry an earlier renewMany
// answered for each grant (nil where none), which saves looking the key
// up; each result carries its next.
func (s *DocumentStore) renewMany(ctx context.Context, sc *renewScratch) []grantResult {
	gs, tickets := sc.grants, sc.tickets
	n := len(gs)
	out := sized(sc.out, n)
	sc.out = out
	if err := s.usable(ctx); err != nil {
		for i := range out {
			out[i].err = err
		}
		return out
	}
	s.settleUnknown(ctx, gs)
	bs := s.takeScratch()
	defer s.keepScratch(bs)
	keys, ok := sized(bs.keys, n), sized(bs.ok, n)
	bs.keys, bs.ok = keys, ok
	for i, g := range gs {
		// A ticket's key was checked when its grant was acquired; renewals
		// sees that the ticket is the grant's.
		keys[i], ok[i] = g.Key, tickets != nil && tickets[i] != nil || ValidateKey(g.Key) == nil
	}
	taken := s.locks.tryLockEach(keys, ok, sized(bs.taken, n), tickets)
	bs.taken = taken
	batch, single, drop := s.renewals(gs, tickets, ok, bs.batch[:0])
	bs.batch = batch
	s.locks.unlockEach(keys, taken, drop)
	locked := sized(bs.idx, len(batch)) // the indices of the batch's keys
	bs.idx = locked
	for j, w := range batch {
		locked[j] = w.idx
	}
	for j, err := range s.putBatchIn(ctx, "renew", batch, bs) {
		i := batch[j].idx
		if err == nil || !(errors.Is(err, ErrConflict) || errors.Is(err, errSuperseded)) {
			s.obs.renewed(gs[i], err, len(batch)) // the rest go to Renew, which reports them
		}
		switch {
		case err == nil:
			out[i].g, out[i].ticket = batch[j].grant, batch[j].entry
		case errors.Is(err, ErrConflict), errors.Is(err, errSuperseded):
			single = append(single, i) // the version moved: Renew re-reads (R6)
		default:
			out[i].err = err
		}
	}
	s.locks.unlockEach(keys, taken, locked)
	for _, i := range single {
		out[i].g, out[i].err = s.Renew(ctx, gs[i])
	}
	return out
}

// renewals returns, under one lock of the table, the writes that renew
// the grants of gs whose keys are locked (ok) and which the table holds
// unexpired with no write of unknown outcome; the indices of the others,
// for Renew; and the indices of the locked keys that are not in the batch,
// to unlock.
func (s *DocumentStore) renewals(gs []Grant, tickets []*heldGrant, ok []bool, batch []batchWrite) (_ []batchWrite, single, drop []int) {
	now, expiry := s.renewNow(), s.expiry(s.now())
	s.mu.Lock()
	defer s.mu.Unlock()
	unsettled := len(s.pending) > 0
	for i, g := range gs {
		if !ok[i] {
			single = append(single, i)
			continue
		}
		var h *heldGrant
		if tickets != nil && tickets[i] != nil && !tickets[i].gone {
			h = tickets[i] // still the key's entry
		} else {
			h = s.held[g.Key]
		}
		if h == nil || h.sess != nil || (unsettled && len(s.pending[g.Key]) > 0) || h.grant.Key != g.Key || h.grant.Owner != g.Owner || h.grant.Epoch != g.Epoch ||
			(expired(h.grant.ExpiresAt, now) && mutant != mutantBatchRenewExpired) {
			single, drop = append(single, i), append(drop, i) // Renew reads the record and decides
			continue
		}
		next := h.grant
		next.ExpiresAt = expiry
		batch = append(batch, batchWrite{idx: i, grant: next, pre: Precondition{Version: h.version}, entry: h})
	}
	return batch, single, drop
}

// settleUnknown re-reads, in one batched read, the keys of gs that have
// writes of unknown outcome (R9), such as every key of a renewal batch
// that timed out, so that their renewals can be batched again instead of
// each going to a one-key Renew.
func (s *DocumentStore) settleUnknown(ctx context.Context, gs []Grant) {
	br, ok := s.d.(BatchReader)
	if !ok {
		return
	}
	var unsettled []string
	s.mu.Lock()
	for _, g := range gs {
		if len(s.pending[g.Key]) > 0 {
			unsettled = append(unsettled, g.Key)
		}
	}
	s.mu.Unlock()
	var (
		locks lockedKeys
		keys  []string
	)
	for _, key := range unsettled {
		if unlock, ok := s.lockValid(key); ok {
			locks, keys = append(locks, unlock), append(keys, key)
		}
	}
	defer locks.unlock()
	if len(keys) == 0 {
		return
	}
	results, err := s.getMany(ctx, br, keys)
	if err != nil || len(results) != len(keys) {
		return // each key's Renew re-reads it
	}
	for j, key := range keys {
		r := results[j]
		s.readResult("renew", key, r.Rec, r.Version, r.Err)
	}
}

// acquireMany acquires keys for Helds, each as Acquire would (R4, R12),
// with one batched read and one batched write when the driver can batch.
// Over a driver with sessions it attaches the keys to the store's live
// session, starting one first if it must (R18).
//
// waited says, for each key, how long its waiter has waited (nil or 0: a
// caller that does not wait for it): a waiter that finds its key held
// takes the key's place, unless one that waited longer has it (R25).
func (s *DocumentStore) acquireMany(ctx context.Context, keys []string, waited []time.Duration) []grantResult {
	out := make([]grantResult, len(keys))
	br, canRead := s.d.(BatchReader)
	if err := s.usable(ctx); err != nil || !canRead {
		ss, err := s.attachIfSessions(ctx)
		if err != nil {
			for i := range out {
				out[i].err = err
			}
			return out
		}
		defer ss.detach()
		for i, key := range keys {
			out[i].g, out[i].sess, out[i].err = s.acquireIn(ctx, key, ss)
			if out[i].err == nil {
				s.obs.acquired(out[i].g)
			}
		}
		return out
	}
	var (
		locks  lockedKeys
		ready  []string // locked keys, read together
		index  []int
		single []int
	)
	for i, key := range keys {
		unlock, ok := s.lockValid(key)
		if !ok {
			single = append(single, i)
			continue
		}
		locks = append(locks, unlock)
		ready, index = append(ready, key), append(index, i)
	}
	batch, again, claims := s.decideMany(ctx, br, ready, index, out, waited)
	for _, c := range claims {
		out[c.idx].claim = &c
	}
	single = append(single, again...)
	// A session is started or joined only when a key is to be written: a
	// store whose keys are all held by others only reads (R18); its
	// waiters' places are claimed after the look (claimPlaces).
	var ss *storeSession
	if len(batch) > 0 || len(single) > 0 {
		var err error
		if ss, err = s.attachIfSessions(ctx); err != nil {
			for _, w := range batch {
				out[w.idx].err = err
			}
			for _, i := range single {
				out[i].err = err
			}
			batch, single = nil, nil
		}
		defer ss.detach()
		for j := range batch {
			batch[j].sess = ss
		}
	}
	for j, err := range s.putBatch(ctx, "acquire", batch) {
		i := batch[j].idx
		switch {
		case err == nil:
			out[i].g, out[i].sess = batch[j].grant, ss
			if ss != nil {
				out[i].g.ExpiresAt = ss.expiresAt()
			}
			if out[i].g.PreviousUnclean {
				s.cfg.logger.Info("lease: took over from a holder that did not release",
					"key", keys[i], "epoch", out[i].g.Epoch)
			}
		case errors.Is(err, ErrConflict), errors.Is(err, errSuperseded):
			single = append(single, i) // someone wrote first: Acquire re-reads and names the winner
		default:
			out[i].err = err
		}
	}
	locks.unlock()
	for _, i := range single {
		out[i].g, out[i].sess, out[i].err = s.acquireIn(ctx, keys[i], ss)
	}
	for _, r := range out {
		if r.err == nil {
			s.obs.acquired(r.g) // once: a grant Acquire reported is not reported again
		}
	}
	return out
}

// lockValid locks a valid key if it is free.
func (s *DocumentStore) lockValid(key string) (func(), bool) {
	if ValidateKey(key) != nil {
		return nil, false
	}
	return s.locks.tryLock(key)
}

// placesWithKeys: a look of this many keys or fewer reads their places
// with them, in one round trip; a larger one reads only the places it
// needs, in a second one, rather than twice the rows.
const placesWithKeys = 500

// decideMany reads keys in one round trip and decides each (R4), by its
// session where its record names one (R20–R22): it answers out[index[j]]
// for keys that need no write and returns the writes of the rest, after
// ending each dead session they need ended, once (R21); and the indices
// of keys to take one at a time.
//
// Where the store keeps places (R25), it reads the places of the keys it
// would take, or whose waiters would take their places, with one more
// round trip (or with the keys, for a small look), decides those by their
// places, and returns the claims on places of waiters that found their
// keys held.
func (s *DocumentStore) decideMany(ctx context.Context, br BatchReader, keys []string, index []int, out []grantResult, waited []time.Duration) ([]batchWrite, []int, []placeClaim) {
	if len(keys) == 0 {
		return nil, nil, nil
	}
	read := keys
	if s.placesOn() && len(keys) <= placesWithKeys { // their places in the same round trip
		read = make([]string, 0, 2*len(keys))
		read = append(read, keys...)
		for _, key := range keys {
			read = append(read, placeKey(key))
		}
	}
	results, err := s.getMany(ctx, br, read)
	if err == nil && len(results) != len(read) {
		err = fmt.Errorf("driver answered %d of %d reads", len(results), len(read))
	}
	var prefetched []GetResult // the places read with the keys, by key
	if err == nil && len(read) > len(keys) {
		results, prefetched = results[:len(keys)], results[len(keys):]
	}
	var (
		dm    = decisions{waited: waited, now: s.now(), out: out}
		seen  = sessionsSeen{}
		later []keyDecision // keys whose place decides: read with one more round trip
		// laterPlaces: their places, when read with the keys
		laterPlaces []GetResult
	)
	for j, key := range keys {
		i := index[j]
		if err != nil {
			out[i].err = &StorageError{Op: "acquire", Key: key, Err: err}
			continue
		}
		r := results[j]
		rec, version, rerr := s.readResult("acquire", key, r.Rec, r.Version, r.Err)
		if rerr != nil {
			out[i].err = rerr
			continue
		}
		kd := keyDecision{idx: i, key: key, rec: rec, version: version}
		kd.mine, kd.isMine = s.heldAt(key, rec)
		if mutant == mutantBatchForgetsTable {
			kd.isMine = false
		}
		if kd.view, err = s.viewKey(ctx, "acquire", key, rec, mineOrNil(kd.mine, kd.isMine), dm.now, seen); err != nil {
			out[i].err, err = err, nil
			continue
		}
		d := s.decideAcquire(kd.view, kd.isMine, dm.now)
		if s.placesOn() && rec != nil && (d.Err == nil && !d.Reuse || errors.Is(d.Err, ErrHeld) && waitedFor(waited, i) > 0) {
			later = append(later, kd) // it would take the key, or take its place: the place decides (R25)
			if prefetched != nil {
				laterPlaces = append(laterPlaces, prefetched[j])
			}
			continue
		}
		dm.apply(kd, d, place{})
	}
	s.decideByPlaces(ctx, br, later, laterPlaces, &dm, seen)
	batch, single := s.killFirst(ctx, dm.batch, out)
	return batch, single, dm.claims
}

// keyDecision is what decideMany knows of one key before deciding it.
type keyDecision struct {
	idx     int // the caller's index
	key     string
	rec     *Record
	version uint64
	mine    heldGrant
	isMine  bool
	view    keyView
}

// decisions gathers decideMany's answers: the writes, the claims on
// places, and each key's answer in out.
type decisions struct {
	waited []time.Duration
	now    time.Time
	out    []grantResult
	batch  []batchWrite
	claims []placeClaim
}

// apply takes d, the decision on kd, whose place is p.
func (dm *decisions) apply(kd keyDecision, d acquireOutcome, p place) {
	i := kd.idx
	switch {
	case d.Err != nil:
		dm.out[i].err = d.Err
		dm.out[i].placed = kd.view.place.Mine
		if c, ok := claimFor(i, kd.key, kd.rec, p, kd.view.place, waitedFor(dm.waited, i), dm.now); ok && errors.Is(d.Err, ErrHeld) {
			dm.claims = append(dm.claims, c)
		}
	case d.Reuse:
		dm.out[i].g, dm.out[i].sess = kd.mine.current(), kd.mine.sess
	default:
		g := d.Next
		g.Key = kd.key
		w := batchWrite{idx: i, grant: g, pre: Precondition{Absent: kd.rec == nil, Version: kd.version}}
		if kd.view.verdict.Kill {
			w.kill = kd.view.sess
		}
		dm.batch = append(dm.batch, w)
	}
}

// decideByPlaces reads the places of the keys in later, in one round
// trip unless they were read already (prefetched), and decides each by
// its place (R25).
func (s *DocumentStore) decideByPlaces(ctx context.Context, br BatchReader, later []keyDecision, prefetched []GetResult, dm *decisions, seen sessionsSeen) {
	if len(later) == 0 {
		return
	}
	pkeys := make([]string, len(later))
	for j, kd := range later {
		pkeys[j] = placeKey(kd.key)
	}
	results, err := prefetched, error(nil)
	if len(prefetched) != len(later) {
		results, err = s.getMany(ctx, br, pkeys)
	}
	if err == nil && len(results) != len(pkeys) {
		err = fmt.Errorf("driver answered %d of %d reads", len(results), len(pkeys))
	}
	for j, kd := range later {
		if err != nil {
			dm.out[kd.idx].err = &StorageError{Op: "acquire", Key: kd.key, Err: fmt.Errorf("its place: %w", err)}
			continue
		}
		p, perr := s.placeResult("acquire", kd.key, results[j].Rec, results[j].Version, results[j].Err)
		if perr == nil {
			kd.view.place, perr = s.judgePlaceAt(ctx, "acquire", kd.key, p, kd.rec, dm.now, seen)
		}
		if perr != nil {
			dm.out[kd.idx].err = perr
			continue
		}
		dm.apply(kd, s.decideAcquire(kd.view, kd.isMine, dm.now), p)
	}
}

// waitedFor is how long the waiter of the key at index i has waited; 0
// when waited says nothing of it.
func waitedFor(waited []time.Duration, i int) time.Duration {
	if i < len(waited) {
		return waited[i]
	}
	return 0
}

// killFirst ends, once each, the dead sessions that batch's writes need
// ended before they take their keys (R21). A write whose session failed
// to end gets the error; one whose session was renewed meanwhile goes to
// the one-key acquire, which reads again and names the holder.
func (s *DocumentStore) killFirst(ctx context.Context, batch []batchWrite, out []grantResult) (kept []batchWrite, single []int) {
	type outcome struct {
		renewed bool
		err     error
	}
	var done map[*seenSession]outcome
	kept = batch[:0]
	for _, w := range batch {
		if w.kill == nil {
			kept = append(kept, w)
			continue
		}
		o, ok := done[w.kill]
		if !ok {
			if done == nil {
				done = make(map[*seenSession]outcome)
			}
			o.renewed, o.err = s.killSession(ctx, w.kill)
			done[w.kill] = o
		}
		switch {
		case o.err != nil:
			out[w.idx].err = o.err
		case o.renewed:
			single = append(single, w.idx)
		default:
			kept = append(kept, w)
		}
	}
	return kept, single
}

// putBatch applies a batch of writes, each as write would: nil once it
// landed, ErrConflict or errSuperseded when it did not, a *StorageError
// when its outcome stays unknown (R9, settled per key by one batched
// re-read). A driver that cannot batch gets one Put per write.
func (s *DocumentStore) putBatch(ctx context.Context, op string, batch []batchWrite) []error {
	return s.putBatchIn(ctx, op, batch, &batchScratch{})
}

// putBatchIn is putBatch working in bs's memory; the answers are in it.
func (s *DocumentStore) putBatchIn(ctx context.Context, op string, batch []batchWrite, bs *batchScratch) []error {
	errs := sized(bs.errs, len(batch))
	bs.errs = errs
	bd, ok := s.d.(BatchDriver)
	if !ok || len(batch) == 1 {
		for j, w := range batch {
			errs[j] = s.writeIn(ctx, op, w.grant, w.released, w.pre, w.sess)
		}
		return errs
	}
	if len(batch) == 0 {
		return errs
	}
	ws := sized(bs.ws, len(batch))
	bs.ws = ws
	for j, w := range batch {
		ws[j] = Write{Rec: recordOf(w.grant, w.released, w.sess), Pre: w.pre}
	}
	results, err := s.putMany(ctx, bd, ws)
	if err == nil && len(results) != len(ws) {
		err = fmt.Errorf("driver answered %d of %d writes", len(results), len(ws))
	}
	if err == nil {
		s.commitLanded(batch, results)
	}
	var (
		unknown []int
		pending []pendingWrite
	)
	for j := range batch {
		var version uint64
		perr := err
		if err == nil {
			if results[j].Err == nil {
				continue // in the table already
			}
			version, perr = results[j].Version, results[j].Err
		}
		p := batch[j].pending()
		if errs[j] = s.answered(op, &p, version, perr); isUnknown(errs[j]) {
			unknown, pending = append(unknown, j), append(pending, p)
		}
	}
	s.settleBatch(ctx, op, unknown, pending, errs)
	return errs
}

// commitLanded takes into the table, under one lock, every write of
// batch that landed, as answered does for one write.
func (s *DocumentStore) commitLanded(batch []batchWrite, results []PutResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tidy := len(s.pending) > 0 || len(s.unseen) > 0
	for j, w := range batch {
		if results[j].Err != nil {
			continue
		}
		if tidy {
			delete(s.pending, w.grant.Key)
			delete(s.unseen, w.grant.Key)
		}
		if w.entry != nil { // still the key's entry: the batch holds the key's lock
			w.entry.grant, w.entry.version = w.grant, results[j].Version
			continue
		}
		s.commitLocked(w.grant, w.released, results[j].Version, w.sess)
	}
}

// settleBatch re-reads the keys of the writes whose outcome is unknown
// (pending[n] is the write at unknown[n]), in one round trip when the
// driver can, and settles each (R9).
func (s *DocumentStore) settleBatch(ctx context.Context, op string, unknown []int, pending []pendingWrite, errs []error) {
	if len(unknown) == 0 {
		return
	}
	br, ok := s.d.(BatchReader)
	if !ok {
		for n, j := range unknown {
			rec, _, rerr := s.read(ctx, op, pending[n].want.Key)
			errs[j] = s.resolved(op, pending[n], errs[j], rec, rerr)
		}
		return
	}
	keys := make([]string, len(unknown))
	for n := range unknown {
		keys[n] = pending[n].want.Key
	}
	results, err := s.getMany(ctx, br, keys)
	if err == nil && len(results) != len(keys) {
		err = fmt.Errorf("driver answered %d of %d reads", len(results), len(keys))
	}
	for n, j := range unknown {
		var rec *Record
		rerr := err
		if err == nil {
			r := results[n]
			rec, _, rerr = s.readResult(op, keys[n], r.Rec, r.Version, r.Err)
		}
		errs[j] = s.resolved(op, pending[n], errs[j], rec, rerr)
	}
}

// ReleaseAll releases every grant this instance holds, each as Release
// would (R7, R13), with one batched write when the driver can batch. It
// goes on past failures and joins them; a grant whose write failed stays
// held, so calling ReleaseAll again finishes the job. The Helds of the
// released keys end as if released.
//
// Over a driver with sessions, it ends the store's session clean in one
// write, whatever the number of keys attached to it, after their Helds
// ended; every one of those keys is then free (R22). Hold's next key
// starts a new session.
func (s *DocumentStore) ReleaseAll(ctx context.Context) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	var errs []error
	if s.sessionsOn() {
		errs = s.releaseSessions(ctx)
	}
	return errors.Join(append(errs, s.releaseEach(ctx, s.heldGrants()))...)
}

// releaseSessions ends, each in one write, the sessions of the grants in
// the table and the store's live session (R22).
func (s *DocumentStore) releaseSessions(ctx context.Context) []error {
	sessions, err := s.sessionsToEnd(ctx)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, ss := range sessions {
		if err := s.waitAttached(ctx, ss); err != nil {
			return append(errs, err)
		}
		if err := s.releaseSession(ctx, ss); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// releaseEach releases grants, the table's grants kept per key, each as
// Release would, in one batch when the driver can batch.
func (s *DocumentStore) releaseEach(ctx context.Context, grants []Grant) error {
	var (
		locks  lockedKeys
		batch  []batchWrite
		single []Grant
		errs   []error
	)
	defer func() { locks.unlock() }()
	for _, g := range grants {
		if s.sessionOfGrant(g) != nil {
			continue // its session's end released it (releaseSessions), or will on a retry
		}
		unlock, err := s.locks.lock(ctx, g.Key) // in key order: batches never deadlock
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		locks = append(locks, unlock)
		s.mu.Lock()
		h, held := s.entry(g.Key)
		unsettled := len(s.pending[g.Key]) > 0
		s.mu.Unlock()
		if !held || unsettled || h.grant.Epoch != g.Epoch {
			single = append(single, g)
			continue
		}
		batch = append(batch, batchWrite{grant: h.grant, released: true, pre: Precondition{Version: h.version}})
	}
	if mutant == mutantLateEnd {
		defer s.holds.giveUp(grants...)
	} else {
		s.holds.giveUp(grants...) // their Helds end before any key can pass on (R17)
	}
	for j, err := range s.putBatch(ctx, "release", batch) {
		g := batch[j].grant
		switch {
		case err == nil:
			s.obs.released(g, true, nil)
		case errors.Is(err, ErrConflict), errors.Is(err, errSuperseded):
			single = append(single, g) // Release re-reads: the record may still name g (R7)
		default:
			errs = append(errs, err)
		}
	}
	locks.unlock()
	locks = nil
	for _, g := range single {
		err := s.release(ctx, g)
		s.obs.released(g, true, err)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// heldGrants returns the grants in the table, in key order.
func (s *DocumentStore) heldGrants() []Grant {
	s.mu.Lock()
	grants := make([]Grant, 0, len(s.held))
	for _, h := range s.held {
		grants = append(grants, h.grant)
	}
	s.mu.Unlock()
	slices.SortFunc(grants, func(a, b Grant) int { return strings.Compare(a.Key, b.Key) })
	return grants
}
