//go:build unix && !linux

package localfs

import (
	"errors"
	"os"
	"syscall"
)

// On Unix systems other than Linux (the BSDs, macOS), which have no
// /proc/locks to read, a flock is probed by trying it.

// flockProbe reports whether another open file holds f's flock, by taking
// a shared flock for an instant.
func flockProbe(f *os.File) (bool, error) {
	err := flockOp(f, syscall.LOCK_SH|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return false, FlockUnlock(f)
}
