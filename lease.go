// Package lease gives one owner at a time exclusive use of a key, across
// goroutines, processes and hosts, for a bounded time, and tells the next
// holder when the previous one died without releasing.
//
// A [Store] hands out a [Grant] for a key. Every new holder of a key gets a
// larger [Grant.Epoch] than any holder before it, so the epoch is a fencing
// token: a protected resource that remembers the newest epoch it has seen and
// rejects older ones cannot be written by a holder whose lease has passed on.
//
// Grants from a [DocumentStore] expire at [Grant.ExpiresAt], judged against
// the store's own clock ([WithClock]); holders renew them while working and
// must stop before ExpiresAt minus the clock skew they allow for ([Hold] does
// both). Grants from a [LocalStore] never expire: the operating system's file
// lock ends them when the holder process dies.
//
// What is not guaranteed: a holder that keeps working past its expiry (a long
// GC pause, a frozen VM) can overlap with the next holder. Only fencing with
// the epoch makes such a late write harmless.
//
// All stores are safe for concurrent use by multiple goroutines.
//
// # Getting started
//
// Open a store, [Hold] a key, work while [Held.Context] lasts, and
// [Held.Release] the key when done:
//
//	store, err := lease.Open(ctx, "file:/var/lib/app/leases")
//	if err != nil {
//		return err
//	}
//	defer store.Close()
//
//	h, err := lease.Hold(ctx, store, "report:daily") // waits while another holds it
//	if err != nil {
//		return err
//	}
//	defer h.Release(context.Background())
//
//	// h.Context() ends if the lease is lost: the work must stop then.
//	// h.Grant().Epoch goes with every write, so that a late writer is refused.
//	return writeReport(h.Context(), h.Grant().Epoch)
//
// Hold renews the lease in the background (a "file:" grant never expires
// and needs no renewal). If the previous holder died
// without releasing, h.Grant().PreviousUnclean is true: recover first.
// [Run] does the same around a function, and [HoldEach] holds many keys at
// once. "sqlite:/var/lib/app/leases.db", "postgres://…" and "mongodb://…"
// work the same way once the program imports the driver's package.
//
// # Stores and drivers
//
// This package has the local store ([NewLocalStore], "file:" URLs) and the
// in-memory driver ([NewMemoryDriver], "memory:"), and imports no database
// library. The database drivers are packages of their own, each importing
// only its database's client:
//
//   - github.com/leasekit/lease/sqlite: "sqlite:" URLs (modernc.org/sqlite)
//   - github.com/leasekit/lease/mongodb: "mongodb://", "mongodb+srv://" (mongo-driver/v2)
//   - github.com/leasekit/lease/postgres: "postgres://", "postgresql://" (pgx/v5)
//
// Importing one registers its URL schemes with [Open] ([RegisterScheme]).
// A driver of your own implements [Driver]; package
// github.com/leasekit/lease/leasetest checks it against the contract.
//
// # The contract
//
// The documentation cites the rules of the contract by number: R1 (keys
// and owners) to R17 (a Held ends before its grant is given up) for every
// store, and R18 to R24 for sessions, which keep the keys of a store's
// Helds alive with one write per period (R18 sessions, R19 renewed never
// revived, R20 keys follow their session, R21 takeover ends the session
// first, R22 ending a session, R23 holders judge by the session, R24
// drivers state sessions). They are written out in docs/contract.md in
// the repository:
// https://github.com/leasekit/lease/blob/main/docs/contract.md
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/leasekit/lease/internal/rules"
)

// Grant is proof of holding a key. Its Epoch is the fencing token.
type Grant struct {
	Key             string
	Owner           string
	Epoch           uint64
	ExpiresAt       time.Time // zero: never expires (local store)
	PreviousUnclean bool      // the previous holder did not release: run crash recovery
}

// Record is what a backend keeps for a key.
type Record struct {
	Key       string
	Owner     string
	Epoch     uint64
	ExpiresAt time.Time
	Released  bool
	// Session is the id of the session the key is attached to (R20): the
	// key is live while it is not released and its session is. "" for a
	// key kept per key (R4–R7). A store writes a session-attached key's
	// own ExpiresAt far in the future (SessionKeyExpiry), so that a reader
	// that ignores sessions sees the key held, never free; Holder and
	// Holders return the session's expiry in its place.
	Session string
}

