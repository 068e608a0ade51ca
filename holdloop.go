package lease

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/leasekit/lease/internal/schedule"
)

// keeper is one store's loop for Hold: it renews every Held of the store,
// in batches where the store can batch (R12), ends each Held at its own
// deadline, ends them all when the store closes (R15), and looks for the
// keys that Holds wait for, many keys in one call. It runs one goroutine
// while it has Helds to renew or waiters, plus one per storage call in
// flight (a few), whatever the number of keys. Deadlines, renewals and
// looks are kept in schedules, so a wake costs O(log n) plus the keys it
// serves.
//
// Renewals and looks are separate lanes: a renewal never waits for a look
// to finish (R17), and a look starts only when no renewal is due.
//
// A key has at most one live Held per store (R16); other Holds of the key
// queue behind it, first come, first served. How a grant reaches a Held,
// and every way one is given up, a Held's or one nobody holds, with the
// Held ended before the write that frees the key (R17), is in giveup.go.
type keeper struct {
	s      Store
	ctx    context.Context // every call the keeper makes; ends at close
	cancel context.CancelFunc
	calls  sync.WaitGroup // the loop and every call in flight
	wake   chan struct{}  // pokes the loop; never replaced, so poking needs no lock

	mu         sync.Mutex                      // guards the fields below and every Held's schedule
	helds      map[string]*Held                // the live Held of each key (R16)
	queues     map[string][]*waiter            // each key's waiters, first come, first served
	spent      map[string]Grant                // the last grant a Held of the key had, while the store may hold it still
	settling   map[string]settle               // writes in flight that give a key's grant up
	places     map[string]bool                 // keys whose place the store has for this store's waiters (R25)
	claiming   []placeClaim                    // places to claim for waiters, as their looks found (R25)
	leaving    []string                        // places to clear: nobody of the store waits for them any more
	unplacing  bool                            // writePlaces runs
	sessions   map[*storeSession]*sessionRound // the Helds kept through each session of the store (holdsession.go)
	dues       *schedule.Schedule[*round]      // rounds by next renewal
	deadlines  *schedule.Schedule[*round]      // rounds by deadline
	lastRound  *round                          // the round made last, which Helds scheduled alike join
	roundSize  int                             // how many Helds the caller of joinLocked may schedule alike
	scratch    []*renewScratch                 // kept for the next renewal calls
	looks      *schedule.Schedule[*waiter]     // the first waiter of each free key, by next look
	renewing   int                             // renewal calls in flight
	lookPerKey time.Duration                   // time per key of recent looks (sizes the next)
	timedLook  bool                            // a look was timed: lookPerKey says something
	ttlSeen    time.Duration                   // the least TTL grants measured, for a store that states none (measureLocked)
	looking    bool                            // a look call is in flight
	ownLooks   int                             // looks of one key in flight beside it, for FailIfHeld (lookNowLocked)
	lastHold   *waiter                         // the store's last Hold of one key, which a Hold soon after may gather with
	running    bool                            // the loop goroutine is running
	stopped    bool                            // the store closed: no more Helds or waits
	users      int                             // callers between keeperFor and unuse (foreign keepers)

	wokenMu sync.Mutex
	woken   []*waiter // waiters whose store told of a release, for the loop to look at
}

// Bounds on the keeper's calls. A renewal batch or a look is split above
// maxBatch keys so that one call never holds the store for long (each
// call has a cost of its own: a round trip, a statement, buffers, so
// larger calls keep N keys for less); at most
// maxRenewCalls renewal calls run at once (more only while a failed batch
// is split); a look gets lookTimeout.
const (
	maxBatch      = 5000
	maxRenewCalls = 8
	lookTimeout   = 30 * time.Second
)

func newKeeper(s Store) *keeper {
	k := &keeper{
		s:        s,
		wake:     make(chan struct{}, 1),
		helds:    make(map[string]*Held),
		queues:   make(map[string][]*waiter),
		spent:    make(map[string]Grant),
		settling: make(map[string]settle),
		places:   make(map[string]bool),
		sessions: make(map[*storeSession]*sessionRound),
	}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.dues = schedule.New(func(r *round) time.Time { return r.due }, func(r *round) *int { return &r.dueAt })
	k.deadlines = schedule.New(func(r *round) time.Time { return r.deadline }, func(r *round) *int { return &r.deadlineAt })
	k.looks = schedule.New(func(w *waiter) time.Time { return w.due }, func(w *waiter) *int { return &w.lookAt })
	return k
}

