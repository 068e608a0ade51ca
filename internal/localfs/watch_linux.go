package localfs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// localRewake is when a lock file's close event wakes its waiters a second
// time. A dying process's descriptor raises the event a moment before the
// kernel removes its flock (both happen in the final close of the file), so
// a waiter woken at once may still find the flock taken.
const localRewake = 5 * time.Millisecond

// Bounds on how often the watch looks for a root that went away: a new
// directory at its path is watched within localFollowMax of appearing.
const (
	localFollowMin = 10 * time.Millisecond
	localFollowMax = time.Second
)

// WatchSupported tells that the store can watch its root here.
const WatchSupported = true

// Watch is a store's inotify instance on its root: the waiters it
// wakes, and the lock files of the Helds it checks. One goroutine reads its
// events until stop.
//
// The watch is on the directory at the root's path, not on the path: when
// that directory is moved away or deleted, the watch follows the path
// (follow) to the directory found there then, or looks for one every so
// often while none is; each time it checks every Held and wakes every
// waiter, since none of the old directory's events tell of the new one.
type Watch struct {
	root string
	fd   int           // the inotify descriptor's number, for adding watches
	f    *os.File      // the inotify descriptor, in the runtime's poller
	done chan struct{} // closed when the reader has returned
	wd   atomic.Int32  // the watch of the directory at the root's path; -1 while none

	mu      sync.Mutex
	byName  map[string]map[*Waiter]struct{} // lock file name → its waiters
	held    map[string]*HeldCheck           // lock file name → the held flock to check
	rewake  map[string]*time.Timer          // the second wake per name
	retry   *time.Timer                     // the next look for a missing root
	pause   time.Duration                   // the pause before the next such look
	stopped bool
}

// Waiter is one registered wake (the store's watchRelease).
type Waiter struct{ wake func() }

// HeldCheck is one registered check (the store's watchHeld): check looks
// whether the lock file's name still names the locked file. It never
// blocks.
type HeldCheck struct{ check func() }

// watchMask is what the store's watch asks of the kernel about its root:
// lock files closed after being open for writing (a holder released or
// died), names created, deleted or moved in or out (a lock file replaced
// behind its holder's back), and the root itself deleted or moved.
const watchMask = unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// nameChanged are the events after which a name may no longer name the
// file it named.
const nameChanged = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO

// rootChanged are the events after which no name under the root can be
// trusted: the root went away or moved, the watch ended, or events were lost.
const rootChanged = unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_IGNORED | unix.IN_Q_OVERFLOW

// StartWatch watches root (watchMask), and starts the goroutine that reads
// the events.
func StartWatch(root string) (*Watch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err == unix.EMFILE {
		// Usually the per-user limit on inotify instances, not descriptors.
		return nil, fmt.Errorf("lease: watching %s: %w (is fs.inotify.max_user_instances reached?)", root, os.NewSyscallError("inotify_init1", err))
	}
	if err != nil {
		return nil, fmt.Errorf("lease: watching %s: %w", root, os.NewSyscallError("inotify_init1", err))
	}
	wd, err := unix.InotifyAddWatch(fd, root, watchMask)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lease: watching %s: %w", root, os.NewSyscallError("inotify_add_watch", err))
	}
	w := &Watch{
		root:   root,
		fd:     fd,
		f:      os.NewFile(uintptr(fd), "inotify:"+root),
		done:   make(chan struct{}),
		byName: make(map[string]map[*Waiter]struct{}),
		held:   make(map[string]*HeldCheck),
		rewake: make(map[string]*time.Timer),
	}
	w.wd.Store(int32(wd))
	go w.read()
	return w, nil
}

// Add registers wake for the lock file called name.
func (w *Watch) Add(name string, wake func()) *Waiter {
	e := &Waiter{wake: wake}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byName[name] == nil {
		w.byName[name] = make(map[*Waiter]struct{})
	}
	w.byName[name][e] = struct{}{}
	return e
}

// AddHeld registers check for the lock file called name, whose flock the
// store holds: one per name.
func (w *Watch) AddHeld(name string, check func()) *HeldCheck {
	e := &HeldCheck{check: check}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held[name] = e
	return e
}

// RemoveHeld drops e; empty reports whether nothing is left to watch.
func (w *Watch) RemoveHeld(name string, e *HeldCheck) (empty bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held[name] == e {
		delete(w.held, name)
	}
	return len(w.byName) == 0 && len(w.held) == 0
}

// Remove drops e; empty reports whether nothing is left to watch.
func (w *Watch) Remove(name string, e *Waiter) (empty bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byName[name], e)
	if len(w.byName[name]) == 0 {
		delete(w.byName, name)
		if t := w.rewake[name]; t != nil {
			t.Stop()
			delete(w.rewake, name)
		}
	}
	return len(w.byName) == 0 && len(w.held) == 0
}

