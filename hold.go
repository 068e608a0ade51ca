package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Backoff bounds for Hold's wait for a held key: the first retry comes
// after about holdMinBackoff, each later one waits twice as long, up to
// holdMaxBackoff, so that a key released early is picked up within a
// second while a crowd of waiters costs the store about one read per
// waiter per second.
const (
	holdMinBackoff = 50 * time.Millisecond
	holdMaxBackoff = time.Second
)

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
// margin, or Hold fails.
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

// Held is a lease kept alive in the background until Release, or until it
// can no longer be trusted; then Context ends. It is safe for concurrent use.
type Held struct {
	s      Store
	ctx    context.Context // Context(): ends on loss or Release
	cancel context.CancelCauseFunc
	renew  time.Duration // renewal interval; 0 for grants that never expire
	margin time.Duration
	done   chan struct{} // closed when the renewal goroutine has returned

	mu       sync.Mutex // guards the fields below
	grant    Grant      // the newest grant
	deadline time.Time  // grant.ExpiresAt - margin: stop working by then
	expiry   *time.Timer
	lostErr  error // why the lease was lost; nil while held or after a clean Release
	renewErr error // the last failed renewal's error, nil after a success
	stopped  bool  // Release has begun: no more renewals, losses or timers

	releaseMu  sync.Mutex // serialises Release calls; guards released
	released   bool       // the store has confirmed a release (or that it was lost)
	releaseErr error      // what that confirmation said
}

// Hold acquires key from s and keeps it: it renews the grant in the
// background and ends Held.Context as soon as the lease can no longer be
// trusted (R8). Call Release when the work is done.
//
// While another owner holds key, Hold retries with jittered exponential
// backoff until it gets the key or ctx ends; the error then matches ctx's
// error and, if the key was still held, ErrHeld. FailIfHeld makes it fail at
// once instead. Storage errors are retried the same way, except a corrupt
// record (ErrCorrupt).
//
// ctx bounds the wait only: Held.Context keeps ctx's values but not its
// cancellation, so a lease outlives a request-scoped ctx used to get it.
//
// Grants that never expire (the local store's) need no renewal: Hold then
// starts no goroutine, and Held.Context ends only at Release.
//
// Hold times renewals and the deadline with the time package (time.Now and
// timers; in tests, a testing/synctest bubble's virtual clock) and measures
// the TTL as the grant's ExpiresAt minus the time its Acquire began. It
// assumes the store judges expiry by the same clock (WithClock defaults to
// time.Now); any difference must fit in the safety margin, as must the
// skew between this host and the others sharing the store.
//
// A store instance holds a key at most once: a second Hold of the same key
// through the same store gets the same grant (R4c), and the first Release
// ends both. Use one Held per key per store.
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
	g, start, err := acquireWaiting(ctx, s, key, cfg.failIfHeld)
	if err != nil {
		return nil, err
	}
	h := &Held{s: s, grant: g, done: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	if g.ExpiresAt.IsZero() {
		close(h.done)
		return h, nil
	}
	if err := h.plan(cfg, g.ExpiresAt.Sub(start)); err != nil {
		h.cancel(err)
		close(h.done)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		return nil, errors.Join(err, s.Release(rctx, g))
	}
	h.mu.Lock()
	h.deadline = g.ExpiresAt.Add(-h.margin)
	h.expiry = time.AfterFunc(time.Until(h.deadline), h.expire)
	h.mu.Unlock()
	go h.keep()
	return h, nil
}

// plan sets the renewal interval and margin for a grant that lasts ttl.
func (h *Held) plan(cfg holdConfig, ttl time.Duration) error {
	h.renew, h.margin = cfg.renewEvery, cfg.margin
	if h.margin == 0 {
		h.margin = ttl / 6
	}
	if h.renew == 0 {
		h.renew = ttl / 3
	}
	if h.margin <= 0 || h.renew <= 0 || h.renew >= ttl-h.margin {
		return fmt.Errorf("lease: renewing every %v with a safety margin of %v does not fit a TTL of %v",
			h.renew, h.margin, ttl)
	}
	return nil
}

// acquireWaiting acquires key, retrying while it is held (unless
// failIfHeld) or storage fails, until ctx ends. It also returns when the
// successful attempt began: the grant's TTL is measured from then.
func acquireWaiting(ctx context.Context, s Store, key string, failIfHeld bool) (Grant, time.Time, error) {
	backoff := holdMinBackoff
	var held error // the last attempt that found key held, if any
	for {
		start := time.Now()
		g, err := s.Acquire(ctx, key)
		if err == nil {
			return g, start, nil
		}
		if errors.Is(err, ErrHeld) {
			held = err
		}
		switch {
		case failIfHeld:
			return Grant{}, start, err
		case ctx.Err() != nil: // perhaps during this attempt: its error may only say so
			return Grant{}, start, gaveUp(ctx, key, err, held)
		case !retryable(err):
			return Grant{}, start, err
		}
		wait := jitter(backoff)
		if he := (*HeldError)(nil); errors.As(err, &he) && !he.ExpiresAt.IsZero() {
			// Wake when the holder's grant runs out, if that comes sooner.
			wait = min(wait, max(time.Until(he.ExpiresAt), holdMinBackoff/2))
		}
		backoff = min(2*backoff, holdMaxBackoff)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Grant{}, start, gaveUp(ctx, key, err, held)
		}
	}
}

// gaveUp is Hold's error when ctx ends the wait: it matches ctx's error
// and, if any attempt found key held, ErrHeld (with that *HeldError), even
// when a later attempt failed otherwise or was cut short by ctx.
func gaveUp(ctx context.Context, key string, last, held error) error {
	if held != nil && !errors.Is(last, ErrHeld) {
		last = held
	}
	return fmt.Errorf("lease: gave up waiting for %q: %w", key, errors.Join(ctx.Err(), last))
}

