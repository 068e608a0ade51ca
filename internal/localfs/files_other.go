//go:build !unix

package localfs

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// openFlags go on every open of a lock file: no inheritance by children.
const openFlags = syscall.O_CLOEXEC

// errUnsupported: the local store needs flock(2), which only Unix has.
var errUnsupported = errors.New("lease: the local store needs a Unix system (flock)")

// Supported reports why the local store cannot run here.
func Supported() error { return errUnsupported }

// OpenLockFile fails: no flock here.
func OpenLockFile(path string, flag int) (*os.File, FileID, error) {
	return nil, FileID{}, errUnsupported
}

// FlockTry fails: no flock here.
func FlockTry(f *os.File) (bool, error) { return false, errUnsupported }

// FlockUnlock fails: no flock here.
func FlockUnlock(f *os.File) error { return errUnsupported }

func flockProbe(f *os.File) (bool, error) { return false, errUnsupported }

// SyncDir fails: no flock here, so nothing to make durable.
func SyncDir(dir string) error { return errUnsupported }

// PreadOnce reads from offset 0 up to len(buf) bytes.
func PreadOnce(f *os.File, buf []byte) (int, error) {
	n, err := f.ReadAt(buf, 0)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}
