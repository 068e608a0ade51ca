package lease

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/leasekit/lease/internal/localfs"
)

// watchRelease calls wake (which never blocks) each time key's lock may
// have become free: its holder released it or its process died. It
// returns a function that ends the watch. It fails when the platform
// cannot watch; the caller then polls.
//
// Call Acquire once more after watchRelease returns: a release between
// the last refused Acquire and the start of the watch raises no wake. wake
// runs on the watch's goroutine and must not call the store.
//
// On Linux one inotify instance per store watches the root for lock files
// closed after being opened for writing (IN_CLOSE_WRITE): every holder's
// descriptor is writable, and the kernel closes a dead holder's
// descriptors. Nothing else closes a writable descriptor on a lock file
// without a change of holder, except a refused Acquire. So that a waiter's
// own refused tries do not wake it (and every other waiter) in an endless
// loop, a try on a watched key keeps its descriptor open for the next try
// instead of closing it (takeSpare, keepSpare). A lock file created,
// deleted or moved also wakes its waiters: a file replaced is a free one.
// The watch follows the root's path when another directory appears there
// (localfs.Watch), and wakes every waiter then; it looks at the path here
// too, before the caller's next try.
func (s *LocalStore) watchRelease(key string, wake func()) (stop func(), err error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	name := lockName(key)
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	var e *localfs.Waiter
	w, err := s.watchLocked(func(w *localfs.Watch) bool { e = w.Add(name, wake); return e != nil })
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.watched[key]++
	s.mu.Unlock()
	w.CheckRoot() // the caller's next try must look where the watch does
	var once sync.Once
	return func() { once.Do(func() { s.unwatch(key, w, name, e) }) }, nil
}

// unwatch ends one watchRelease: it drops the key's kept descriptor once
// nobody watches the key. The watch stops itself once it has watched
// nothing for a while (watchLocked).
func (s *LocalStore) unwatch(key string, w *localfs.Watch, name string, e *localfs.Waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watch != w { // Close ended the watch already
		return
	}
	w.Remove(name, e)
	if s.watched[key]--; s.watched[key] <= 0 {
		delete(s.watched, key)
		if f := s.spare[key]; f != nil {
			delete(s.spare, key)
			f.Close()
		}
	}
}

// localWatchIdle is how long the store's watch runs on with nothing to
// watch before it stops itself: a store that holds or waits for one key
// after another keeps one inotify instance, where closing one and
// starting another each time would cost every Release of a Held a wait
// in the kernel, longer than the rest of the Release on a fast disk.
const localWatchIdle = 5 * time.Second

// watchLocked registers with the store's watch through add, which
// reports false when the watch has stopped (it stopped itself, idle),
// starting a watch when none runs or the last one stopped. It returns the
// watch add registered with. s.mu must be held.
func (s *LocalStore) watchLocked(add func(w *localfs.Watch) bool) (*localfs.Watch, error) {
	for {
		if s.watch == nil {
			w, err := localfs.StartWatch(s.root, s.watchIdle)
			if err != nil {
				return nil, err
			}
			s.watch = w
		}
		if w := s.watch; add(w) {
			return w, nil
		}
		s.watch.Stop() // its reader is returning; it never takes s.mu
		s.watch = nil
	}
}

// takeSpare returns the descriptor a refused try on a watched key kept, if
// it is still open on the file at key's path; nil otherwise.
func (s *LocalStore) takeSpare(key string) (*os.File, localfs.FileID) {
	s.mu.Lock()
	f := s.spare[key]
	delete(s.spare, key)
	s.mu.Unlock()
	if f == nil {
		return nil, localfs.FileID{}
	}
	id, err := localfs.IDOf(f)
	if err == nil {
		var now localfs.FileID
		if now, err = localfs.PathID(filepath.Join(s.root, lockName(key))); err == nil && now.Same(id) {
			return f, id
		}
	}
	f.Close() // the file was replaced: open the new one
	return nil, localfs.FileID{}
}

// keepSpare keeps a refused try's descriptor for the next try while key is
// watched, and closes it otherwise.
func (s *LocalStore) keepSpare(key string, f *os.File) {
	s.mu.Lock()
	keep := s.watched[key] > 0 && s.spare[key] == nil && !s.done
	if keep {
		s.spare[key] = f
	}
	s.mu.Unlock()
	if !keep {
		f.Close()
	}
}