// idleLocked reports whether the loop has nothing left to do.
func (k *keeper) idleLocked() bool {
	return k.deadlines.Len() == 0 && k.dues.Len() == 0 && len(k.queues) == 0 && len(k.sessions) == 0 &&
		k.renewing == 0 && !k.looking && k.ownLooks == 0
}

// startLocked runs the loop if it is not running. k.mu must be held.
func (k *keeper) startLocked() {
	if !k.running && !k.stopped {
		k.running = true
		k.calls.Add(1)
		go k.loop()
	}
}

// poke makes the loop look again now. It takes no lock.
func (k *keeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// newHeldLocked makes the live Held of g for waiter w, kept as p plans,
// and schedules its renewals: its session's, when g is attached to ss.
// g came from a call sent at sent: an acquire, or a renewal (renewal) of
// a short grant.
func (k *keeper) newHeldLocked(w *waiter, g Grant, ss *storeSession, sent reading, renewal bool, p holdPlan) *Held {
	h := &Held{s: k.s, k: k, key: g.Key, grant: g, renew: p.renew, margin: p.margin, ttl: p.ttl, sess: ss}
	h.ctx, h.cancel = context.WithCancelCause(context.WithoutCancel(w.ctx))
	k.helds[g.Key] = h
	if sp, ok := k.spent[g.Key]; ok && sp.Epoch < g.Epoch {
		delete(k.spent, g.Key)
	}
	if hw, ok := k.s.(heldWatcher); ok {
		hw.watchHeld(g) // before h is handed out: a loss from now on ends it
	}
	if ss != nil {
		k.joinSessionLocked(h)
		k.startLocked()
		k.poke()
	} else if !g.ExpiresAt.IsZero() {
		k.scheduleLocked(h, g, sent, renewal)
		k.startLocked()
		k.poke()
	}
	return h
}

// scheduleLocked plans h's next renewal and deadline after a grant g
// obtained by a call sent at sent, a renewal or an acquire. The deadline
// is R8's (grantDeadline), on the monotonic clock.
func (k *keeper) scheduleLocked(h *Held, g Grant, sent reading, renewal bool) {
	if g.ExpiresAt.IsZero() {
		return // never expires: nothing to renew
	}
	deadline := grantDeadline(g, sent, h.ttl, h.margin, renewal)
	h.mu.Lock()
	h.deadline = deadline
	h.mu.Unlock()
	h.retry, h.renewErr = max(h.renew/8, time.Millisecond), nil
	k.joinLocked(h, earliest(sent.mono.Add(h.renew), deadline.Add(-h.renew/4)), deadline)
}

// renewed installs a grant renewed by a call sent at sent, and reports
// whether h still holds (false: it ended meanwhile).
func (k *keeper) renewed(h *Held, next Grant, sent reading) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !h.install(next) {
		return false
	}
	if h.sess != nil { // its session was renewed: every Held of it was
		if sr := h.sr; sr != nil {
			sr.renewErr, sr.due = nil, h.sess.renewedAt().Add(least(sr.renews))
		}
		return true
	}
	k.scheduleLocked(h, next, sent, true)
	return true
}

// close ends every Held and waiter (R15), ends the calls in flight and
// waits for them and the loop to return.
func (k *keeper) close() {
	k.mu.Lock()
	k.stopped = true
	for _, h := range k.helds {
		if mutant != mutantCloseSkipsHolds {
			h.end(closedCause(h.Grant()), true)
		}
	}
	clear(k.helds)
	clear(k.sessions)
	k.dues.Clear()
	k.deadlines.Clear()
	k.lastRound = nil
	for _, ws := range k.queues {
		for _, w := range ws {
			k.answerLocked(w, HoldResult{Key: w.key, Err: ErrClosed})
		}
	}
	clear(k.queues)
	k.looks.Clear()
	k.cancel()
	k.mu.Unlock()
	k.poke()
	k.calls.Wait()
}

// loop is the keeper's goroutine. Each turn it ends the Helds past their
// deadline, starts the renewals that are due, then a look if no renewal
// is waiting for a lane, and sleeps until something is due, it is poked,
// or the store closes. It returns when nothing is left to do.
func (k *keeper) loop() {
	defer k.calls.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		k.mu.Lock()
		if k.stopped || k.idleLocked() {
			k.running = false
			k.mu.Unlock()
			return
		}
		now := time.Now()
		k.takeWokenLocked(now)
		k.expireLocked(now)
		k.expireSessionsLocked(now)
		k.startRenewalsLocked(now)
		k.startSessionRenewalsLocked(now)
		k.startLookLocked(now)
		next := k.nextWakeLocked(now)
		k.mu.Unlock()

		timer.Reset(next.Sub(now))
		select {
		case <-timer.C:
		case <-k.wake:
			if !timer.Stop() {
				<-timer.C
			}
		}
	}
}