// Stop ends the reader and closes the inotify descriptor.
func (w *Watch) Stop() {
	w.mu.Lock()
	w.stopped = true
	for _, t := range w.rewake {
		t.Stop()
	}
	if w.retry != nil {
		w.retry.Stop()
	}
	w.mu.Unlock()
	w.f.Close() // ends the reader's Read
	<-w.done
}

// inotifyEventLen is the fixed part of struct inotify_event: wd, mask,
// cookie, len, each 32 bits in the machine's byte order.
const inotifyEventLen = 16

// read wakes the waiters of every lock file named by an event, and checks
// the held lock file of a name created, deleted or moved. A change of the
// root, a lost watch or lost events (queue overflow) make the watch follow
// the root's path, check every held lock file and wake everyone. Events of
// a directory no longer at the path are ignored. Each event costs a map
// look-up, and a check (one statx) only for a held name.
func (w *Watch) read() {
	defer close(w.done)
	buf := make([]byte, 64*(inotifyEventLen+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return // stop closed the descriptor
		}
		for ev := buf[:n]; len(ev) >= inotifyEventLen; {
			wd := int32(binary.NativeEndian.Uint32(ev[0:]))
			mask := binary.NativeEndian.Uint32(ev[4:])
			nameLen := int(binary.NativeEndian.Uint32(ev[12:]))
			if inotifyEventLen+nameLen > len(ev) {
				break
			}
			name := string(bytes.TrimRight(ev[inotifyEventLen:inotifyEventLen+nameLen], "\x00"))
			ev = ev[inotifyEventLen+nameLen:]
			switch {
			case mask&unix.IN_Q_OVERFLOW == 0 && wd != w.wd.Load():
				// the old root's, after the watch followed the path
			case mask&rootChanged != 0:
				w.follow()
				w.checkAllHeld()
				w.wakeAll()
			case name != "":
				if mask&nameChanged != 0 {
					w.checkHeld(name)
				}
				w.wakeName(name, true)
			}
		}
	}
}

// follow watches the directory now at the root's path, in place of the
// one watched so far (the same one, after lost events), and reports
// whether it found one. While the path names no directory, it looks again
// after a pause that grows to localFollowMax, and checks and wakes everyone
// once it finds one (refollow).
func (w *Watch) follow() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return false
	}
	old := w.wd.Load()
	wd, err := unix.InotifyAddWatch(w.fd, w.root, watchMask)
	if err != nil {
		wd = -1
	}
	if old >= 0 && old != int32(wd) {
		// The old directory's watch goes (it may have gone with the
		// directory already: no matter), and so do its events.
		unix.InotifyRmWatch(w.fd, uint32(old))
	}
	w.wd.Store(int32(wd))
	if err == nil {
		w.pause = 0
		return true
	}
	w.pause = min(max(2*w.pause, localFollowMin), localFollowMax)
	if w.retry == nil {
		w.retry = time.AfterFunc(w.pause, w.refollow)
	} else {
		w.retry.Reset(w.pause)
	}
	return false
}

// refollow looks again for a root that went away; once it finds one, a
// Held made there and a waiter for a key there are watched, so it checks
// every Held and wakes every waiter.
func (w *Watch) refollow() {
	if w.follow() {
		w.checkAllHeld()
		w.wakeAll()
	}
}

// checkHeld checks the held lock file called name, if there is one.
func (w *Watch) checkHeld(name string) {
	if mutant == mutantHeldUnwatched {
		return // leave a Held live when its lock file was replaced
	}
	w.mu.Lock()
	e := w.held[name]
	if w.stopped {
		e = nil
	}
	w.mu.Unlock()
	if e != nil {
		e.check()
	}
}

// checkAllHeld checks every held lock file.
func (w *Watch) checkAllHeld() {
	if mutant == mutantHeldUnwatched {
		return
	}
	w.mu.Lock()
	checks := make([]func(), 0, len(w.held))
	for _, e := range w.held {
		checks = append(checks, e.check)
	}
	if w.stopped {
		checks = nil
	}
	w.mu.Unlock()
	for _, check := range checks {
		check()
	}
}

// wakeName calls the waiters of name, outside the lock (a wake may end its
// own watch). The first wake of an event arms the second (localRewake).
func (w *Watch) wakeName(name string, first bool) {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	wakes := make([]func(), 0, len(w.byName[name]))
	for e := range w.byName[name] {
		wakes = append(wakes, e.wake)
	}
	if first && len(wakes) > 0 {
		if t := w.rewake[name]; t != nil {
			t.Reset(localRewake)
		} else {
			w.rewake[name] = time.AfterFunc(localRewake, func() { w.wakeName(name, false) })
		}
	}
	w.mu.Unlock()
	for _, wake := range wakes {
		wake()
	}
}

// wakeAll calls every waiter.
func (w *Watch) wakeAll() {
	w.mu.Lock()
	names := make([]string, 0, len(w.byName))
	for name := range w.byName {
		names = append(names, name)
	}
	w.mu.Unlock()
	for _, name := range names {
		w.wakeName(name, true)
	}
}
