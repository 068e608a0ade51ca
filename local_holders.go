package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/leasekit/lease/internal/localfs"
)

// localListChunk is how many directory entries Holders reads at once.
const localListChunk = 1024

// Holders yields the live holders of every key that begins with prefix, in
// ascending byte order of key (R14): unreleased records whose lock file is
// flocked by someone. It creates, changes and locks nothing.
//
// Lock files are named by a hash, so the keys are known only by reading
// every file: a first pass reads each record and keeps the keys (only
// those of unreleased records with the prefix, a few hundred bytes each at
// most); a second pass, in key order, reads each of them again and yields
// it if it is still held. A file that cannot be read is yielded as an
// error matching ErrCorrupt, and the listing goes on.
func (s *LocalStore) Holders(ctx context.Context, prefix string) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		if err := s.usable(ctx); err != nil {
			yield(Record{}, err)
			return
		}
		keys, ok := s.heldKeys(ctx, prefix, yield)
		if !ok {
			return
		}
		slices.Sort(keys)
		view := s.flocks.View(s.root)
		for _, key := range keys {
			if err := s.usable(ctx); err != nil {
				yield(Record{}, err)
				return
			}
			rec, err := s.liveRecord(key, view)
			switch {
			case err != nil:
				if !yield(Record{}, s.storageErr("holders", key, err)) {
					return
				}
			case rec != nil:
				if !yield(*rec, nil) {
					return
				}
			}
		}
	}
}

// heldKeys reads every lock file under the root and returns the keys of
// the unreleased records whose key begins with prefix. It yields an error
// for each file it cannot read; ok is false when the listing must end.
func (s *LocalStore) heldKeys(ctx context.Context, prefix string, yield func(Record, error) bool) (keys []string, ok bool) {
	dir, err := os.Open(s.root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, true // nothing was ever written
	}
	if err != nil {
		yield(Record{}, &StorageError{Op: "holders", Key: prefix, Err: err})
		return nil, false
	}
	defer dir.Close()
	for {
		ents, err := dir.ReadDir(localListChunk)
		for _, e := range ents {
			if err := s.usable(ctx); err != nil {
				yield(Record{}, err)
				return nil, false
			}
			if !isLockName(e.Name()) {
				continue // a temporary file being created, or a probe
			}
			rec, rerr := s.readLockFile(e.Name())
			switch {
			case rerr != nil:
				err := &StorageError{Op: "holders", Key: prefix, Err: fmt.Errorf("lock file %s: %w", e.Name(), rerr)}
				if !yield(Record{}, err) {
					return nil, false
				}
			case rec != nil && !rec.Released && strings.HasPrefix(rec.Key, prefix):
				keys = append(keys, rec.Key)
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(ents) == 0) {
			return keys, true
		}
		if err != nil {
			yield(Record{}, &StorageError{Op: "holders", Key: prefix, Err: err})
			return nil, false
		}
	}
}

// readLockFile reads the record in the lock file called name, whatever its
// key, and checks that the file is the one its key names. It returns nil
// for a file that holds only its absent marker, or that vanished.
func (s *LocalStore) readLockFile(name string) (*Record, error) {
	f, _, err := localfs.OpenLockFile(filepath.Join(s.root, name), os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, lockFileErr(err)
	}
	defer f.Close()
	file, err := localfs.ReadWhole(f)
	if err != nil {
		return nil, corruptErr(err)
	}
	key, err := localfs.SlotKey(file)
	if err != nil {
		return nil, corruptErr(err)
	}
	if ValidateKey(key) != nil || lockName(key) != name {
		return nil, corrupt("record for key %q stored under %s", key, name)
	}
	rec, seq, err := localfs.ParseRecord(file, key)
	if err != nil || rec == nil {
		return nil, corruptErr(err)
	}
	r, _, err := checkedRecord(*rec, key, seq)
	return r, err
}

// isLockName reports whether name is a lock file's: 64 hex digits, ".lock".
func isLockName(name string) bool {
	hexPart, ok := strings.CutSuffix(name, ".lock")
	if !ok || len(hexPart) != 64 {
		return false
	}
	for i := 0; i < len(hexPart); i++ {
		if c := hexPart[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