// retryable reports whether waiting may cure err: the key is held, or
// storage failed in a way that is safe to retry.
func retryable(err error) bool {
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
// Its cause (context.Cause) matches ErrLost in both cases: a renewal found
// the key taken or expired, renewals kept failing until ExpiresAt minus
// the safety margin, or Release was called. Work protected by the lease
// must stop when it ends.
func (h *Held) Context() context.Context { return h.ctx }

// lost returns why the lease was lost, or nil if it was not.
func (h *Held) lost() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lostErr
}

// lose ends the context because the lease can no longer be trusted.
func (h *Held) lose(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loseLocked(cause)
}

func (h *Held) loseLocked(cause error) {
	if h.stopped || h.lostErr != nil {
		return
	}
	h.lostErr = cause
	if h.expiry != nil {
		h.expiry.Stop()
	}
	h.cancel(cause)
}

// expire runs when the deadline timer fires. A renewal may have moved the
// deadline just as the timer fired, so it checks the clock again.
func (h *Held) expire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Now().Before(h.deadline) {
		return
	}
	g := h.grant
	cause := fmt.Errorf("lease: %q epoch %d: not renewed by %s, its expiry minus the safety margin: %w",
		g.Key, g.Epoch, h.deadline.Format(time.RFC3339Nano), ErrLost)
	if h.renewErr != nil {
		cause = fmt.Errorf("%w (last renewal: %w)", cause, h.renewErr)
	}
	h.loseLocked(cause)
}

// keep renews the grant until the context ends. It is the one goroutine
// a Held owns; Release cancels it and waits for it. After a failed renewal
// it retries sooner, from an eighth of the interval up to a quarter, so
// that a short outage costs nothing while a long one ends the work at the
// deadline (expire) rather than at the first failure.
func (h *Held) keep() {
	defer close(h.done)
	next, retry := h.renew, max(h.renew/8, time.Millisecond)
	for {
		t := time.NewTimer(next)
		select {
		case <-h.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		err := h.renewOnce()
		switch {
		case err == nil:
			next, retry = h.renew, max(h.renew/8, time.Millisecond)
		case errors.Is(err, ErrLost):
			h.lose(err)
			return
		case errors.Is(err, ErrClosed), errors.Is(err, ErrInvalidKey):
			h.lose(fmt.Errorf("%w: cannot renew: %w", ErrLost, err))
			return
		default: // storage failing: retry sooner; expire() stops the work in time
			h.mu.Lock()
			h.renewErr = err
			h.mu.Unlock()
			next = jitter(retry)
			retry = max(min(2*retry, h.renew/4), time.Millisecond)
		}
	}
}

// renewOnce renews the current grant, bounded by the deadline, and
// installs the result.
func (h *Held) renewOnce() error {
	h.mu.Lock()
	g, deadline := h.grant, h.deadline
	h.mu.Unlock()
	ctx, cancel := context.WithDeadline(h.ctx, deadline)
	defer cancel()
	next, err := h.s.Renew(ctx, g)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped || h.lostErr != nil {
		return nil // too late: the work was already told to stop
	}
	h.grant, h.renewErr = next, nil
	h.deadline = next.ExpiresAt.Add(-h.margin)
	h.expiry.Reset(time.Until(h.deadline))
	return nil
}

// Confirm renews the lease now, synchronously, so that a caller about to
// do something destructive knows the lease is held at this moment and has
// a full TTL ahead. If the lease is no longer held (lost, released, store
// closed) it returns an error matching ErrLost, and Context ends as on any
// loss. Other errors (storage failing) leave the lease as it was.
func (h *Held) Confirm(ctx context.Context) (Grant, error) {
	h.mu.Lock()
	g, stopped, lostErr := h.grant, h.stopped, h.lostErr
	h.mu.Unlock()
	switch {
	case lostErr != nil:
		return Grant{}, lostErr
	case stopped:
		return Grant{}, fmt.Errorf("lease: %q epoch %d released: %w", g.Key, g.Epoch, ErrLost)
	}
	next, err := h.s.Renew(ctx, g)
	switch {
	case errors.Is(err, ErrLost):
		h.lose(err)
		return Grant{}, err
	case errors.Is(err, ErrClosed):
		err = fmt.Errorf("%w: %w", ErrLost, err)
		h.lose(err)
		return Grant{}, err
	case err != nil:
		return Grant{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lostErr != nil {
		return Grant{}, h.lostErr
	}
	if h.stopped {
		return Grant{}, fmt.Errorf("lease: %q epoch %d released: %w", g.Key, g.Epoch, ErrLost)
	}
	h.grant, h.renewErr = next, nil
	if h.expiry != nil {
		h.deadline = next.ExpiresAt.Add(-h.margin)
		h.expiry.Reset(time.Until(h.deadline))
	}
	return next, nil
}

// Release stops renewing, ends Context, waits for the renewal goroutine to
// return, and releases the grant in the store (R7). Calling it again after
// it returned nil does nothing and returns nil; after an error it tries
// the store again, so a failed release can be retried. If the lease was
// lost, the store's release fails with ErrLost unless nobody took the key.
func (h *Held) Release(ctx context.Context) error {
	h.releaseMu.Lock()
	defer h.releaseMu.Unlock()
	if h.released {
		return h.releaseErr
	}
	h.mu.Lock()
	if !h.stopped {
		h.stopped = true
		if h.expiry != nil {
			h.expiry.Stop()
		}
		g := h.grant
		h.cancel(fmt.Errorf("lease: %q epoch %d released: %w", g.Key, g.Epoch, ErrLost))
	}
	g := h.grant
	h.mu.Unlock()
	<-h.done
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