// Store hands out leases on keys. Implementations are safe for concurrent use.
type Store interface {
	// Acquire takes key for this store's owner (R4). If another owner holds
	// it, the error is a *HeldError matching ErrHeld.
	Acquire(ctx context.Context, key string) (Grant, error)
	// Renew extends a grant by the store's TTL, keeping its epoch (R6).
	// A grant that is no longer held, or has expired, fails with ErrLost.
	Renew(ctx context.Context, g Grant) (Grant, error)
	// Release gives the key up, keeping its epoch for the next holder (R7).
	Release(ctx context.Context, g Grant) error
	// Holder returns the live holder's record; ErrNotFound if nobody holds key now.
	Holder(ctx context.Context, key string) (Record, error)
	// Holders yields the live holders of every key that begins with prefix
	// ("" for all), in ascending byte order of key (R14). It creates,
	// changes and locks nothing that another store could notice.
	Holders(ctx context.Context, prefix string) iter.Seq2[Record, error]
	// ReleaseAll releases every grant this store instance holds (R13).
	// Per-key failures are joined; a key lost to another owner adds an
	// error matching ErrLost without stopping the others.
	ReleaseAll(ctx context.Context) error
	// Close stops the store and ends every Held made through it (R15).
	// Later calls fail with ErrClosed.
	Close() error
}

// DefaultTTL is how long a grant lasts unless WithTTL says otherwise.
const DefaultTTL = 30 * time.Second

// maxIDLen bounds keys and owners (R1).
const maxIDLen = rules.MaxIDLen

type config struct {
	owner  string
	ttl    time.Duration
	now    func() time.Time // WithClock's clock, else the host's (hostNow)
	logger *slog.Logger

	clockGiven bool             // WithClock was given: the server's clock is not asked (R8)
	hostNow    func() time.Time // the host's wall clock: time.Now, or a test's (internal/hostclock)

	observer   Observer // WithObserver; nil: none
	ownsDriver bool     // set by Open: Close closes the driver too
}

// Option configures a store.
type Option func(*config)

// WithOwner sets the identity written into records. It must be unique among
// live store instances; the default is "<hostname>-<pid>-<8 random hex>".
func WithOwner(id string) Option { return func(c *config) { c.owner = id } }

// WithTTL sets how long a grant lasts before it must be renewed. Use
// WithTTL to change DefaultTTL. The local store ignores it: its grants
// never expire.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithClock sets the clock every expiry is judged against (R8). Without
// it, a store over a driver that states Capabilities.ServerClock
// (PostgreSQL's) judges by its database server's clock, and any other
// store by time.Now. Tests pass a fake clock; a store given one never
// asks its server's clock.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.now, c.clockGiven = now, true }
}

// WithLogger sets where the store reports takeovers and unresolved writes.
// The default discards everything.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

