package lease

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Backoff bounds for Hold's wait for a held key: the first retry comes
// after about holdMinBackoff, each later one waits twice as long, up to
// holdMaxBackoff, so that a key released early is picked up within a
// second. The waits of one store are looked at together, one batched read
// per round, so a crowd of waiters costs about one read per second.
const (
	holdMinBackoff = 50 * time.Millisecond
	holdMaxBackoff = time.Second
)

// watchedPoll is how often a waiter whose store tells it of releases
// (the local store's watchRelease) looks anyway, in case a notice was lost.
const watchedPoll = 30 * time.Second

// releaseTimeout bounds the Release that Run makes after fn returns, when
// Run's own context may already be over.
const releaseTimeout = 10 * time.Second

// HoldOption configures Hold and Run.
type HoldOption func(*holdConfig)

type holdConfig struct {
	failIfHeld bool
	renewEvery time.Duration // 0: a third of the TTL
	margin     time.Duration // 0: a sixth of the TTL
	badOption  error         // the first invalid option, reported by Hold
	many       bool          // HoldEach's: its waits take no places (R25)
}

// FailIfHeld makes Hold and Run fail at once with ErrHeld (a *HeldError)
// when another owner holds the key, instead of waiting for it.
func FailIfHeld() HoldOption { return func(c *holdConfig) { c.failIfHeld = true } }

// RenewEvery sets how often the lease is renewed while held. The default
// is a third of the TTL, so that two renewals can fail before the lease
// runs out. It must be positive and shorter than the TTL minus the safety
// margin, or Hold fails. Renewals of one store's leases are batched, so a
// renewal may come up to half an interval early, never late.
func RenewEvery(d time.Duration) HoldOption {
	return func(c *holdConfig) {
		if d <= 0 {
			c.setBad(fmt.Errorf("lease: RenewEvery(%v): want a positive duration", d))
		}
		c.renewEvery = d
	}
}

// SafetyMargin sets how long before a grant's expiry Hold gives the lease
// up when renewals keep failing: Held.Context ends at ExpiresAt - d. The
// margin must cover the clock skew between this process and every other
// process using the store (each judges expiry by its own clock, R8) plus
// the time the work needs to stop. The default is a sixth of the TTL (5s
// for DefaultTTL): far above the skew of NTP-synchronised hosts, while
// still leaving half the TTL to retry failed renewals. It must be positive
// and shorter than the TTL, or Hold fails.
func SafetyMargin(d time.Duration) HoldOption {
	return func(c *holdConfig) {
		if d <= 0 {
			c.setBad(fmt.Errorf("lease: SafetyMargin(%v): want a positive duration", d))
		}
		c.margin = d
	}
}

func (c *holdConfig) setBad(err error) {
	if c.badOption == nil {
		c.badOption = err
	}
}

// plan returns the renewal interval and margin for grants that last ttl.
func (c holdConfig) plan(ttl time.Duration) (renew, margin time.Duration, err error) {
	renew, margin = c.renewEvery, c.margin
	if margin == 0 {
		margin = ttl / 6
	}
	if renew == 0 {
		renew = ttl / 3
	}
	if margin <= 0 || renew <= 0 || renew >= ttl-margin {
		return 0, 0, fmt.Errorf("lease: renewing every %v with a safety margin of %v does not fit a TTL of %v",
			renew, margin, ttl)
	}
	return renew, margin, nil
}

// holdPlan is how a Held keeps its grants: its renewal interval and
// safety margin, and the TTL its store grants.
type holdPlan struct {
	renew, margin, ttl time.Duration
}

// reading is one reading of the clocks: time.Now's, whose monotonic part
// times deadlines and renewals, and the wall clock's, without a monotonic
// reading, which a grant's ExpiresAt (stamped by the store's clock, with
// none) is measured against. Outside tests the two are one reading.
type reading struct{ mono, wall time.Time }

// testWallClock, when a test sets it, is the wall clock the keeper
// measures grants against, so that a test can step it while the monotonic
// clock runs on, as NTP's step or a resumed VM does. nil: time.Now.
var testWallClock atomic.Pointer[func() time.Time]

// readClocks reads the clocks now.
func readClocks() reading {
	now := time.Now()
	if wall := testWallClock.Load(); wall != nil {
		return reading{now, (*wall)().Round(0)}
	}
	return reading{now, now.Round(0)}
}

