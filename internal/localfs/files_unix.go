//go:build unix

package localfs

import (
	"errors"
	"os"
	"syscall"
)

// openFlags go on every open of a lock file. O_CLOEXEC: a child process
// must not inherit a descriptor, or it would keep the flock alive after its
// parent died (Go sets it anyway; it is stated here so nobody drops it).
// O_NOFOLLOW: a symlink planted under the root must not redirect the store.
const openFlags = syscall.O_CLOEXEC | syscall.O_NOFOLLOW

// Supported reports whether the local store can run here.
func Supported() error { return nil }

// OpenLockFile opens an existing lock file (flag: O_RDONLY or O_RDWR; it
// never creates one) and returns it with the inode it is open on. The open
// never blocks (O_NONBLOCK: a FIFO planted at the path would otherwise
// wait for a writer), and anything but a regular file is refused as
// a CorruptError, untouched (R10).
func OpenLockFile(path string, flag int) (*os.File, FileID, error) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, flag|openFlags|syscall.O_NONBLOCK, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, FileID{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	// Blocking again, so that os.NewFile does not try the descriptor with
	// the runtime's poller (three more system calls that fail on a regular
	// file anyway). Reads and writes of a regular file never wait for a peer.
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return nil, FileID{}, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	id, regular, err := lockFileID(f)
	if err == nil && !regular {
		err = corrupt("lock file %s is not a regular file", path)
	}
	if err != nil {
		f.Close()
		return nil, FileID{}, err
	}
	return f, id, nil
}

// FlockTry takes f's exclusive flock without waiting; false when another
// open file holds it.
func FlockTry(f *os.File) (bool, error) {
	err := flockOp(f, syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

// FlockUnlock gives up f's flock.
func FlockUnlock(f *os.File) error { return flockOp(f, syscall.LOCK_UN) }

func flockOp(f *os.File, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = syscall.Flock(int(fd), how)
			if ferr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if ferr != nil {
		return &os.PathError{Op: "flock", Path: f.Name(), Err: ferr}
	}
	return nil
}

// SyncDir makes dir's entries durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// PreadOnce reads from offset 0 with one pread(2). Unlike ReadAt it does
// not call again to learn that a short read was the end of the file: a
// regular file this small is read whole by one call.
func PreadOnce(f *os.File, buf []byte) (n int, err error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		for {
			n, rerr = syscall.Pread(int(fd), buf, 0)
			if rerr != syscall.EINTR {
				return true
			}
		}
	}); err != nil {
		return 0, err
	}
	return n, rerr
}