func newConfig(opts []Option) (config, error) {
	c := config{ttl: DefaultTTL, hostNow: time.Now}
	for _, o := range opts {
		o(&c)
	}
	if !c.clockGiven {
		c.now = c.hostNow
	}
	if c.owner == "" {
		c.owner = DefaultOwner()
	}
	if err := validateOwner(c.owner); err != nil {
		return c, err
	}
	if c.ttl < time.Millisecond {
		return c, fmt.Errorf("lease: ttl %v is below the 1ms resolution of records", c.ttl)
	}
	if c.now == nil {
		return c, errors.New("lease: WithClock given a nil clock")
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// DefaultOwner returns a fresh owner id unique to this process:
// "<hostname>-<pid>-<8 random hex>".
func DefaultOwner() string {
	host, err := os.Hostname()
	if err != nil || validateOwner(host) != nil {
		host = "host"
	}
	host = host[:min(len(host), maxIDLen-40)] // room for the pid and the random suffix
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Errors, grouped by the operation that returns them. Match them with errors.Is.
var (
	// ErrInvalidKey: a key or owner breaks R1. Storage was not touched.
	ErrInvalidKey = errors.New("lease: invalid key")
	// ErrClosed: the store or driver was closed.
	ErrClosed = errors.New("lease: store closed")

	// ErrHeld: Acquire found another live holder; errors.As gives a *HeldError.
	ErrHeld = errors.New("lease: held by another owner")
	// ErrEpochExhausted: the key's epoch reached math.MaxUint64 (R2).
	ErrEpochExhausted = errors.New("lease: epoch exhausted")

	// ErrLost: Renew or Release found the grant no longer held (R6, R7).
	ErrLost = errors.New("lease: lease lost")

	// ErrNotFound: Holder found nobody holding the key; Driver.Get found no record.
	ErrNotFound = errors.New("lease: not found")

	// ErrStorage: the backend failed; errors.As gives a *StorageError. Safe to retry.
	ErrStorage = errors.New("lease: storage error")
	// ErrCorrupt: a stored record cannot be read or parsed (R10).
	ErrCorrupt = errors.New("lease: corrupt record")
	// ErrConflict: a Driver.Put precondition did not hold; nothing was written.
	ErrConflict = errors.New("lease: write conflict")
)

// HeldError names the live holder of a key. It matches ErrHeld.
type HeldError struct {
	Key       string
	Owner     string
	Epoch     uint64
	ExpiresAt time.Time // zero for the local store
}

func (e *HeldError) Error() string {
	if e.ExpiresAt.IsZero() {
		return fmt.Sprintf("lease: %q held by %q (epoch %d)", e.Key, e.Owner, e.Epoch)
	}
	return fmt.Sprintf("lease: %q held by %q (epoch %d) until %s",
		e.Key, e.Owner, e.Epoch, e.ExpiresAt.Format(time.RFC3339Nano))
}

// Is reports whether target is ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

func heldBy(r Record) *HeldError {
	return &HeldError{Key: r.Key, Owner: r.Owner, Epoch: r.Epoch, ExpiresAt: r.ExpiresAt}
}

// StorageError reports a backend failure during Op on Key. It matches
// ErrStorage, and unwraps to the cause (which may match ErrCorrupt).
type StorageError struct {
	Op  string
	Key string
	Err error
}

func (e *StorageError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("lease: %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("lease: %s %q: %v", e.Op, e.Key, e.Err)
}

// Is reports whether target is ErrStorage.
func (e *StorageError) Is(target error) bool { return target == ErrStorage }

// Unwrap returns the cause.
func (e *StorageError) Unwrap() error { return e.Err }

// corrupt makes an error matching ErrCorrupt (R10).
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

func lost(key string, epoch uint64) error {
	return fmt.Errorf("%w: %q epoch %d", ErrLost, key, epoch)
}

// ValidateKey reports whether key obeys R1: 1 to 256 bytes of ASCII letters,
// digits and ". _ - : / @", with no leading or trailing "/", no empty
// segment and no "." or ".." segment. The error matches ErrInvalidKey.
func ValidateKey(key string) error {
	if len(key) == 0 || len(key) > maxIDLen {
		return fmt.Errorf("%w: %d bytes, want 1 to %d", ErrInvalidKey, len(key), maxIDLen)
	}
	for i := 0; i < len(key); i++ {
		if !keyByte(key[i]) {
			return fmt.Errorf("%w: %q: byte %#x at %d is not allowed", ErrInvalidKey, key, key[i], i)
		}
	}
	for rest := key; ; {
		seg, more, found := strings.Cut(rest, "/")
		switch seg {
		case "":
			return fmt.Errorf("%w: %q: leading, trailing or double slash", ErrInvalidKey, key)
		case ".", "..":
			return fmt.Errorf("%w: %q: %q segment", ErrInvalidKey, key, seg)
		}
		if !found {
			return nil
		}
		rest = more
	}
}

func keyByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("._-:/@", c) >= 0
}

// validateOwner checks R1's rule for owners: 1 to 256 bytes of printable
// ASCII without spaces.
func validateOwner(owner string) error {
	if err := rules.CheckOwner(owner); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidKey, err)
	}
	return nil
}
