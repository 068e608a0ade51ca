package lease

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/leasekit/lease/internal/localfs"
)

// This file holds how the local store finds, creates and checks its lock
// files: one per key, named by the key's hash, never deleted or renamed.

// tryLock takes key's flock without waiting, on one descriptor that then
// also reads and writes the record. locked is false when another holder
// has the flock. A missing lock file is created whole first (createLockFile).
//
// After the flock is taken, the path must still name the inode that was
// locked: if someone replaced the file, the flock would guard a file that
// nobody else opens. The descriptor pins its inode, whose number therefore
// cannot be reused, so a path that names that inode after the flock named
// it when the flock was taken (the store never unlinks, renames or links
// over lock files).
func (s *LocalStore) tryLock(key string) (h *localLock, locked bool, err error) {
	path := s.lockPath(key)
	f, id := s.takeSpare(key)
	if f == nil {
		f, id, err = localfs.OpenLockFile(path, os.O_RDWR)
		if errors.Is(err, os.ErrNotExist) {
			if err := s.createLockFile(key); err != nil {
				return nil, false, err
			}
			f, id, err = localfs.OpenLockFile(path, os.O_RDWR)
		}
		if err != nil {
			return nil, false, lockFileErr(err)
		}
	}
	s.roundTrips.Add(1)
	if locked, err = s.flockTry(key, f); err != nil || !locked {
		s.keepSpare(key, f)
		return nil, false, lockFileErr(err)
	}
	h = &localLock{f: f, id: id}
	if !s.stillLinked(key, h) {
		s.unlock(h)
		return nil, false, fmt.Errorf("lock file %s was replaced while being locked", path)
	}
	return h, true, nil
}

// createLockFile makes key's lock file, whole: its absent marker (write 1,
// see internal/localfs/record.go) is written under a temporary name, made durable and
// linked into place, so that no store ever sees the file empty. link(2)
// fails with EEXIST when another store created the file first, which is as
// good. The first grant written into the file makes its name durable
// (acquireLocked).
func (s *LocalStore) createLockFile(key string) error {
	tmp, err := localfs.CreateTemp(s.root, ".new-")
	if err != nil {
		return s.rootErr(err)
	}
	defer os.Remove(tmp.Name())
	err = localfs.WriteRecord(tmp, 1, localfs.AbsentRecord(key))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), s.lockPath(key)); err != nil && !errors.Is(err, os.ErrExist) {
		return s.rootErr(err)
	}
	return nil
}

// rootErr says that the root is not writable when creating a file in it
// was refused: a permission problem for an operator to fix, not damage.
// Running out of descriptors says so; other errors pass through.
func (s *LocalStore) rootErr(err error) error {
	if denied(err) {
		return &accessError{what: "root " + s.root + " is not writable by this process", err: err}
	}
	return lockFileErr(err)
}

// stillLinked reports whether key's lock file path still names the inode
// that h has locked.
func (s *LocalStore) stillLinked(key string, h *localLock) bool {
	if mutant == mutantSkipInode {
		return true // trust the locked inode without looking at the path
	}
	now, err := localfs.PathID(s.lockPath(key))
	return err == nil && now.Same(h.id)
}

// peek reads key's record without the flock. A reader racing a writer may
// see the slot being written torn; it then reads the other, older slot.
func (s *LocalStore) peek(key string) (*Record, error) {
	f, _, err := localfs.OpenLockFile(s.lockPath(key), os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, lockFileErr(err)
	}
	defer f.Close()
	rec, _, err := s.readRecord(f, key)
	return rec, err
}

// readRecord reads key's record from f (localfs.ReadRecord): nil for a
// key never acquired, an error matching ErrCorrupt for one no store could
// have written (R10).
func readRecord(f *os.File, key string) (*Record, uint64, error) {
	rec, _, seq, err := readRecordPlace(f, key)
	return rec, seq, err
}

