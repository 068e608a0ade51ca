package lease

import (
	"context"
	"log/slog"
	"reflect"
	"sync"
	"time"
)

// The keeper and the stores: what each asks of the other, in one place.
//
// Hold works with any Store through its methods. The stores this package
// ships can do more, and the keeper finds what a store can do through the
// named interfaces below, as database/sql finds a driver's capabilities;
// their methods are unexported, so only this package's stores have them:
//
//   - keptStore: the store keeps its keeper in a keeperSlot (DocumentStore,
//     LocalStore). Another Store's keeper is kept in foreignKeepers while
//     in use: its type cannot carry one, and R16 needs one keeper per store.
//   - ttlStater: the store states the TTL of its grants, R8's T
//     (DocumentStore); otherwise the keeper measures it from the grants
//     it gets (measureLocked), across no step of the wall clock.
//   - loggingStore, observedStore: the store's logger and Observer, which
//     the keeper reports to (WithLogger, WithObserver).
//   - batchStore: the store renews and acquires many keys in one storage
//     call (R12) (DocumentStore); otherwise the keeper makes one-key calls,
//     a few at once.
//   - releaseWatcher: the store tells at once when a key may have become
//     free (LocalStore, through the kernel); otherwise waiters look on a
//     backoff.
//   - heldWatcher: the store tells at once when a grant it holds is lost
//     behind its back (LocalStore, a lock file replaced).
//   - serverClocked: the store judges expiry by its database server's
//     clock (DocumentStore on PostgreSQL, R8); the time left on a grant it
//     acquires is measured against that clock.
//
// A Store that wraps another and implements Unwrapper is kept through the
// innermost store it wraps.
//
// The stores call the keeper through their keeperSlot only: giveUp before
// a bare Release or ReleaseAll writes, giveUpSession before ReleaseAll
// ends a session (R17, in giveup.go), lost when the store finds a grant
// lost by itself, sessionEnded when it finds its session over (R19), and
// close, first in Close (R15).
// keptStore is a store that keeps its keeper in a keeperSlot.
type keptStore interface {
	Store
	keeperSlot() *keeperSlot
}

// ttlStater is a store that states the TTL of its grants (R8's T); 0:
// they never expire.
type ttlStater interface {
	ttl() time.Duration
}

// loggingStore is a store with a logger (WithLogger).
type loggingStore interface {
	logger() *slog.Logger
}

// observedStore is a store with an observer (WithObserver); nil: none.
type observedStore interface {
	observed() *observer
}

// batchStore is a store that renews and acquires many keys in few storage
// round trips (R12). Each result answers the grant or key at the same
// index. renewMany renews sc.grants, reads sc.tickets and answers in
// sc.out; it touches nothing else of sc, and works in memory of its own.
type batchStore interface {
	renewMany(ctx context.Context, sc *renewScratch) []grantResult
	acquireMany(ctx context.Context, keys []string, waited []time.Duration) []grantResult
}

// placeStore is a store that keeps waiters' places (R25): a look tells
// it how long each key's waiter waited (batchStore.acquireMany) and
// answers the claims on places it found due; the keeper has them written
// after the look, so that a slow write never holds up a look's answer,
// and has the places no waiter of the store needs any more cleared.
type placeStore interface {
	claimPlaces(ctx context.Context, claims []placeClaim) (landed []bool)
	leavePlaces(ctx context.Context, keys []string)
}

// handoffStore is a store that can release a key reserved for an owner
// (Held.Handoff, R25), when placesOn says it keeps places.
type handoffStore interface {
	placesOn() bool
	handoff(ctx context.Context, g Grant, owner string) error
}

// releaseWatcher is a store that can tell at once when a key may have
// become free: it calls wake, from any goroutine, until stop is called.
type releaseWatcher interface {
	watchRelease(key string, wake func()) (stop func(), err error)
}

// heldWatcher is a store that can tell at once when a grant it holds is
// lost behind its back: watchHeld is called, with k.mu held, when the
// Held of g is made, and the store ends it through keeperSlot.lost. It
// must not wait for the keeper.
type heldWatcher interface {
	watchHeld(g Grant)
}

// serverClocked is a store that judges expiry by its database server's
// clock (R8): the keeper measures the time left on a grant it acquires
// against that clock, read as the call is sent, not against this host's,
// so that a host behind the server does not count its lag as time left
// on a grant the store held already (R4c). ok is false while the store
// judges by this host's clock.
type serverClocked interface {
	serverNow() (now time.Time, ok bool)
}

// sendReading reads the clocks as a look's acquire call is sent: the
// wall reading is the store's server clock where it judges by one.
func (k *keeper) sendReading() reading {
	r := readClocks()
	if sc, ok := k.s.(serverClocked); ok {
		if now, ok := sc.serverNow(); ok {
			r.wall = now
		}
	}
	return r
}