// grantDeadline is R8's deadline of a Held's grant g, obtained by a call
// sent at sent, for a store that grants ttl: when the work it protects
// must stop unless a later renewal succeeds. It is kept on the monotonic
// clock: sent, plus the time g may be counted on, minus the safety margin.
//
// ExpiresAt was stamped inside the call by the store's clock, and carries
// no monotonic reading on a persisted driver, so ExpiresAt - sent counts
// any step of the wall clock between the two readings; every other
// process judges the grant by the stamp (R8), and takes the key ttl after
// it. So the time counted is never more than ttl: a forward step cannot
// move the deadline past the grant's expiry. A renewal counts ttl exactly:
// R6 stamps now + ttl after the call was sent, so a grant that seems to
// have less left was stamped by a clock behind this one (a backward step,
// or skew, which the margin covers), and counting it would turn a renewal
// that succeeded into a loss. An acquire may return a grant the store held
// already (R4c), with less left: it counts ExpiresAt - sent, at most ttl.
func grantDeadline(g Grant, sent reading, ttl, margin time.Duration, renewal bool) time.Time {
	left := ttl
	if !renewal {
		left = min(ttl, g.ExpiresAt.Sub(sent.wall))
	}
	return sent.mono.Add(left - margin)
}

// Held is a lease kept alive until Release, or until it can no longer be
// trusted; then Context ends. It is safe for concurrent use.
//
// A Held costs no goroutine and no timer of its own: one loop per store
// renews every Held of that store in batches (R12) and ends each one's
// Context at its own deadline. A Held has a grant of its own: no other
// Held, in this store or any other, shares it (R16).
type Held struct {
	s      Store
	k      *keeper
	key    string
	ctx    context.Context // Context(): ends on loss or Release
	cancel context.CancelCauseFunc
	renew  time.Duration // renewal interval; 0 for grants that never expire
	margin time.Duration
	ttl    time.Duration // the TTL its store grants (R8's T); 0 for grants that never expire
	sess   *storeSession // the session its key is attached to (R20); nil: renewed per key

	// Guarded by k.mu: the loop's schedule for this Held.
	round    *round        // its next renewal and deadline (holdloop.go); nil: none
	slot     int           // its index in round.members, or in sr.helds (it is in one at most)
	retry    time.Duration // the wait before the next retry of a failed renewal
	renewErr error         // the last failed renewal's error, nil after a success
	renewing bool          // a renewal of it is in flight
	ticket   *heldGrant    // its grant's entry in the store's table, from its last batched renewal
	sr       *sessionRound // its session's round, while it is live and kept through a session (holdsession.go)

	mu       sync.Mutex // guards the fields below; taken after k.mu, never before
	grant    Grant      // the newest grant
	deadline time.Time  // its grant's deadline (grantDeadline); zero if it never expires
	endErr   error      // why Context ended; nil while live
	lostErr  error      // endErr when the lease was lost rather than released

	releaseMu  sync.Mutex // serialises Release calls; guards released
	released   bool       // the store has confirmed a release (or that it was lost)
	releaseErr error      // what that confirmation said
}