// expireLocked ends every Held whose deadline has come: renewals kept
// failing until ExpiresAt minus the safety margin.
func (k *keeper) expireLocked(now time.Time) {
	if mutant == mutantNoDeadline {
		return // keep holding past the deadline
	}
	for {
		r, ok := k.deadlines.First()
		if !ok || now.Before(r.deadline) {
			return
		}
		for _, h := range r.members {
			if h != nil {
				k.expireHeldLocked(h)
			}
		}
	}
}

// expireHeldLocked ends h, whose deadline has come.
func (k *keeper) expireHeldLocked(h *Held) {
	g := h.Grant()
	cause := fmt.Errorf("%w: %q epoch %d was not renewed before its expiry minus the safety margin (%v)",
		ErrLost, g.Key, g.Epoch, h.margin)
	if h.renewErr != nil {
		cause = fmt.Errorf("%w; last renewal: %w", cause, quoted{h.renewErr})
	}
	k.endLocked(h, cause, true)
	k.observeLost(g, LossDeadline)
}

// nextWakeLocked is when the loop must look next: the earliest deadline,
// renewal or look.
func (k *keeper) nextWakeLocked(now time.Time) time.Time {
	next := now.Add(time.Hour)
	if r, ok := k.deadlines.First(); ok && mutant != mutantNoDeadline {
		next = earliest(next, r.deadline)
	}
	if r, ok := k.dues.First(); ok && k.renewing < maxRenewCalls {
		next = earliest(next, r.due)
	}
	if w, ok := k.looks.First(); ok && !k.looking {
		next = earliest(next, w.due)
	}
	for _, sr := range k.sessions {
		if mutant != mutantNoDeadline && len(sr.margins) > 0 {
			next = earliest(next, sr.deadline(most(sr.margins)))
		}
		if !sr.renewing && sr.live > 0 {
			next = earliest(next, sr.due)
		}
	}
	if next.Before(now) {
		return now
	}
	return next
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// oneLine returns err's text on one line without a leading "lease: ", for
// use as the last part of another error's message.
func oneLine(err error) string {
	return strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\n", "; "), "lease: ")
}

// quoted is an error quoted inside another's message: it reads as oneLine
// and still unwraps to the error, so errors.Is and errors.As see through it.
type quoted struct{ err error }

func (q quoted) Error() string { return oneLine(q.err) }
func (q quoted) Unwrap() error { return q.err }

// unbatchedCalls is how many one-key calls run at once on a store that
// cannot batch.
const unbatchedCalls = 16

// eachAtOnce runs call(i) for i in [0, n), a few at once; one call runs
// on the caller's goroutine, without a hand-off to another.
func eachAtOnce(n int, call func(i int)) {
	if n == 1 {
		call(0)
		return
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(unbatchedCalls, n) {
		wg.Go(func() {
			for i := range next {
				call(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// renewScratch is the keeper's memory of one renewal call, for up to
// maxBatch keys: its Helds, and the request and answers it passes to the
// store (the grants, their tickets, the results). The keeper keeps one per
// renewal call it may have in flight, for its next calls, so that renewing
// N keys every period does not allocate N-sized slices each time (each a
// fresh large allocation: pages to fault in and clear, then to give back).
// A store works in memory of its own (the DocumentStore's batchScratch).
type renewScratch struct {
	helds   []*Held
	grants  []Grant      // the request: the Helds' grants
	tickets []*heldGrant // and the store's table entries their last renewals answered
	out     []grantResult
}

// sized returns s cleared, with length n, reusing its array when it is
// large enough.
func sized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// scratchLocked returns a renewal call's scratch: a kept one, or a new
// one. k.mu must be held.
func (k *keeper) scratchLocked() *renewScratch {
	if n := len(k.scratch); n > 0 {
		sc := k.scratch[n-1]
		k.scratch = k.scratch[:n-1]
		return sc
	}
	return &renewScratch{}
}

// keepScratchLocked keeps sc for a later renewal call, unless enough are
// kept. k.mu must be held.
func (k *keeper) keepScratchLocked(sc *renewScratch) {
	if len(k.scratch) < maxRenewCalls {
		k.scratch = append(k.scratch, sc)
	}
}

// renewAll renews sc.grants through s: in batches when s can (with the
// tickets its last renewals answered), else a few at once. The results
// are in sc.out.
func renewAll(ctx context.Context, s Store, sc *renewScratch) []grantResult {
	if b, ok := s.(batchStore); ok {
		return b.renewMany(ctx, sc)
	}
	gs := sc.grants
	out := sized(sc.out, len(gs))
	sc.out = out
	eachAtOnce(len(gs), func(i int) { out[i].g, out[i].err = s.Renew(ctx, gs[i]) })
	return out
}

// startRenewalsLocked starts a renewal of every Held that is due, or will
// be within half its interval (early, so that the Helds of a store fall
// into step and share their batches; never late), in batches of at most
// maxBatch, with at most maxRenewCalls in flight.
func (k *keeper) startRenewalsLocked(now time.Time) {
	if r, ok := k.dues.First(); !ok || now.Before(r.due) {
		return
	}
	for k.renewing < maxRenewCalls {
		sc := k.scratchLocked()
		batch := sc.helds[:0]
		for len(batch) < maxBatch {
			r, ok := k.dues.First()
			if !ok || r.due.Sub(now) > r.renew/2 {
				break
			}
			batch = k.takeLocked(r, batch, maxBatch)
		}
		if sc.helds = batch; len(batch) == 0 {
			k.keepScratchLocked(sc)
			return
		}
		k.startRenewLocked(sc)
	}
}

// startRenewLocked starts one renewal call of sc.helds.
func (k *keeper) startRenewLocked(sc *renewScratch) {
	n := len(sc.helds)
	sc.grants, sc.tickets = sized(sc.grants, n), sized(sc.tickets, n)
	deadline := sc.helds[0].deadlineLocked()
	for i, h := range sc.helds {
		sc.grants[i], sc.tickets[i] = h.Grant(), h.ticket
		deadline = earliest(deadline, h.deadlineLocked())
	}
	k.renewing++
	k.calls.Add(1)
	go k.renew(sc, deadline)
}

// startRenewOfLocked starts one renewal call of batch, in a scratch of its
// own.
func (k *keeper) startRenewOfLocked(batch []*Held) {
	sc := k.scratchLocked()
	sc.helds = append(sc.helds[:0], batch...)
	k.startRenewLocked(sc)
}

// renew renews batch in one call, bounded by half the time to the
// earliest deadline among them, so that when the call hangs there is time
// left to try again. When a batch of several keys runs out of time, it is
// split in halves, each tried at once with its own bound: a key whose
// writes hang costs the other keys of its batch one bounded wait, never
// their leases (R12, R17).
// sc holds the batch's Helds, their grants and their tickets, and deadline
// is the earliest of their deadlines, taken under k.mu when the call was
// started; sc is kept for a later call once the answers are in.
func (k *keeper) renew(sc *renewScratch, deadline time.Time) {
	defer k.calls.Done()
	start := readClocks()
	bound := max(deadline.Sub(start.mono)/2, time.Millisecond)
	if mutant == mutantWholeBatch {
		bound = max(deadline.Sub(start.mono), time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(k.ctx, bound)
	results := renewAll(ctx, k.s, sc)
	timedOut := ctx.Err() != nil && k.ctx.Err() == nil
	cancel()

	k.mu.Lock()
	defer k.mu.Unlock()
	defer k.keepScratchLocked(sc)
	k.renewing--
	k.poke()
	again := k.answerRenewalsLocked(sc.helds, results, start, timedOut)
	if len(again) > 0 {
		half := len(again) / 2
		if half == 0 {
			half = 1
		}
		k.startRenewOfLocked(again[:half])
		if half < len(again) {
			k.startRenewOfLocked(again[half:])
		}
	}
}

// answerRenewalsLocked takes the answers of a renewal call of batch that
// began at start: a renewed Held moves to its next round, a lost one
// ends, and one whose storage failed retries sooner, unless the call ran
// out of time (timedOut): those it returns, to be split and tried again
// at once.
func (k *keeper) answerRenewalsLocked(batch []*Held, results []grantResult, start reading, timedOut bool) (again []*Held) {
	k.roundSize = len(batch)
	defer func() { k.roundSize = 0 }()
	now := time.Now()
	retryOf, retryAt := time.Duration(-1), now // Helds failing alike retry in one round
	for i, h := range batch {
		h.renewing = false
		r := results[i]
		if k.stopped {
			continue
		}
		if r.err == nil {
			if h.install(r.g) { // else it ended meanwhile
				h.ticket = r.ticket
				k.scheduleLocked(h, r.g, start, true)
			}
			continue
		}
		if h.ended() != nil {
			continue
		}
		switch cause := lossCause(r.err); {
		case cause != nil:
			k.endLocked(h, cause, true)
		case timedOut && len(batch) > 1 && mutant != mutantWholeBatch:
			h.renewErr = r.err
			h.renewing = true
			again = append(again, h)
		default: // storage failing: retry sooner; the deadline stops the work in time
			h.renewErr = r.err
			if h.retry != retryOf {
				retryOf, retryAt = h.retry, now.Add(jitter(h.retry))
			}
			h.retry = max(min(2*h.retry, h.renew/4), time.Millisecond)
			k.joinLocked(h, retryAt, h.deadlineLocked())
		}
	}
	return again
}

// round is a set of Helds of one store that share their next renewal and
// their deadline: the Helds that one call renewed or acquired together,
// whose grants expire at one time. The keeper schedules rounds rather
// than Helds, so that keeping N keys costs a schedule entry per call, not
// per key, and moving a Held to its next round is an append.
//
// A round is in the keeper's dues while it has members not yet taken for
// renewal, and in its deadlines while it has members at all. A member
// taken for renewal stays in its round, bound by its deadline, until its
// renewal's answer moves it to a round of its own or ends it.
type round struct {
	due      time.Time     // its members' next renewal, on the monotonic clock
	deadline time.Time     // when its members must stop working, monotonic
	renew    time.Duration // its members' renewal interval
	members  []*Held       // nil where a Held left
	live     int           // members that are not nil
	taken    int           // members[:taken] have been taken for renewal

	dueAt, deadlineAt int // its places in k.dues and k.deadlines (schedule)
}

// joinLocked moves h to the round of due and deadline: the round the
// keeper made last when it matches and none of it was taken yet, else a
// new one, sized for k.roundSize Helds. Helds answered by one call are
// scheduled one after the other with equal times, so they make one round.
func (k *keeper) joinLocked(h *Held, due, deadline time.Time) {
	k.leaveLocked(h)
	r := k.lastRound
	if r == nil || r.live == 0 || r.taken > 0 || r.renew != h.renew || !r.due.Equal(due) || !r.deadline.Equal(deadline) {
		r = &round{due: due, deadline: deadline, renew: h.renew, members: make([]*Held, 0, max(k.roundSize, 1))}
		k.lastRound = r
		k.dues.Set(r)
		k.deadlines.Set(r)
	}
	h.round, h.slot = r, len(r.members)
	r.members = append(r.members, h)
	r.live++
}

// leaveLocked takes h out of its round; a round left empty leaves the
// schedules.
func (k *keeper) leaveLocked(h *Held) {
	k.leaveSessionLocked(h)
	r := h.round
	if r == nil {
		return
	}
	r.members[h.slot], h.round = nil, nil
	if r.live--; r.live == 0 {
		k.dues.Remove(r)
		k.deadlines.Remove(r)
		r.members = nil
		if k.lastRound == r {
			k.lastRound = nil
		}
	}
}

// takeLocked appends to batch, up to limit, the members of r not yet
// taken and not already being renewed (a Confirm moved them here while a
// renewal was in flight), and marks them renewing. Once every member is
// taken, r leaves the dues.
func (k *keeper) takeLocked(r *round, batch []*Held, limit int) []*Held {
	for r.taken < len(r.members) && len(batch) < limit {
		h := r.members[r.taken]
		r.taken++
		if h != nil && !h.renewing {
			h.renewing = true
			batch = append(batch, h)
		}
	}
	if r.taken == len(r.members) {
		k.dues.Remove(r)
	}
	return batch
}

// deadlineLocked is when h must stop working; zero when it is in no round
// (its grant never expires, or it ended).
func (h *Held) deadlineLocked() time.Time {
	if h.sr != nil {
		return h.sr.deadline(h.margin)
	}
	if h.round == nil {
		return time.Time{}
	}
	return h.round.deadline
}

// byKey orders Helds by key.
func byKey(a, b *Held) int { return strings.Compare(a.key, b.key) }
