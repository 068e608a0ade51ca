package lease

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// flockView tells whether a lock file is flocked by anyone, without
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
// Two limits come from the kernel: locks of processes in another PID
// namespace (another container sharing the root) are not listed, and on a
// filesystem whose stat(2) device differs from its superblock's (btrfs
// subvolumes) no lock is matched; Holder then reports such holders as not
// live. Acquire is not affected: it takes the flock itself.
type flockView struct {
	ids   map[fileID]struct{}
	reads int
}

// maxFlockReads is how many readings of /proc/locks a view makes at most.
const maxFlockReads = 2

// locked reports whether the file f, open on inode id, is flocked.
func (v *flockView) locked(f *os.File, id fileID) (bool, error) {
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
func (v *flockView) read() error {
	v.reads++
	data, err := readProcLocks()
	if err != nil {
		return err
	}
	if v.ids == nil {
		v.ids = make(map[fileID]struct{})
	}
	for line := range bytes.Lines(data) {
		if id, ok := parseFlockLine(line); ok {
			v.ids[id] = struct{}{}
		}
	}
	return nil
}

// readProcLocks reads /proc/locks whole, with few read calls.
func readProcLocks() ([]byte, error) {
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
func parseFlockLine(line []byte) (fileID, bool) {
	f := bytes.Fields(line)
	if len(f) < 6 || string(f[1]) != "FLOCK" {
		return fileID{}, false
	}
	parts := bytes.Split(f[5], []byte(":"))
	if len(parts) != 3 {
		return fileID{}, false
	}
	major, err1 := strconv.ParseUint(string(parts[0]), 16, 32)
	minor, err2 := strconv.ParseUint(string(parts[1]), 16, 32)
	ino, err3 := strconv.ParseUint(string(parts[2]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return fileID{}, false
	}
	return fileID{dev: unix.Mkdev(uint32(major), uint32(minor)), ino: ino}, true
}
