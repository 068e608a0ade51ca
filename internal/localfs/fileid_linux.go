package localfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// FileID names an inode: its device and inode number.
type FileID struct{ dev, ino uint64 }

// Same reports whether a and b name one inode.
func (a FileID) Same(b FileID) bool { return a == b }

// IDOf and PathID ask statx(2) for the inode number and nothing else.
// A full stat (fstat, os.Stat) also reads the timestamps, and since Linux
// 6.13 (multigrain timestamps) reading them makes the next write store a
// fine-grained mtime and dirty the inode, which the next fdatasync then
// pays for: about 90 µs more per acquire on the test machine, half the
// floor of a durable write. The syscall package has no statx; x/sys/unix,
// which the store also uses for /proc/locks and inotify, does.
func IDOf(f *os.File) (FileID, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return FileID{}, err
	}
	var (
		sx   unix.Statx_t
		serr error
	)
	if err := rc.Control(func(fd uintptr) {
		serr = unix.Statx(int(fd), "", unix.AT_EMPTY_PATH, unix.STATX_INO, &sx)
	}); err != nil {
		return FileID{}, err
	}
	if serr != nil {
		return FileID{}, &os.PathError{Op: "statx", Path: f.Name(), Err: serr}
	}
	return FileID{dev: unix.Mkdev(sx.Dev_major, sx.Dev_minor), ino: sx.Ino}, nil
}

// lockFileID is IDOf, and whether f is a regular file, in one statx.
func lockFileID(f *os.File) (id FileID, regular bool, err error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return FileID{}, false, err
	}
	var (
		sx   unix.Statx_t
		serr error
	)
	if err := rc.Control(func(fd uintptr) {
		serr = unix.Statx(int(fd), "", unix.AT_EMPTY_PATH, unix.STATX_TYPE|unix.STATX_INO, &sx)
	}); err != nil {
		return FileID{}, false, err
	}
	if serr != nil {
		return FileID{}, false, &os.PathError{Op: "statx", Path: f.Name(), Err: serr}
	}
	id = FileID{dev: unix.Mkdev(sx.Dev_major, sx.Dev_minor), ino: sx.Ino}
	return id, sx.Mode&unix.S_IFMT == unix.S_IFREG, nil
}

// PathID is the inode path names, not following a final symlink.
func PathID(path string) (FileID, error) {
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_INO, &sx); err != nil {
		return FileID{}, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	return FileID{dev: unix.Mkdev(sx.Dev_major, sx.Dev_minor), ino: sx.Ino}, nil
}
