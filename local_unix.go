//go:build unix

package lease

import (
	"os"
	"syscall"
)

// openFlags go on every open of a lock file. O_CLOEXEC: a child process
// must not inherit a descriptor, or it would keep the flock alive after its
// parent died (Go sets it anyway; it is stated here so nobody drops it).
// O_NOFOLLOW: a symlink planted under the root must not redirect the store.
const openFlags = syscall.O_CLOEXEC | syscall.O_NOFOLLOW

// preadOnce reads from offset 0 with one pread(2). Unlike ReadAt it does
// not call again to learn that a short read was the end of the file: a
// regular file this small is read whole by one call.
func preadOnce(f *os.File, buf []byte) (n int, err error) {
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