// readRecordPlace is readRecord with the place a Handoff left in a
// released record (R25): the zero place when there is none.
func readRecordPlace(f *os.File, key string) (*Record, place, uint64, error) {
	rec, seq, err := localfs.ReadRecord(f, key)
	if err != nil || rec == nil {
		return nil, place{}, seq, corruptErr(err)
	}
	r, seq, err := checkedRecord(*rec, key, seq)
	if err != nil || rec.Next == "" {
		return r, place{}, seq, err
	}
	if err := validateOwner(rec.Next); err != nil {
		return nil, place{}, 0, corrupt("hand-off to %q", rec.Next)
	}
	return r, place{owner: rec.Next, epoch: rec.Epoch, at: time.Unix(0, rec.Until).UTC(), version: seq}, seq, nil
}

// checkedRecord is rec as package lease reads it, once its owner is one a
// store could write (R1).
func checkedRecord(rec localfs.Record, key string, seq uint64) (*Record, uint64, error) {
	r := Record{Key: rec.Key, Owner: rec.Owner, Epoch: rec.Epoch, Released: rec.Released}
	if err := checkRecord(r, key); err != nil {
		return nil, 0, err
	}
	return &r, seq, nil
}

// writeRecord stores rec in f as write number seq, durably.
func writeRecord(f *os.File, seq uint64, rec localfs.Record) error {
	return localfs.WriteRecord(f, seq, rec)
}

// toSlot is rec as a lock file's slot holds it: local grants never expire.
func toSlot(rec Record) localfs.Record {
	return localfs.Record{Key: rec.Key, Owner: rec.Owner, Epoch: rec.Epoch, Released: rec.Released}
}

// corruptErr makes a localfs.CorruptError match ErrCorrupt (R10).
func corruptErr(err error) error {
	var damaged *localfs.CorruptError
	if errors.As(err, &damaged) && !errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

// lockFileErr marks an error opening a lock file as ErrCorrupt when the
// path names something the store cannot have made (a directory, a symlink,
// a FIFO): such a record cannot be read (R10). A file this process may not
// open, or a read-only filesystem, is an accessError: the record may be
// sound. Running out of descriptors says so (fdLimitError). Other errors,
// and errors it marked already, pass through.
func lockFileErr(err error) error {
	var access *accessError
	var limit *fdLimitError
	var damaged *localfs.CorruptError
	switch {
	case err == nil, errors.Is(err, ErrCorrupt), errors.As(err, &access), errors.As(err, &limit):
		return err
	case errors.As(err, &damaged):
		return corruptErr(err)
	case errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE):
		return &fdLimitError{err}
	case denied(err):
		return &accessError{what: "no access to the lock file", err: err}
	}
	for _, e := range []error{syscall.ELOOP, syscall.EISDIR, syscall.ENOTDIR, syscall.ENXIO} {
		if errors.Is(err, e) {
			return corrupt("cannot open lock file: %w", err)
		}
	}
	return err
}

// denied reports whether err is a refusal to write or open: permissions,
// or a read-only filesystem.
func denied(err error) bool {
	return errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS)
}

// accessError is storage this process may not write or open: a setup
// problem that waiting does not cure (Hold gives up at once) and that
// deleting lock files must not be used to repair. It matches
// os.ErrPermission, whatever the cause (EACCES, EPERM or EROFS).
type accessError struct {
	what string
	err  error
}

func (e *accessError) Error() string { return e.what + ": " + e.err.Error() }

func (e *accessError) Unwrap() error { return e.err }

// Is reports whether target is os.ErrPermission.
func (e *accessError) Is(target error) bool { return target == os.ErrPermission }

// fdLimitError is running out of descriptors: each held key keeps one
// open. It matches EMFILE or ENFILE, so that callers do not retry it as a
// passing storage failure.
type fdLimitError struct{ err error }

func (e *fdLimitError) Error() string {
	if errors.Is(e.err, syscall.ENFILE) {
		return "too many open files in the system: raise the descriptor limit (fs.file-max); each held key keeps one open"
	}
	return "too many open files: raise the descriptor limit (ulimit -n); each held key keeps one open"
}

func (e *fdLimitError) Unwrap() error { return e.err }
