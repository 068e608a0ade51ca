package localfs

import (
	"os"
	"syscall"
)

// Datasync makes f's data durable with fdatasync(2): one flush of the data
// and of only the metadata needed to read it back.
func Datasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return serr
}
