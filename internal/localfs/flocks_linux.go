package localfs

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// FlockView tells whether a lock file is flocked by anyone, without
// locking it (R14: Holder and Holders lock nothing another store could
// notice; a probe that took the flock for an instant would make a racing
// Acquire of a dead holder's key see it taken, R4f). Linux lists every
// flock on the host in /proc/locks, with the device and inode of its file.
//
// /proc/locks is read a page per read(2), each page under its own lock of
// the kernel's lock list, so a listing can miss an entry when an earlier
// one goes away between pages. A file not found in the first reading is
// looked for in a second one before it counts as not flocked.
//
// /proc/locks names a file's device as its filesystem's superblock does,
// which on some filesystems (btrfs subvolumes, overlayfs) is not the device
// stat(2) reports; each store learns the mapping once (learnLockDev).
//
// One limit comes from the kernel: locks of processes in another PID
// namespace (another container sharing the root) are not listed, so Holder
// reports such holders as not live. Acquire is not affected: it takes the
// flock itself.
type FlockView struct {
	ids   map[FileID]struct{}
	reads int
	dev   devMap
}

// devMap maps the device stat(2) reports for the root's files to the one
// /proc/locks shows; the zero devMap maps nothing.
type devMap struct{ stat, locks uint64 }

func (m devMap) of(id FileID) FileID {
	if m.stat != m.locks && id.dev == m.stat {
		id.dev = m.locks
	}
	return id
}

// Flocks makes the FlockViews of one root: it learns how /proc/locks
// names the root's device once, at the first view. The zero Flocks is
// ready to use.
type Flocks struct {
	once sync.Once
	dev  devMap
}

// View returns a view of the flocks on files in root, for one Holder or
// Holders call.
func (l *Flocks) View(root string) *FlockView {
	l.once.Do(func() { l.dev = learnLockDev(root) })
	return &FlockView{dev: l.dev}
}

// learnLockDev finds how /proc/locks names the device of files in root: it
// flocks an unnamed temporary file there (O_TMPFILE: no other process can
// see or open it, so nobody notices the lock) and finds that flock in
// /proc/locks by its inode and this process's id. Where that cannot be
// done, it assumes the two devices are the same.
func learnLockDev(root string) devMap {
	fd, err := unix.Open(root, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return devMap{}
	}
	defer unix.Close(fd)
	var sx unix.Statx_t
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil ||
		unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_INO, &sx) != nil {
		return devMap{}
	}
	data, err := ReadProcLocks()
	if err != nil {
		return devMap{}
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	for line := range bytes.Lines(data) {
		f := bytes.Fields(line)
		if len(f) < 6 || !bytes.Equal(f[4], pid) {
			continue
		}
		if id, ok := parseFlockLine(line); ok && id.ino == sx.Ino {
			return devMap{stat: unix.Mkdev(sx.Dev_major, sx.Dev_minor), locks: id.dev}
		}
	}
	return devMap{}
}

// maxFlockReads is how many readings of /proc/locks a view makes at most.
const maxFlockReads = 2

// Locked reports whether the file f, open on inode id, is flocked.
func (v *FlockView) Locked(f *os.File, id FileID) (bool, error) {
	id = v.dev.of(id)
	for {
		if _, ok := v.ids[id]; ok {
			return true, nil
		}
		if v.reads == maxFlockReads {
			return false, nil
		}
		if err := v.read(); err != nil {
			return false, err
		}
	}
}

// read adds the files flocked now to v.
func (v *FlockView) read() error {
	v.reads++
	data, err := ReadProcLocks()
	if err != nil {
		return err
	}
	if v.ids == nil {
		v.ids = make(map[FileID]struct{})
	}
	for line := range bytes.Lines(data) {
		if id, ok := parseFlockLine(line); ok {
			v.ids[id] = struct{}{}
		}
	}
	return nil
}

// ReadProcLocks reads /proc/locks whole, with few read calls.
func ReadProcLocks() ([]byte, error) {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, 0, 64<<10)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// parseFlockLine reads one line of /proc/locks, such as
//
//	1: FLOCK  ADVISORY  WRITE 14066 fe:00:9977952 0 EOF
//
// and returns the file of a granted flock (not a waiter's "->" line, not a
// POSIX lock or a lease). The device is major:minor in hex, the inode
// decimal.
func parseFlockLine(line []byte) (FileID, bool) {
	f := bytes.Fields(line)
	if len(f) < 6 || string(f[1]) != "FLOCK" {
		return FileID{}, false
	}
	parts := bytes.Split(f[5], []byte(":"))
	if len(parts) != 3 {
		return FileID{}, false
	}
	major, err1 := strconv.ParseUint(string(parts[0]), 16, 32)
	minor, err2 := strconv.ParseUint(string(parts[1]), 16, 32)
	ino, err3 := strconv.ParseUint(string(parts[2]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return FileID{}, false
	}
	return FileID{dev: unix.Mkdev(uint32(major), uint32(minor)), ino: ino}, true
}
