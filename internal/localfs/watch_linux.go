package localfs

import (
	"bytes"
	"encoding/binary"
	"errors"
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

// localRootCheck is how often the watch looks whether the root's path
// still names the directory it watches. A rename of the directory itself
// raises an event, but a symlink on the path pointed elsewhere, or a
// directory above the root moved, raises none on the watched directory:
// this look is what notices them. It costs one system call per store per
// look, whatever the number of keys, and runs only while the watch runs. A variable for tests only.
var localRootCheck = time.Second

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
// events until stop; it also keeps the watch's time (second wakes, looks at
// the root's path, the end of an idle watch), so that nothing of the watch
// runs after Stop.
//
// A watch left with nothing to watch runs on for its idle time, then
// stops itself: a store that holds one key after another keeps one
// instance, since closing an instance that watched a directory makes the
// closer wait in the kernel (0.2 to 1.5 ms on a loaded 2-core machine),
// longer than the rest of a Release of a lock file on a fast disk. Once
// stopped, Add and AddHeld return nil, and the store starts another watch.
//
// The watch is on the directory at the root's path, not on the path: when
// another directory appears at the path (the watched one moved away or
// deleted, a symlink on the path pointed elsewhere, a directory above the
// root moved), the watch follows the path (follow) to the directory found
// there then, or looks for one every so often while none is; each time it
// checks every Held and wakes every waiter, since none of the old
// directory's events tell of the new one. The watch learns that the path
// changed from the watched directory's events where there are any, when a
// Held or a waiter registers (CheckRoot), and else within localRootCheck.
type Watch struct {
	root string
	fd   int           // the inotify descriptor's number, for adding watches
	f    *os.File      // the inotify descriptor, in the runtime's poller
	done chan struct{} // closed when the reader has returned
	wd   atomic.Int32  // the watch of the directory at the root's path; -1 while none
	idle time.Duration // how long it runs on with nothing to watch; 0: until Stop

	mu       sync.Mutex
	byName   map[string]map[*Waiter]struct{} // lock file name → its waiters
	held     map[string]*HeldCheck           // lock file name → the held flock to check
	rewake   map[string]time.Time            // when each name's second wake is due
	rewakes  []dueRewake                     // rewake's entries in the order they fall due
	nextLook time.Time                       // when the reader next looks at the root's path
	pause    time.Duration                   // the pause between looks while the path names no directory
	sweep    bool                            // the path changed: the reader must check and wake everyone
	idleFrom time.Time                       // when the last registration left; zero while any is in
	stopped  bool
}

// dueRewake is one second wake, in Watch.rewakes. An entry whose due no
// longer matches Watch.rewake was postponed or dropped.
type dueRewake struct {
	name string
	due  time.Time
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
// the events. Once the last registration has left, the watch stops itself
// after idle; 0: it runs until Stop. Its starter registers at once.
func StartWatch(root string, idle time.Duration) (*Watch, error) {
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
		root:     root,
		idle:     idle,
		fd:       fd,
		f:        os.NewFile(uintptr(fd), "inotify:"+root),
		done:     make(chan struct{}),
		byName:   make(map[string]map[*Waiter]struct{}),
		held:     make(map[string]*HeldCheck),
		rewake:   make(map[string]time.Time),
		nextLook: time.Now().Add(localRootCheck),
	}
	w.wd.Store(int32(wd))
	go w.read()
	return w, nil
}

// Add registers wake for the lock file called name. It returns nil once
// the watch has stopped.
func (w *Watch) Add(name string, wake func()) *Waiter {
	e := &Waiter{wake: wake}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return nil
	}
	w.idleFrom = time.Time{}
	if w.byName[name] == nil {
		w.byName[name] = make(map[*Waiter]struct{})
	}
	w.byName[name][e] = struct{}{}
	return e
}

// AddHeld registers check for the lock file called name, whose flock the
// store holds: one per name. It returns nil once the watch has stopped.
func (w *Watch) AddHeld(name string, check func()) *HeldCheck {
	e := &HeldCheck{check: check}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return nil
	}
	w.idleFrom = time.Time{}
	w.held[name] = e
	return e
}

// RemoveHeld drops e.
func (w *Watch) RemoveHeld(name string, e *HeldCheck) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held[name] == e {
		delete(w.held, name)
	}
	w.emptiedLocked()
}

// Remove drops e.
func (w *Watch) Remove(name string, e *Waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byName[name], e)
	if len(w.byName[name]) == 0 {
		delete(w.byName, name)
		delete(w.rewake, name) // its queued entry falls due unmatched
	}
	w.emptiedLocked()
}

// emptiedLocked starts the watch's idle time when nothing is left to
// watch, and makes the reader set its deadline by it.
func (w *Watch) emptiedLocked() {
	if len(w.byName) > 0 || len(w.held) > 0 || !w.idleFrom.IsZero() {
		return
	}
	w.idleFrom = time.Now()
	if w.idle > 0 && w.idle < localRootCheck {
		w.pokeLocked() // the reader may be waiting for a later look
	}
}

// idleEndLocked is when an idle watch stops itself; zero while it
// watches something, or when it runs until Stop.
func (w *Watch) idleEndLocked() time.Time {
	if w.idle <= 0 || w.idleFrom.IsZero() {
		return time.Time{}
	}
	return w.idleFrom.Add(w.idle)
}

// Stop ends the reader and closes the inotify descriptor. Nothing of the
// watch runs once it returns: the reader ran every wake and check, and
// has returned.
func (w *Watch) Stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.f.Close() // ends the reader's Read
	<-w.done
}

