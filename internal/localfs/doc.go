// Package localfs is the operating-system plumbing of the local store
// (lease.LocalStore): the record codec of its lock files, opening them
// without following links or blocking, flocks and the /proc/locks view of
// who holds one, file identities, durable writes, and the inotify watch of
// the root. The store itself, and what callers see, stay in package lease.
package localfs

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// CorruptError is a lock file or record that no store could have written
// (R10). Its text is the detail only: package lease adds that the record
// is corrupt and makes it match lease.ErrCorrupt.
type CorruptError struct{ err error }

// Error is the detail, without a prefix.
func (e *CorruptError) Error() string { return e.err.Error() }

// Unwrap returns the cause.
func (e *CorruptError) Unwrap() error { return e.err }

// corrupt makes a CorruptError from a format and its arguments.
func corrupt(format string, args ...any) error {
	return &CorruptError{fmt.Errorf(format, args...)}
}

// CreateTemp creates a new file under dir, named prefix and random hex,
// with the flags of every open of a lock file.
func CreateTemp(dir, prefix string) (*os.File, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := filepath.Join(dir, prefix+hex.EncodeToString(b[:]))
	return os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_RDWR|openFlags, 0o600)
}