// Hold acquires key from s and keeps it: it renews the grant in the
// background and ends Held.Context as soon as the lease can no longer be
// trusted (R8). Call Release when the work is done.
//
// While another owner holds key, Hold waits until it gets the key or ctx
// ends; the error then matches ctx's error and, if the key was held at the
// last look that completed, ErrHeld. While another Held of key made
// through s is live, Hold waits for it to end and then takes a grant of
// its own, with a new epoch (R16); waiters of one key in one store are
// served first come, first served. FailIfHeld makes Hold fail at once
// instead, with a *HeldError. Storage errors are retried, except a corrupt
// record (ErrCorrupt), a process out of descriptors, or storage it may not
// write (os.ErrPermission).
//
// The looks of one store are made together: concurrent Hold calls, and
// the keys of HoldEach, share batched storage calls (R12), so a thousand
// goroutines calling Hold at once cost a few round trips, not a thousand.
//
// ctx bounds the wait only: Held.Context keeps ctx's values but not its
// cancellation, so a lease outlives a request-scoped ctx used to get it.
//
// Grants that never expire (the local store's) need no renewal; their
// Context ends at Release, or when the store is closed.
//
// Hold times renewals and deadlines on the monotonic clock (in tests, a
// testing/synctest bubble's virtual clock): a Held's deadline is the time
// its last successful renewal was sent, plus the store's TTL, minus the
// safety margin (R8), so no step of the wall clock moves it past the
// grant's expiry, and none turns a renewal that succeeded into a loss. An
// acquired grant counts at most its ExpiresAt minus the time its Acquire
// began. A store that does not state its TTL (one not shipped here) has it
// measured from its grants, less any step of the wall clock seen during
// the call. The skew between this host's clock, the store's (WithClock
// defaults to time.Now) and the other hosts' must fit in the margin. The
// monotonic clock stops while the host is suspended: after a suspend or a
// VM pause, a Held may stay live up to the TTL minus the margin after its
// grant expired, which fencing covers.
//
// A Store that wraps another and implements Unwrapper is held through the
// store it wraps, so that the wrapper keeps batching and R15.
func Hold(ctx context.Context, s Store, key string, opts ...HoldOption) (*Held, error) {
	cfg, err := holdSetup(s, opts)
	if err != nil {
		return nil, err
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	k := keeperFor(innermost(s))
	defer k.unuse()
	ch := make(chan HoldResult, 1)
	ws := k.enqueue(ctx, cfg, []string{key}, ch)
	if len(ws) == 0 {
		r := <-ch // answered at once: closed, or FailIfHeld
		return r.Held, r.Err
	}
	select {
	case r := <-ch:
		return r.Held, r.Err
	case <-ctx.Done():
	}
	if err, gone := k.abandon(ws[0], ctx); gone {
		return nil, err
	}
	r := <-ch // answered just before ctx ended
	return r.Held, r.Err
}

// HoldResult is one key's outcome in HoldEach: its Held, or its error.
type HoldResult struct {
	Key  string
	Held *Held // nil when Err != nil
	Err  error
}

// HoldEach holds every key of keys, as Hold would, and yields each key
// once: its Held as soon as the key is held, or its error (FailIfHeld and a
// held key: a *HeldError; an invalid or repeated key; the context's end,
// for each key not yet held). Keys are taken in batches (R12) and yielded
// in no particular order, with no goroutine per key. Stopping the
// iteration stops the waiting and gives back any key taken but not yet
// yielded; Helds already yielded stay the caller's.
func HoldEach(ctx context.Context, s Store, keys []string, opts ...HoldOption) iter.Seq[HoldResult] {
	return func(yield func(HoldResult) bool) {
		cfg, err := holdSetup(s, opts)
		if err != nil {
			for _, key := range keys {
				if !yield(HoldResult{Key: key, Err: err}) {
					return
				}
			}
			return
		}
		k := keeperFor(innermost(s))
		defer k.unuse()
		valid, rejected := uniqueValidKeys(keys)
		ch := make(chan HoldResult, len(valid))
		cfg.many = true
		ws := k.enqueue(ctx, cfg, valid, ch)
		stop := func() {
			for _, w := range ws {
				k.abandon(w, ctx)
			}
			giveBackUnyielded(ch)
		}
		for _, r := range rejected {
			if !yield(r) {
				stop()
				return
			}
		}
		for range valid {
			var r HoldResult
			select {
			case r = <-ch:
			case <-ctx.Done():
				r = k.nextAfterEnd(ctx, ws, ch)
			}
			if !yield(r) {
				stop()
				return
			}
		}
	}
}

// nextAfterEnd returns the next result once ctx has ended: an answer that
// came before the end, or the end itself for a key still waited for.
func (k *keeper) nextAfterEnd(ctx context.Context, ws []*waiter, ch chan HoldResult) HoldResult {
	select {
	case r := <-ch:
		return r
	default:
	}
	for _, w := range ws {
		if err, gone := k.abandon(w, ctx); gone {
			return HoldResult{Key: w.key, Err: err}
		}
	}
	return <-ch // every waiter was answered: the answers are in ch
}

// uniqueValidKeys splits keys into the ones to hold, sorted, and the
// results of the others: invalid keys, and second mentions of a key. The
// keys are held and then renewed in the order given here, so that keys
// close in the store's order share calls: on SQLite, a renewal call then
// rewrites a few pages of the table rather than most of them.
func uniqueValidKeys(keys []string) (valid []string, rejected []HoldResult) {
	valid = make([]string, 0, len(keys))
	for _, key := range keys {
		if err := ValidateKey(key); err != nil {
			rejected = append(rejected, HoldResult{Key: key, Err: err})
			continue
		}
		valid = append(valid, key)
	}
	slices.Sort(valid)
	unique := valid[:0] // written behind the reading
	for _, key := range valid {
		if len(unique) > 0 && key == unique[len(unique)-1] {
			rejected = append(rejected, HoldResult{Key: key, Err: fmt.Errorf("lease: %q is listed twice", key)})
			continue
		}
		unique = append(unique, key)
	}
	return unique, rejected
}

// holdSetup checks Hold's options and store before anything is taken.
func holdSetup(s Store, opts []HoldOption) (holdConfig, error) {
	var cfg holdConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.badOption != nil {
		return cfg, cfg.badOption
	}
	if s == nil {
		return cfg, errors.New("lease: Hold given a nil store")
	}
	if !keepable(innermost(s)) {
		return cfg, fmt.Errorf("lease: Hold given a store of type %T that cannot be told apart from another (it is not comparable): pass a pointer to it", innermost(s))
	}
	if ttl := storeTTL(innermost(s)); ttl > 0 {
		// Refuse a plan the store's TTL cannot keep before taking anything.
		if _, _, err := cfg.plan(ttl); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// Unwrapper is a Store that wraps another, for metrics, logging or
// tracing. Hold, Run and HoldEach keep their leases through the store
// Unwrap returns (following it to the innermost store), so that a wrapper
// keeps the batched renewals and the close detection (R15) of the store it
// wraps. A wrapper that changes keys or grants (a tenant prefix) must not
// implement it.
type Unwrapper interface {
	Unwrap() Store
}

// innermost follows Unwrap from s to the store it wraps, at most a few
// levels deep.
func innermost(s Store) Store {
	for range 16 {
		u, ok := s.(Unwrapper)
		if !ok {
			return s
		}
		inner := u.Unwrap()
		if inner == nil {
			return s
		}
		s = inner
	}
	return s
}

// retryable reports whether waiting may cure err: the key is held, or
// storage failed in a way that is safe to retry.
func retryable(err error) bool {
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, os.ErrPermission) {
		return false // out of descriptors or not permitted: waiting would only hide it
	}
	return errors.Is(err, ErrHeld) || (errors.Is(err, ErrStorage) && !errors.Is(err, ErrCorrupt))
}

// jitter returns a random duration in [d/2, d), so that waiters spread out.
func jitter(d time.Duration) time.Duration {
	if d < 2 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half)
}

// Grant returns the current grant. Its Epoch, the fencing token, never
// changes while held; renewals move its ExpiresAt.
func (h *Held) Grant() Grant {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.grant
	if h.sess != nil {
		g.ExpiresAt = h.sess.expiresAt() // its session's (R20)
	}
	return g
}

// Deadline returns when Context ends unless a renewal succeeds first
// (R8): the time the last successful renewal (or the acquire) was sent,
// plus the store's TTL, minus the safety margin. It carries this
// process's monotonic reading, so time.Until(Deadline()) is the time left
// whatever the wall clock does; a process that must stop work of its own
// by then (lease run's guard) takes it from here. After Context ended it
// is the last grant's. It is zero for a grant that never expires.
func (h *Held) Deadline() time.Time {
	if h.sess != nil {
		return h.sess.renewedAt().Add(h.ttl - h.margin) // its session's (R8, R20)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline
}

// Context returns a context that ends when the lease is lost or released.
// Its cause (context.Cause) matches ErrLost in every case: a renewal found
// the key taken or expired, renewals kept failing until ExpiresAt minus
// the safety margin, the store was closed (the cause then matches ErrClosed
// too), or the grant was given up (Release, ReleaseAll, or a Release of
// its grant on the store). Work protected by the lease must stop when it
// ends; it ends before the write that frees the key (R17).
func (h *Held) Context() context.Context { return h.ctx }

// lost returns why the lease was lost, or nil if it was not.
func (h *Held) lost() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lostErr
}

// end ends the context with cause and reports whether it did (false: it
// had already ended). loss says whether the lease was lost rather than
// given up. Only the keeper calls it, with k.mu held.
func (h *Held) end(cause error, loss bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.endErr != nil {
		return false
	}
	h.endErr = cause
	if loss {
		h.lostErr = cause
	}
	h.cancel(cause)
	return true
}

// install takes a renewed grant, unless the lease already ended.
func (h *Held) install(next Grant) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.endErr != nil {
		return false
	}
	h.grant = next
	return true
}