// watchHeld watches the lock file of g while this store holds g's flock,
// so that the Held of g ends at once when the file is deleted, moved away
// or replaced behind the store's back, or the root's path comes to name
// another directory (within about a second when that raises no event on
// the watched one: localfs.Watch): another store would otherwise lock the
// new file at the path and hold the key at the same time. The keeper calls it when it makes the Held of g, with
// its mu held, before the Held is handed out; so it neither waits for the
// keeper nor for the watch's reader. The watch starts with the first
// watched key and stops localWatchIdle after the store gave up the last
// flock it watches (unwatchHeldLocked) and stopped waiting for any key, or
// when it closes: one inotify instance per store, whatever the number of
// keys.
//
// Where the store cannot watch (not Linux, or no inotify instance left),
// nothing ends the Held at once: the next Renew, Confirm or Release of g
// finds the file replaced (confirm, stillLinked) and reports ErrLost.
func (s *LocalStore) watchHeld(g Grant) {
	if !localfs.WatchSupported {
		return
	}
	s.mu.Lock()
	h := s.held[g.Key]
	if s.done || h == nil || h.watch != nil || h.grant.Owner != g.Owner || h.grant.Epoch != g.Epoch {
		s.mu.Unlock()
		return // given up already, or watched
	}
	check := func() {
		if !s.stillLinked(g.Key, h) {
			s.losses.add(heldLoss{g: g, h: h})
		}
	}
	w, err := s.watchLocked(func(w *localfs.Watch) bool { h.watch = w.AddHeld(lockName(g.Key), check); return h.watch != nil })
	s.mu.Unlock()
	if err != nil {
		s.unwatchedOnce.Do(func() {
			s.cfg.logger.Warn("lease: cannot watch lock files; a Held whose lock file is replaced ends at its next Confirm or Release",
				"root", s.root, "err", err)
		})
		return
	}
	// The root's path may name another directory than the watched one
	// (a symlink or a directory above the root changed, raising no event
	// on it): follow it first, so that the check below and every later
	// change of the lock file's name are seen in the directory the path
	// names. A change after this is seen within localfs.localRootCheck.
	w.CheckRoot()
	check() // the file may have gone before the watch began
}

// unwatchHeldLocked ends h's watchHeld. The watch stops itself once it
// has watched nothing for a while (watchLocked). s.mu must be held.
func (s *LocalStore) unwatchHeldLocked(key string, h *localLock) {
	w := s.watch
	if h.watch == nil || w == nil { // not watched, or Close ended the watch
		return
	}
	w.RemoveHeld(lockName(key), h.watch)
	h.watch = nil
}

// heldLoss is a held flock whose lock file the watch found replaced.
type heldLoss struct {
	g Grant
	h *localLock
}

// lossQueue hands the losses the watch finds to one goroutine, which ends
// their Helds and gives up their flocks: the watch's reader must never
// wait for the keeper or for a key, since both may be waiting for it. The
// goroutine runs only while there are losses to settle.
type lossQueue struct {
	mu      sync.Mutex
	pending []heldLoss
	running bool
	closed  bool // the store closed: Close settles nothing more
	calls   sync.WaitGroup
	settle  func(heldLoss)
}

// add queues l, and starts the goroutine if it is not running. It never
// blocks for long.
func (q *lossQueue) add(l heldLoss) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.pending = append(q.pending, l)
	if !q.running {
		q.running = true
		q.calls.Add(1)
		go q.run()
	}
}

// run settles the queued losses, in order, until none is left.
func (q *lossQueue) run() {
	defer q.calls.Done()
	for {
		q.mu.Lock()
		batch := q.pending
		q.pending = nil
		if len(batch) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		for _, l := range batch {
			q.settle(l)
		}
	}
}

// close takes no more losses and waits for the goroutine to return.
func (q *lossQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.pending = nil
	q.mu.Unlock()
	q.calls.Wait()
}

// settleLoss ends the Held of a grant whose lock file was replaced, then
// gives up its flock (R17: the Held ends first). A call in flight on the
// key keeps the flock for now: it, or the next call, finds the path
// replaced itself (stillLinked) and gives it up.
func (s *LocalStore) settleLoss(l heldLoss) {
	key := l.g.Key
	s.holds.lost(l.g, fmt.Errorf("%w: %q epoch %d: its lock file %s was deleted, moved or replaced",
		ErrLost, key, l.g.Epoch, s.lockPath(key)))
	unlock, ok := s.locks.tryLock(key)
	if !ok {
		return
	}
	defer unlock()
	if s.heldLock(key) == l.h {
		s.drop(key, l.h)
	}
}
