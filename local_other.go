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

// preadOnce reads from offset 0 up to len(buf) bytes.
func preadOnce(f *os.File, buf []byte) (int, error) {
	n, err := f.ReadAt(buf, 0)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}
