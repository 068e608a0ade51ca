package lease

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// localRewake is when a lock file's close event wakes its waiters a second
// time. A dying process's descriptor raises the event a moment before the
// kernel removes its flock (both happen in the final close of the file), so
// a waiter woken at once may still find the flock taken.
const localRewake = 5 * time.Millisecond

// localWatch is a store's inotify instance on its root, and the waiters it
// wakes. One goroutine reads its events until stop.
type localWatch struct {
	f    *os.File      // the inotify descriptor, in the runtime's poller
	done chan struct{} // closed when the reader has returned

	mu      sync.Mutex
	byName  map[string]map[*watchEntry]struct{} // lock file name → its waiters
	rewake  map[string]*time.Timer              // the second wake per name
	stopped bool
}

// watchEntry is one watchRelease call.
type watchEntry struct{ wake func() }

// startWatch watches root for lock files closed after being open for
// writing, and starts the goroutine that reads the events.
func startWatch(root string) (*localWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err == unix.EMFILE {
		// Usually the per-user limit on inotify instances, not descriptors.
		return nil, fmt.Errorf("lease: watching %s: %w (is fs.inotify.max_user_instances reached?)", root, os.NewSyscallError("inotify_init1", err))
	}
	if err != nil {
		return nil, fmt.Errorf("lease: watching %s: %w", root, os.NewSyscallError("inotify_init1", err))
	}
	if _, err := unix.InotifyAddWatch(fd, root, unix.IN_CLOSE_WRITE|unix.IN_ONLYDIR); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lease: watching %s: %w", root, os.NewSyscallError("inotify_add_watch", err))
	}
	w := &localWatch{
		f:      os.NewFile(uintptr(fd), "inotify:"+root),
		done:   make(chan struct{}),
		byName: make(map[string]map[*watchEntry]struct{}),
		rewake: make(map[string]*time.Timer),
	}
	go w.read()
	return w, nil
}

// add registers wake for the lock file called name.
func (w *localWatch) add(name string, wake func()) *watchEntry {
	e := &watchEntry{wake: wake}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byName[name] == nil {
		w.byName[name] = make(map[*watchEntry]struct{})
	}
	w.byName[name][e] = struct{}{}
	return e
}

// remove drops e; empty reports whether no waiter is left at all.
func (w *localWatch) remove(name string, e *watchEntry) (empty bool) {
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
	return len(w.byName) == 0
}

// stop ends the reader and closes the inotify descriptor.
func (w *localWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	for _, t := range w.rewake {
		t.Stop()
	}
	w.mu.Unlock()
	w.f.Close() // ends the reader's Read
	<-w.done
}

// inotifyEventLen is the fixed part of struct inotify_event: wd, mask,
// cookie, len, each 32 bits in the machine's byte order.
const inotifyEventLen = 16

// read wakes the waiters of every lock file named by an event. A lost
// event (queue overflow) or a lost watch (root removed) wakes everyone.
func (w *localWatch) read() {
	defer close(w.done)
	buf := make([]byte, 64*(inotifyEventLen+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return // stop closed the descriptor
		}
		for ev := buf[:n]; len(ev) >= inotifyEventLen; {
			mask := binary.NativeEndian.Uint32(ev[4:])
			nameLen := int(binary.NativeEndian.Uint32(ev[12:]))
			if inotifyEventLen+nameLen > len(ev) {
				break
			}
			name := string(bytes.TrimRight(ev[inotifyEventLen:inotifyEventLen+nameLen], "\x00"))
			ev = ev[inotifyEventLen+nameLen:]
			if mask&(unix.IN_Q_OVERFLOW|unix.IN_IGNORED) != 0 {
				w.wakeAll()
			} else if name != "" {
				w.wakeName(name, true)
			}
		}
	}
}

// wakeName calls the waiters of name, outside the lock (a wake may end its
// own watch). The first wake of an event arms the second (localRewake).
func (w *localWatch) wakeName(name string, first bool) {
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
func (w *localWatch) wakeAll() {
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