// ended returns why the lease ended, or nil while it is held.
func (h *Held) ended() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.endErr
}

// Confirm renews the lease now, synchronously, so that a caller about to
// do something destructive knows the lease is held at this moment and has
// a full TTL ahead. If the lease is no longer held (lost, released, store
// closed) it returns an error matching ErrLost, and Context ends as on any
// loss. Other errors (storage failing) leave the lease as it was.
func (h *Held) Confirm(ctx context.Context) (Grant, error) {
	if err := h.ended(); err != nil {
		return Grant{}, err
	}
	start := readClocks()
	next, err := h.s.Renew(ctx, h.Grant())
	if err != nil {
		if cause := lossCause(err); cause != nil {
			h.k.lose(h, cause)
			return Grant{}, cause
		}
		return Grant{}, err
	}
	if !h.k.renewed(h, next, start) {
		return Grant{}, h.ended()
	}
	return next, nil
}

// lossCause returns the cause a Held ends with when a renewal failed with
// err, or nil when err leaves the lease standing (storage failing, which
// is retried until the deadline).
func lossCause(err error) error {
	switch {
	case errors.Is(err, ErrLost):
		return err
	case errors.Is(err, ErrClosed), errors.Is(err, ErrInvalidKey):
		return fmt.Errorf("%w: cannot renew: %w", ErrLost, err)
	}
	return nil
}