// CheckRoot looks at once whether the root's path still names the watched
// directory, and follows it if not: the store calls it when a Held or a
// waiter registers, before it checks the Held's lock file or tries the
// key again, so that both happen under a watch of the directory the path
// names. After a change the reader checks every Held and wakes every
// waiter; that also covers any event of the new directory the reader read
// before the change was stored and dropped as the old one's. It costs one
// system call.
func (w *Watch) CheckRoot() {
	if !w.follow() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sweep = true
	w.pokeLocked()
}

// pokeLocked makes the reader's Read return now, so that it acts on sweep
// and on nextLook. w.mu must be held: the reader sets its deadline under
// it too, so a poke is never overwritten by an older deadline.
func (w *Watch) pokeLocked() {
	if !w.stopped {
		_ = w.f.SetReadDeadline(time.Unix(1, 0))
	}
}

// inotifyEventLen is the fixed part of struct inotify_event: wd, mask,
// cookie, len, each 32 bits in the machine's byte order.
const inotifyEventLen = 16

// read wakes the waiters of every lock file named by an event, and checks
// the held lock file of a name created, deleted or moved. A change of the
// root, a lost watch or lost events (queue overflow) make the watch follow
// the root's path, check every held lock file and wake everyone. Events of
// a directory no longer at the path are ignored. Each event costs a map
// look-up, and a check (one statx) only for a held name. Between events it
// runs the second wakes and the looks at the root's path as they fall due
// (tick).
func (w *Watch) read() {
	defer close(w.done)
	defer w.f.Close() // when it stopped itself; Stop's close comes first otherwise
	buf := make([]byte, 64*(inotifyEventLen+unix.NAME_MAX+1))
	for {
		if !w.setDeadline() {
			return
		}
		n, err := w.f.Read(buf)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return // stop closed the descriptor
		}
		w.events(buf[:n])
		w.tick(time.Now())
	}
}

// setDeadline makes the next Read return when the next second wake, look
// at the root or the end of its idle time falls due, or at once after a
// poke. It reports false once the watch is stopped, by Stop or by itself
// at the end of its idle time.
func (w *Watch) setDeadline() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	end := w.idleEndLocked()
	if !end.IsZero() && !time.Now().Before(end) {
		w.stopped = true
	}
	if w.stopped {
		return false
	}
	due := w.nextLook
	if !end.IsZero() && end.Before(due) {
		due = end
	}
	if w.sweep {
		due = time.Unix(1, 0)
	}
	if len(w.rewakes) > 0 && w.rewakes[0].due.Before(due) {
		due = w.rewakes[0].due
	}
	return w.f.SetReadDeadline(due) == nil
}

// events handles the events in ev, a buffer that Read filled.
func (w *Watch) events(ev []byte) {
	for len(ev) >= inotifyEventLen {
		wd := int32(binary.NativeEndian.Uint32(ev[0:]))
		mask := binary.NativeEndian.Uint32(ev[4:])
		nameLen := int(binary.NativeEndian.Uint32(ev[12:]))
		if inotifyEventLen+nameLen > len(ev) {
			return
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

// tick runs what fell due by now: the second wakes, and a look at the
// root's path (or the check and wake of everyone that CheckRoot asked
// for). A look that finds another directory at the path, or a directory
// where none was, checks every Held and wakes every waiter.
func (w *Watch) tick(now time.Time) {
	for _, name := range w.dueRewakes(now) {
		w.wakeName(name, false)
	}
	w.mu.Lock()
	sweep, look := w.sweep, !now.Before(w.nextLook)
	w.sweep = false
	w.mu.Unlock()
	if look && w.follow() {
		sweep = true
	}
	if sweep {
		w.checkAllHeld()
		w.wakeAll()
	}
}

// dueRewakes takes the names whose second wake is due by now.
func (w *Watch) dueRewakes(now time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var names []string
	for len(w.rewakes) > 0 && !w.rewakes[0].due.After(now) {
		r := w.rewakes[0]
		w.rewakes = w.rewakes[1:]
		if due, ok := w.rewake[r.name]; ok && due.Equal(r.due) {
			delete(w.rewake, r.name)
			names = append(names, r.name)
		}
	}
	if len(w.rewakes) == 0 {
		w.rewakes = nil // let the backing array go
	}
	return names
}

// follow watches the directory now at the root's path, in place of the
// one watched so far (the same one, after lost events), and reports
// whether that changed which directory is watched, or whether one is.
// inotify_add_watch answers the question itself: on the inode watched
// already it returns that watch's descriptor (the same device and inode
// number), so the look and the new watch are one system call, with no
// moment between them for the path to change. The next look is due in
// localRootCheck, or, while the path names no directory, after a pause
// that grows to localFollowMax.
func (w *Watch) follow() (changed bool) {
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
	next := localRootCheck
	if err == nil {
		w.pause = 0
	} else {
		w.pause = min(max(2*w.pause, localFollowMin), localFollowMax)
		next = w.pause
	}
	w.nextLook = time.Now().Add(next)
	if next < localRootCheck {
		w.pokeLocked() // the reader may be waiting for a later look
	}
	return old != int32(wd)
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
// own watch). The first wake of an event arms the second (localRewake),
// or postpones it if armed.
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
		due := time.Now().Add(localRewake)
		w.rewake[name] = due
		w.rewakes = append(w.rewakes, dueRewake{name, due})
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