// What each store this package ships can do.
var (
	_ keptStore     = (*DocumentStore)(nil)
	_ ttlStater     = (*DocumentStore)(nil)
	_ loggingStore  = (*DocumentStore)(nil)
	_ observedStore = (*DocumentStore)(nil)
	_ batchStore    = (*DocumentStore)(nil)
	_ serverClocked = (*DocumentStore)(nil)

	_ keptStore      = (*LocalStore)(nil)
	_ loggingStore   = (*LocalStore)(nil)
	_ observedStore  = (*LocalStore)(nil)
	_ releaseWatcher = (*LocalStore)(nil)
	_ heldWatcher    = (*LocalStore)(nil)
)

// grantResult answers one key of a batched renew or acquire.
type grantResult struct {
	g      Grant
	err    error
	ticket *heldGrant    // the store's table entry of a renewed grant, if it has one
	sess   *storeSession // the session an acquired grant is attached to (R20); nil: kept per key
	placed bool          // the key was held, and the store has its place (R25): it is next
	claim  *placeClaim   // the key was held, and its waiter is to take its place (R25)
}

// storeTTL is the TTL of the grants s makes, when s states it; 0 otherwise.
func storeTTL(s Store) time.Duration {
	if st, ok := s.(ttlStater); ok {
		return st.ttl()
	}
	return 0
}

// storeLogger is the logger of s, if it has one.
func storeLogger(s Store) *slog.Logger {
	if l, ok := s.(loggingStore); ok {
		return l.logger()
	}
	return slog.New(slog.DiscardHandler)
}

// observerOf returns the observer of s; nil for a store without one.
func observerOf(s Store) *observer {
	if o, ok := s.(observedStore); ok {
		return o.observed()
	}
	return nil
}

// keeperSlot is a store's keeper, made at its first Hold. The stores this
// package ship each embed one, so that each store instance finds its
// keeper without a table, and so that Close reaches it.
type keeperSlot struct {
	mu     sync.Mutex
	k      *keeper
	closed bool
}

func (ks *keeperSlot) keeper(s Store) *keeper {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.k == nil {
		ks.k = newKeeper(s)
		if ks.closed {
			ks.k.stopped = true
		}
	}
	return ks.k
}

func (ks *keeperSlot) current() *keeper {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.k
}

// close ends every Held and waiter of the store and waits for the
// keeper's calls to return (R15). The store calls it first in Close.
func (ks *keeperSlot) close() {
	ks.mu.Lock()
	ks.closed = true
	k := ks.k
	ks.mu.Unlock()
	if k != nil {
		k.close()
	}
}

// lost ends the live Held of g, if it has one, because the store found g
// lost by itself (the local store's lock file replaced, watchHeld). The
// cause must match ErrLost.
func (ks *keeperSlot) lost(g Grant, cause error) {
	k := ks.current()
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if h := k.helds[g.Key]; h != nil {
		if hg := h.Grant(); hg.Epoch == g.Epoch && hg.Owner == g.Owner {
			k.endLocked(h, cause, true)
		}
	}
}

// foreignKeepers holds the keepers of stores this package does not ship,
// while they are in use.
var foreignKeepers struct {
	sync.Mutex
	m map[Store]*keeper
}

// keepable reports whether s can have a keeper: a store of ours, or one
// whose value can be a map key (foreignKeepers), so that every Hold of it
// finds the same keeper (R16). A value that cannot (a struct holding a
// slice, or an interface whose value is such a struct) would get a keeper
// per call, and two Holds could share a grant: Hold refuses it.
func keepable(s Store) bool {
	if _, ok := s.(keptStore); ok {
		return true
	}
	return reflect.ValueOf(s).Comparable()
}

// keeperFor returns s's keeper (s is keepable); the caller calls unuse
// when it has registered what it keeps (a Held or a waiter keeps the
// keeper alive).
func keeperFor(s Store) *keeper {
	if ks, ok := s.(keptStore); ok {
		return ks.keeperSlot().keeper(s)
	}
	foreignKeepers.Lock()
	defer foreignKeepers.Unlock()
	if foreignKeepers.m == nil {
		foreignKeepers.m = make(map[Store]*keeper)
	}
	k, ok := foreignKeepers.m[s]
	if !ok {
		k = newKeeper(s)
		foreignKeepers.m[s] = k
	}
	k.mu.Lock()
	k.users++
	k.mu.Unlock()
	return k
}

// unuse ends a use that keeperFor began, and drops an idle foreign keeper
// from the table. Both locks are held while it decides, so two keepers of
// one store never exist.
func (k *keeper) unuse() {
	foreignKeepers.Lock()
	defer foreignKeepers.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ours := k.s.(keptStore); ours || foreignKeepers.m[k.s] != k {
		return // a store of ours: its slot keeps its keeper
	}
	if k.users--; k.users == 0 && k.idleLocked() && len(k.helds) == 0 && len(k.settling) == 0 {
		delete(foreignKeepers.m, k.s)
	}
}
