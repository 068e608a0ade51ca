package lease

import (
	"os"
	"path/filepath"
	"sync"
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
// instead of closing it (takeSpare, keepSpare).
func (s *LocalStore) watchRelease(key string, wake func()) (stop func(), err error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	name := lockName(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil, ErrClosed
	}
	if s.watch == nil {
		w, err := startWatch(s.root)
		if err != nil {
			return nil, err
		}
		s.watch = w
	}
	w := s.watch
	e := w.add(name, wake)
	s.watched[key]++
	var once sync.Once
	return func() { once.Do(func() { s.unwatch(key, w, name, e) }) }, nil
}

// unwatch ends one watchRelease: it drops the key's kept descriptor once
// nobody watches the key, and the inotify instance once nobody watches
// anything.
func (s *LocalStore) unwatch(key string, w *localWatch, name string, e *watchEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watch != w { // Close ended the watch already
		return
	}
	empty := w.remove(name, e)
	if s.watched[key]--; s.watched[key] <= 0 {
		delete(s.watched, key)
		if f := s.spare[key]; f != nil {
			delete(s.spare, key)
			f.Close()
		}
	}
	if empty {
		s.watch = nil
		w.stop() // the reader never takes s.mu, so waiting for it here is safe
	}
}

// takeSpare returns the descriptor a refused try on a watched key kept, if
// it is still open on the file at key's path; nil otherwise.
func (s *LocalStore) takeSpare(key string) (*os.File, fileID) {
	s.mu.Lock()
	f := s.spare[key]
	delete(s.spare, key)
	s.mu.Unlock()
	if f == nil {
		return nil, fileID{}
	}
	id, err := fileIDOf(f)
	if err == nil {
		var now fileID
		if now, err = pathID(filepath.Join(s.root, lockName(key))); err == nil && now.same(id) {
			return f, id
		}
	}
	f.Close() // the file was replaced: open the new one
	return nil, fileID{}
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
