package lease

import (
	"context"
	"sync"
)

// keyLocks serialises calls on one key within one store instance, so that
// its table and the storage it mirrors change together. Calls on different
// keys do not wait for each other.
//
// A key's lock stays in m while the store's table holds the key kept per
// key (pinned), and the table's entry keeps a pointer to it, so that
// renewing thousands of held keys every period neither adds nor deletes
// map entries nor, with the entry at hand, looks them up. A key attached
// to a session is renewed with its session, not on its own: its lock is
// not pinned.
type keyLocks struct {
	mu   sync.Mutex          // guards m, free and every keyLock's refs, key and pinned
	m    map[string]*keyLock // present while some call holds or waits for the key, or it is pinned
	free []*keyLock          // unreferenced and unpinned, for reuse: an uncontended call allocates none
}

// maxFreeKeyLocks bounds keyLocks.free: enough for the keys of a
// renewal batch (maxBatch), so that a store renewing thousands of keys per
// period reuses its locks instead of allocating one per key and round.
const maxFreeKeyLocks = maxBatch

type keyLock struct {
	sem    chan struct{} // holds one token while the key is locked
	refs   int           // calls holding or waiting
	key    string        // the key it is pinned for
	pinned bool          // kept in m while the table holds key
}

// begin starts a store call on key: it refuses an invalid key (R1), an
// ended ctx and a closed store before touching anything, then waits for
// key's lock.
func (k *keyLocks) begin(ctx context.Context, key string, closed func() bool) (unlock func(), err error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if closed() {
		return nil, ErrClosed
	}
	return k.lock(ctx, key)
}

// lock waits for key's lock or for ctx to end.
func (k *keyLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	l := k.entryLocked(key)
	l.refs++
	k.mu.Unlock()

	select {
	case l.sem <- struct{}{}:
		return func() { <-l.sem; k.release(key, l) }, nil
	case <-ctx.Done():
		k.release(key, l)
		return nil, ctx.Err()
	}
}

// tryLock takes key's lock if it is free, without waiting.
func (k *keyLocks) tryLock(key string) (unlock func(), ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.takeFreeLocked(key, nil)
	if l == nil {
		return nil, false
	}
	return func() { <-l.sem; k.release(key, l) }, true
}

// takeFreeLocked locks key if no call holds or waits for it, and returns
// its lock; nil if it is busy. hint, if not nil, may be key's pinned lock
// (the table entry's), which spares the lookup. k.mu must be held.
func (k *keyLocks) takeFreeLocked(key string, hint *keyLock) *keyLock {
	l := hint
	if l == nil || !l.pinned || l.key != key {
		l = k.entryLocked(key)
	}
	if l.refs > 0 {
		return nil
	}
	l.refs = 1
	l.sem <- struct{}{}
	return l
}

// tryLockEach takes, without waiting and under one lock, the lock of
// each key of keys whose ok is true, if it is free; it clears ok for the
// keys it did not take. It notes the locks it took in taken (as long as
// keys, and cleared), for unlockEach, and returns it. A batch of thousands
// of keys thus costs one lock and no allocation per key. tickets, if not
// nil, are the table entries the keys had, whose pinned locks spare the
// lookups.
func (k *keyLocks) tryLockEach(keys []string, ok []bool, taken []*keyLock, tickets []*heldGrant) []*keyLock {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, key := range keys {
		if ok[i] {
			var hint *keyLock
			if tickets != nil && tickets[i] != nil {
				hint = tickets[i].lock
			}
			taken[i] = k.takeFreeLocked(key, hint)
			ok[i] = taken[i] != nil
		}
	}
	return taken
}

// pin keeps key's lock in m while the store's table holds key, and returns
// it for the table's entry.
func (k *keyLocks) pin(key string) *keyLock {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.entryLocked(key)
	l.key, l.pinned = key, true
	return l
}

// entryLocked returns key's lock in m, adding an unused one if it has
// none. k.mu must be held.
func (k *keyLocks) entryLocked(key string) *keyLock {
	l, ok := k.m[key]
	if !ok {
		if k.m == nil {
			k.m = make(map[string]*keyLock)
		}
		l = k.get()
		k.m[key] = l
	}
	return l
}

// unpin undoes pin once the table no longer holds l's key.
func (k *keyLocks) unpin(l *keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l.pinned = false
	k.dropIfUnusedLocked(l.key, l)
}

// unpinEach undoes pin for each of ls, under one lock.
func (k *keyLocks) unpinEach(ls []*keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, l := range ls {
		l.pinned = false
		k.dropIfUnusedLocked(l.key, l)
	}
}

// unlockEach gives back the locks of keys[i] for each i of at, which
// tryLockEach took (taken).
func (k *keyLocks) unlockEach(keys []string, taken []*keyLock, at []int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, i := range at {
		<-taken[i].sem // ours: a waiter's send may now take it
		k.releaseLocked(keys[i], taken[i])
	}
}

func (k *keyLocks) release(key string, l *keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.releaseLocked(key, l)
}

func (k *keyLocks) releaseLocked(key string, l *keyLock) {
	l.refs--
	k.dropIfUnusedLocked(key, l)
}

// dropIfUnusedLocked takes key's lock l out of m once no call holds or
// waits for it and it is not pinned.
func (k *keyLocks) dropIfUnusedLocked(key string, l *keyLock) {
	if l.refs == 0 && !l.pinned {
		delete(k.m, key)
		if len(k.free) < maxFreeKeyLocks {
			k.free = append(k.free, l) // unlocked, unreferenced, unpinned: safe to reuse
		}
	}
}

// get returns an unused keyLock. k.mu must be held. The free list is per
// store rather than a global sync.Pool: a lock's channel then never moves
// between testing/synctest bubbles, which the runtime forbids.
func (k *keyLocks) get() *keyLock {
	if n := len(k.free); n > 0 {
		l := k.free[n-1]
		k.free = k.free[:n-1]
		return l
	}
	return &keyLock{sem: make(chan struct{}, 1)}
}