// Release ends Context, stops renewing and then releases the grant in the
// store (R7, R17): the work protected by the lease has been told to stop
// before the key can pass on. Calling it again after it returned nil does
// nothing and returns nil; after an error it tries the store again, so a
// failed release can be retried. If the lease was lost, the store's release
// fails with ErrLost unless nobody took the key.
func (h *Held) Release(ctx context.Context) error {
	h.releaseMu.Lock()
	defer h.releaseMu.Unlock()
	if h.released {
		return h.releaseErr
	}
	err := h.k.release(ctx, h)
	if err == nil || errors.Is(err, ErrLost) {
		h.released, h.releaseErr = true, err
	}
	return err
}

// Handoff releases the key reserved for owner (R25): the Held ends first
// (R17), then the store writes the key's place for owner and releases the
// key, so that the next holder is owner, with epoch + 1 and
// PreviousUnclean false, and nobody else can take the key while the place
// stands. If owner does not take the key within the store's TTL, the key
// is free as after Release. The receiving side is an ordinary Hold or
// HoldEach by a store of owner.
//
// A LocalStore keeps the reservation in the released record (its bound
// is WithTTL's, DefaultTTL by default). A store that keeps no places (a
// DocumentStore whose driver does not state Sessions, a Store of another
// package) returns an error matching errors.ErrUnsupported and gives
// nothing up. After a failed Handoff the
// grant is still the store's: Handoff or Release may be tried again.
// After a Release or Handoff that returned nil (or ErrLost) it reserves
// nothing and fails with ErrLost.
func (h *Held) Handoff(ctx context.Context, owner string) error {
	if err := validateOwner(owner); err != nil {
		return fmt.Errorf("lease: handoff of %q: owner: %w", h.key, err)
	}
	hs, ok := h.k.s.(handoffStore)
	if !ok || !hs.placesOn() {
		return fmt.Errorf("lease: handoff of %q: %w: the store keeps no places", h.key, errors.ErrUnsupported)
	}
	h.releaseMu.Lock()
	defer h.releaseMu.Unlock()
	if h.released { // released or handed off already: nothing is reserved now
		return fmt.Errorf("%w (given up already; handing it off now reserves nothing)", lost(h.key, h.Grant().Epoch))
	}
	err := h.k.handoff(ctx, h, hs, owner)
	if err == nil || errors.Is(err, ErrLost) {
		h.released, h.releaseErr = true, err
	}
	return err
}

// Run holds key while fn runs, then releases it. fn gets a context that
// ends when ctx does or the lease is lost, and the grant, whose Epoch is
// the fencing token for everything fn writes. Run returns fn's error,
// joined with an error matching ErrLost if the lease was lost while fn
// ran, and with the release's error if releasing failed. It waits for the
// key as Hold does.
func Run(ctx context.Context, s Store, key string, fn func(ctx context.Context, g Grant) error, opts ...HoldOption) (err error) {
	h, err := Hold(ctx, s, key, opts...)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		lostErr := h.lost()
		rerr := h.Release(rctx)
		if lostErr != nil {
			err = errors.Join(lostErr, err)
			if errors.Is(rerr, ErrLost) {
				return // the release failing too says nothing new
			}
		}
		err = errors.Join(err, rerr)
	}()
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(h.Context(), func() { cancel(context.Cause(h.Context())) })
	defer stop()
	return fn(fctx, h.Grant())
}
