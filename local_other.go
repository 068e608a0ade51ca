//go:build !unix

package lease

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// openFlags go on every open of a lock file: no inheritance by children.
const openFlags = syscall.O_CLOEXEC

// errLocalUnsupported: the local store needs flock(2), which only Unix has.
var errLocalUnsupported = errors.New("lease: the local store needs a Unix system (flock)")

func localSupported() error { return errLocalUnsupported }

func openLockFile(path string, flag int) (*os.File, fileID, error) {
	return nil, fileID{}, errLocalUnsupported
}

func flockTry(f *os.File) (bool, error) { return false, errLocalUnsupported }

func flockUnlock(f *os.File) error { return errLocalUnsupported }

func flockProbe(f *os.File) (bool, error) { return false, errLocalUnsupported }

func syncDir(dir string) error { return errLocalUnsupported }

// preadOnce reads from offset 0 up to len(buf) bytes.
func preadOnce(f *os.File, buf []byte) (int, error) {
	n, err := f.ReadAt(buf, 0)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}
