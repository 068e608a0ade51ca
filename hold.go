package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
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

// Held is a lease kept alive until Release, or until it can no longer be
// trusted; then Context ends. It is safe for concurrent use.
//
// A Held costs no goroutine and no timer of its own: one loop per store
// renews every Held of that store in batches (R12) and ends each one's
// Context at its own deadline.
type Held struct {
	s      Store
	k      *keeper
	key    string
	ctx    context.Context // Context(): ends on loss or Release
	cancel context.CancelCauseFunc
	renew  time.Duration // renewal interval; 0 for grants that never expire
	margin time.Duration

	// Guarded by k.mu: the loop's schedule for this Held.
	due      time.Time     // next renewal, on the monotonic clock; zero: none
	deadline time.Time     // stop working by then (ExpiresAt - margin), monotonic; zero: never
	retry    time.Duration // the wait before the next retry of a failed renewal
	renewErr error         // the last failed renewal's error, nil after a success

	mu      sync.Mutex // guards the fields below; taken after k.mu, never before
	grant   Grant      // the newest grant
	lostErr error      // why the lease was lost; nil while held or after a clean Release
	stopped bool       // Release has begun: no more renewals or losses

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
// last look that completed, ErrHeld. The waits of one store share one
// loop that looks at all their keys in one batched read per round and
// takes every key that became free in one batched write. FailIfHeld makes
// Hold fail at once instead. Storage errors are retried the same way,
// except a corrupt record (ErrCorrupt) or a process out of descriptors.
//
// ctx bounds the wait only: Held.Context keeps ctx's values but not its
// cancellation, so a lease outlives a request-scoped ctx used to get it.
//
// Grants that never expire (the local store's) need no renewal; their
// Context ends at Release, or when the store is closed.
//
// Hold times renewals and deadlines on the monotonic clock (in tests, a
// testing/synctest bubble's virtual clock) and measures a grant's TTL as
// its ExpiresAt minus the time its Acquire or Renew began. It assumes the
// store judges expiry by the same clock (WithClock defaults to time.Now);
// any difference must fit in the safety margin, as must the skew between
// this host and the others sharing the store.
//
// A store instance holds a key at most once: a second Hold of the same key
// through the same store gets the same grant (R4c), and the first Release
// ends both.
func Hold(ctx context.Context, s Store, key string, opts ...HoldOption) (*Held, error) {
	var cfg holdConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.badOption != nil {
		return nil, cfg.badOption
	}
	if s == nil {
		return nil, errors.New("lease: Hold given a nil store")
	}
	if ttl := storeTTL(s); ttl > 0 {
		// Refuse a plan the store's TTL cannot keep before taking anything.
		if _, _, err := cfg.plan(ttl); err != nil {
			return nil, err
		}
	}
	k := keeperFor(s)
	prior, hadPrior := k.heldBefore(key)
	start := time.Now()
	g, err := s.Acquire(ctx, key)
	if err != nil && !cfg.failIfHeld && retryable(err) {
		since := k.observeWaitStart(key)
		g, start, err = k.wait(ctx, key, err)
		k.observeWaitEnd(key, since, g, err)
	}
	if err != nil {
		return nil, err
	}
	reused := hadPrior && prior.Epoch == g.Epoch && prior.Owner == g.Owner // R4c: not this Hold's to give back
	return k.hold(ctx, cfg, g, start, reused)
}

// storeTTL is the TTL of the grants s makes, when s says; 0 otherwise.
func storeTTL(s Store) time.Duration {
	if st, ok := s.(interface{ ttl() time.Duration }); ok {
		return st.ttl()
	}
	return 0
}

// retryable reports whether waiting may cure err: the key is held, or
// storage failed in a way that is safe to retry.
func retryable(err error) bool {
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		return false // out of descriptors: waiting would only hide it
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
	return h.grant
}

// Context returns a context that ends when the lease is lost or released.
// Its cause (context.Cause) matches ErrLost in every case: a renewal found
// the key taken or expired, renewals kept failing until ExpiresAt minus
// the safety margin, the store was closed (the cause then matches ErrClosed
// too), or Release was called. Work protected by the lease must stop when
// it ends.
func (h *Held) Context() context.Context { return h.ctx }

// lost returns why the lease was lost, or nil if it was not.
func (h *Held) lost() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lostErr
}

// lose ends the context because the lease can no longer be trusted, and
// reports whether it did (false: already lost or released).
func (h *Held) lose(cause error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped || h.lostErr != nil {
		return false
	}
	h.lostErr = cause
	h.cancel(cause)
	return true
}

// install takes a renewed grant, unless the lease already ended.
func (h *Held) install(next Grant) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped || h.lostErr != nil {
		return false
	}
	h.grant = next
	return true
}

// ended returns the error that Confirm reports for a lease that is over,
// or nil while it is held.
func (h *Held) ended() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lostErr != nil {
		return h.lostErr
	}
	if h.stopped {
		return releasedCause(h.grant)
	}
	return nil
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
	start := time.Now()
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

// Release stops renewing, ends Context, and releases the grant in the
// store (R7). Calling it again after it returned nil does nothing and
// returns nil; after an error it tries the store again, so a failed
// release can be retried. If the lease was lost, the store's release fails
// with ErrLost unless nobody took the key.
func (h *Held) Release(ctx context.Context) error {
	h.releaseMu.Lock()
	defer h.releaseMu.Unlock()
	if h.released {
		return h.releaseErr
	}
	h.k.remove(h)
	h.mu.Lock()
	g := h.grant
	if !h.stopped {
		h.stopped = true
		h.cancel(releasedCause(g))
	}
	h.mu.Unlock()
	err := h.s.Release(ctx, g)
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

// waitError is why Hold gave up waiting: its context ended; the last look
// that completed found the key held or storage failing; and, if any look
// found the key held, that look's *HeldError. It matches all of them (so
// ErrHeld whenever the key was found held), in one line.
type waitError struct {
	key  string
	ctx  error // the context's error
	held error // the last look that found the key held; nil if none did
	last error // the last completed look's error
}

func (e *waitError) Error() string {
	msg := fmt.Sprintf("lease: gave up waiting for %q: %v", e.key, e.ctx)
	if e.held != nil && e.held != e.last {
		msg += "; " + oneLine(e.held)
	}
	return msg + "; last look: " + oneLine(e.last)
}

func (e *waitError) Unwrap() []error {
	if e.held != nil && e.held != e.last {
		return []error{e.ctx, e.held, e.last}
	}
	return []error{e.ctx, e.last}
}
