package lease

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gofrs/flock"
)

// LocalStore is a Store for one host with no database: the operating
// system's file lock (flock) decides who holds a key, and it ends a holder's
// lease the moment the holder's process dies. Grants never expire
// (ExpiresAt is zero), so a holder that hangs but stays alive keeps its key.
//
// Each key has one lock file under the root, named by the SHA-256 of the
// key; the file is locked while the key is held and also holds the key's
// record (see localrecord.go). Lock files are never deleted, renamed or
// replaced. Every LocalStore is one owner: two stores on one root, in one
// process or in two, contend as separate processes do.
//
// A LocalStore is safe for concurrent use; calls on one key are serialised.
type LocalStore struct {
	root  string
	cfg   config
	locks keyLocks

	mu     sync.Mutex            // guards held and closed
	held   map[string]*localLock // the keys whose flock this instance holds
	closed bool

	roundTrips atomic.Uint64 // flock operations and durable writes; read by benchmarks
}

var _ Store = (*LocalStore)(nil)

// localLock is a key whose flock this instance holds.
type localLock struct {
	fl    *flock.Flock // owns the descriptor that holds the flock
	f     *os.File     // a second descriptor on the same inode, for the record
	id    fileID       // the inode both descriptors are on
	seq   uint64       // write number of the newest record in the file (0: none)
	grant Grant        // the grant the record names; zero until acquired
	done  sync.Once    // gives the flock up once, whoever gets there first
}

// Bounds on how long a loser of a race waits for the winner's record to
// appear before it names the winner (R5): the winner writes one record
// between taking the flock and returning, well under a second.
const (
	localPeekTries    = 200
	localPeekMaxPause = 5 * time.Millisecond
)

// NewLocalStore returns a store keeping its lock files in root. root must
// be a writable directory, or a name that mkdir can create (mode 0700) in an
// existing directory. WithTTL is ignored: grants never expire.
func NewLocalStore(root string, opts ...Option) (*LocalStore, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if root == "" {
		return nil, errors.New("lease: local store root is empty")
	}
	root = filepath.Clean(root)
	if err := prepareRoot(root); err != nil {
		return nil, err
	}
	return &LocalStore{root: root, cfg: cfg, held: make(map[string]*localLock)}, nil
}

// prepareRoot makes sure root is a directory this process can create files
// in, creating it (but not its parents) if missing.
func prepareRoot(root string) error {
	fi, err := os.Stat(root)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.Mkdir(root, 0o700); err != nil {
			return fmt.Errorf("lease: local store root %q does not exist and cannot be created: %w", root, err)
		}
	case err != nil:
		return fmt.Errorf("lease: local store root %q: %w", root, err)
	case !fi.IsDir():
		return fmt.Errorf("lease: local store root %q is not a directory", root)
	}
	// Access checks lie on some filesystems (read-only mounts, ACLs), so
	// create and remove a file the way the store will.
	var b [8]byte
	_, _ = rand.Read(b[:])
	probe := filepath.Join(root, ".probe-"+hex.EncodeToString(b[:]))
	f, err := os.OpenFile(probe, os.O_CREATE|os.O_EXCL|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("lease: local store root %q is not writable: %w", root, err)
	}
	f.Close()
	return os.Remove(probe)
}

// openLocalStore serves Open("file:/path/dir"). It accepts "file:/dir" and
// "file:///dir", not a host name.
func openLocalStore(root string, opts []Option) (Store, error) {
	if rest, ok := strings.CutPrefix(root, "//"); ok {
		if !strings.HasPrefix(rest, "/") {
			return nil, fmt.Errorf("lease: file: URL %q names a host; want file:/path/dir", "file:"+root)
		}
		root = rest
	}
	return NewLocalStore(root, opts...)
}

// Owner returns the owner id this store writes into records.
func (s *LocalStore) Owner() string { return s.cfg.owner }

// lockPath is where key's lock file lives: a fixed-length name safe on
// every filesystem, whatever the key.
func (s *LocalStore) lockPath(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(s.root, hex.EncodeToString(sum[:])+".lock")
}

// Acquire takes key (R4, "expired" meaning "its flock is free"). Taking the
// flock fails at once if another holder has it: the error is a *HeldError
// naming that holder. A key held by this instance returns the same grant.
func (s *LocalStore) Acquire(ctx context.Context, key string) (Grant, error) {
	unlock, err := s.begin(ctx, key)
	if err != nil {
		return Grant{}, err
	}
	defer unlock()
	if g, ok, err := s.reacquire(key); ok || err != nil {
		return g, err
	}
	seen := noRace // the epoch on record when the flock was first seen taken
	for try := 0; ; try++ {
		h, locked, err := s.tryLock(key)
		if err != nil {
			return Grant{}, s.storageErr("acquire", key, err)
		}
		if locked {
			return s.acquireLocked(key, h, seen)
		}
		// Someone holds the flock. Name them from the record; a record
		// that shows no holder yet is the instant between the winner
		// taking the flock and writing its record, so look again (R5).
		rec, rerr := s.peek(key)
		if seen == noRace && rerr == nil {
			seen = 0
			if rec != nil {
				seen = rec.Epoch
			}
		}
		live := rerr == nil && rec != nil && !rec.Released
		// An unreleased record is named only when the flock is seen taken
		// twice, a pause apart. It may be a dead holder's, with the flock
		// taken by a winner whose record (written a few system calls
		// after its flock, visible before its fdatasync) has not appeared
		// yet, or by Holder probing for a moment whether its holder died.
		if live && try > 0 {
			return Grant{}, heldBy(*rec)
		}
		if try == localPeekTries {
			if rerr != nil {
				return Grant{}, s.storageErr("acquire", key, rerr)
			}
			// The flock's holder never wrote its record: name no owner.
			return Grant{}, &HeldError{Key: key}
		}
		if err := pause(ctx, try); err != nil {
			return Grant{}, err
		}
	}
}

// reacquire answers an Acquire of a key this instance already holds: the
// same grant (R4c) if the record still names it. Otherwise the grant is
// gone and the flock is given up, so that Acquire starts afresh.
func (s *LocalStore) reacquire(key string) (Grant, bool, error) {
	h := s.heldLock(key)
	if h == nil {
		return Grant{}, false, nil
	}
	rec, _, err := readRecord(h.f, key)
	if err != nil {
		return Grant{}, false, s.storageErr("acquire", key, err)
	}
	mine := names(rec, h.grant) && s.stillLinked(key, h)
	out := decide(acquireInput{Stored: rec, Mine: mine, Expired: !mine, Owner: s.cfg.owner})
	if out.Reuse {
		return h.grant, true, nil
	}
	s.drop(key, h)
	return Grant{}, false, nil
}

// noRace is acquireLocked's seen when the flock was free at the first try.
const noRace uint64 = math.MaxUint64

// acquireLocked decides and writes the acquire of key, whose flock h holds
// and this instance does not yet hold a grant on. seen is the epoch on
// record when an earlier try found the flock taken (noRace if none did).
func (s *LocalStore) acquireLocked(key string, h *localLock, seen uint64) (Grant, error) {
	rec, seq, err := readRecord(h.f, key)
	if err != nil { // R10: give the flock back, write nothing
		s.unlock(h)
		return Grant{}, s.storageErr("acquire", key, err)
	}
	if seen != noRace && rec != nil && rec.Epoch > seen {
		// R5: another store acquired the key while we waited for its
		// flock; we lost that race, even though the winner has released.
		s.unlock(h)
		return Grant{}, heldBy(*rec)
	}
	// We hold the flock, so the record's holder, if any, is gone.
	out := decide(acquireInput{Stored: rec, Expired: true, Owner: s.cfg.owner})
	if out.Err != nil {
		s.unlock(h)
		return Grant{}, out.Err
	}
	g := out.Next
	g.Key = key
	if err := s.write(h, seq+1, g, false); err != nil {
		// Whether the write landed is unknown; giving the flock back is a
		// crash to the next holder, which is safe either way: it finds the
		// old record or this one, unreleased, and moves past both (R9).
		s.unlock(h)
		return Grant{}, s.storageErr("acquire", key, err)
	}
	h.grant = g
	if g.PreviousUnclean {
		s.cfg.logger.Info("lease: took over from a holder that died without releasing",
			"key", key, "previous_owner", rec.Owner, "epoch", g.Epoch)
	}
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.held[key] = h
	}
	s.mu.Unlock()
	if closed { // Close ran meanwhile and dropped every flock: so is this one
		s.unlock(h)
		return Grant{}, ErrClosed
	}
	return g, nil
}

// Renew confirms that this instance still holds g's flock and that the
// record still names g, and returns g unchanged: local grants never expire
// (R6). Otherwise it fails with ErrLost. It writes nothing.
func (s *LocalStore) Renew(ctx context.Context, g Grant) (Grant, error) {
	unlock, err := s.begin(ctx, g.Key)
	if err != nil {
		return Grant{}, err
	}
	defer unlock()
	h, err := s.confirm("renew", g)
	if err != nil {
		return Grant{}, err
	}
	return h.grant, nil
}

// Release writes g's record released, durably, and then gives up the flock
// (R7). If the write fails, the store keeps the flock and the grant and
// returns the error, so the caller can retry. A grant this instance does
// not hold fails with ErrLost.
func (s *LocalStore) Release(ctx context.Context, g Grant) error {
	unlock, err := s.begin(ctx, g.Key)
	if err != nil {
		return err
	}
	defer unlock()
	// Only the flock's holder writes the record, so while this instance
	// holds the flock the record names its grant: no read is needed.
	h := s.heldLock(g.Key)
	if h == nil || h.grant.Owner != g.Owner || h.grant.Epoch != g.Epoch {
		return lost(g.Key, g.Epoch)
	}
	if err := s.write(h, h.seq+1, h.grant, true); err != nil {
		return s.storageErr("release", g.Key, err)
	}
	s.drop(g.Key, h)
	return nil
}

// Holder returns the record of key's live holder: one whose flock is taken.
// It is ErrNotFound when the key was never written, is released, or its
// holder died. To tell a dead holder from a live one it takes the flock for
// an instant if it is free.
func (s *LocalStore) Holder(ctx context.Context, key string) (Record, error) {
	unlock, err := s.begin(ctx, key)
	if err != nil {
		return Record{}, err
	}
	defer unlock()
	if h := s.heldLock(key); h != nil {
		rec, _, err := readRecord(h.f, key)
		if err != nil {
			return Record{}, s.storageErr("holder", key, err)
		}
		if names(rec, h.grant) {
			return *rec, nil
		}
	}
	for try := 0; ; try++ {
		rec, perr := s.peek(key)
		if perr == nil && (rec == nil || rec.Released) {
			return Record{}, ErrNotFound
		}
		free, err := s.flockFree(key)
		if err != nil {
			return Record{}, s.storageErr("holder", key, err)
		}
		again, aerr := s.peek(key)
		switch {
		case free && aerr != nil: // nobody is writing: the record is damaged (R10)
			return Record{}, s.storageErr("holder", key, aerr)
		case free: // never written, released, or its holder died
			return Record{}, ErrNotFound
		case aerr == nil && again != nil && !again.Released:
			return *again, nil
		case aerr == nil:
			return Record{}, ErrNotFound
		case try == localPeekTries:
			return Record{}, s.storageErr("holder", key, aerr)
		}
		// The flock is taken and the record unreadable: perhaps the
		// holder's first write is in flight. Look again.
		if err := pause(ctx, try); err != nil {
			return Record{}, err
		}
	}
}

// Holders is not yet able to list lock files: it yields one error.
func (s *LocalStore) Holders(ctx context.Context, prefix string) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		yield(Record{}, errors.New("lease: holders: the local store cannot list keys yet"))
	}
}

// ReleaseAll releases every grant this instance holds, each as Release
// would (R13). It goes on past failures and joins them.
func (s *LocalStore) ReleaseAll(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.isClosed() {
		return ErrClosed
	}
	s.mu.Lock()
	grants := make([]Grant, 0, len(s.held))
	for _, h := range s.held {
		grants = append(grants, h.grant)
	}
	s.mu.Unlock()
	var errs []error
	for _, g := range grants {
		if err := s.Release(ctx, g); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close gives up every flock this instance holds without writing, as a
// crash would: the next holder of each key sees PreviousUnclean. Later
// calls fail with ErrClosed. Close is idempotent.
func (s *LocalStore) Close() error {
	s.mu.Lock()
	held := s.held
	s.held = map[string]*localLock{}
	s.closed = true
	s.mu.Unlock()
	var errs []error
	for _, h := range held {
		errs = append(errs, s.unlock(h))
	}
	return errors.Join(errs...)
}

// begin checks a call's key, context and store, then takes key's lock.
func (s *LocalStore) begin(ctx context.Context, key string) (unlock func(), err error) {
	return s.locks.begin(ctx, key, s.isClosed)
}

func (s *LocalStore) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// heldLock returns key's entry in the table, or nil.
func (s *LocalStore) heldLock(key string) *localLock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[key]
}

// confirm finds the entry for g and checks that it still stands: the flock
// is held, the lock file is still the locked inode, and the record names g.
// A grant that no longer stands is dropped and reported as ErrLost.
func (s *LocalStore) confirm(op string, g Grant) (*localLock, error) {
	if err := ValidateKey(g.Key); err != nil {
		return nil, err
	}
	h := s.heldLock(g.Key)
	if h == nil || h.grant.Owner != g.Owner || h.grant.Epoch != g.Epoch {
		return nil, lost(g.Key, g.Epoch)
	}
	rec, seq, err := readRecord(h.f, g.Key)
	if err != nil {
		return nil, s.storageErr(op, g.Key, err)
	}
	if !h.fl.Locked() || !names(rec, h.grant) || !s.stillLinked(g.Key, h) {
		s.drop(g.Key, h)
		return nil, lost(g.Key, g.Epoch)
	}
	h.seq = seq
	return h, nil
}

// names reports whether rec is the unreleased record of grant g.
func names(rec *Record, g Grant) bool {
	return rec != nil && !rec.Released && rec.Owner == g.Owner && rec.Epoch == g.Epoch
}

// tryLock takes key's flock without waiting. locked is false when another
// holder has it. The lock file is created if missing and never removed.
//
// After the flock is taken, the path must still name the inode that was
// locked: if someone replaced the file, the flock would guard a file that
// nobody else opens. The order below checks that without reading the
// locked descriptor's timestamps (see fileIDOf): the record descriptor is
// opened first and pins its inode, whose number therefore cannot be reused;
// the flock's own open comes next; and a path that names the pinned inode
// both before and after that open named it during the open too, since the
// store never unlinks, renames or links lock files.
func (s *LocalStore) tryLock(key string) (h *localLock, locked bool, err error) {
	path := s.lockPath(key)
	f, err := openFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, lockFileErr(err)
	}
	id, err := fileIDOf(f)
	if err != nil {
		f.Close()
		return nil, false, err
	}
	fl := flock.New(path, flock.SetFlag(os.O_RDONLY|openFlags))
	s.roundTrips.Add(1)
	if ok, err := fl.TryLock(); err != nil || !ok {
		f.Close()
		return nil, false, lockFileErr(err)
	}
	h = &localLock{fl: fl, f: f, id: id}
	if !s.stillLinked(key, h) {
		s.unlock(h)
		return nil, false, fmt.Errorf("lock file %s was replaced while being locked", path)
	}
	return h, true, nil
}

// stillLinked reports whether key's lock file path still names the inode
// that h has locked.
func (s *LocalStore) stillLinked(key string, h *localLock) bool {
	now, err := pathID(s.lockPath(key))
	return err == nil && now.same(h.id)
}

// flockFree reports whether nobody holds key's flock, by taking it for an
// instant. It never creates a lock file.
func (s *LocalStore) flockFree(key string) (bool, error) {
	fl := flock.New(s.lockPath(key), flock.SetFlag(os.O_RDONLY|openFlags))
	s.roundTrips.Add(1)
	ok, err := fl.TryLock()
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil || !ok {
		return false, lockFileErr(err)
	}
	s.roundTrips.Add(1)
	return true, fl.Unlock()
}

// peek reads key's record without the flock. A reader racing a writer may
// see the slot being written torn; it then reads the other, older slot.
func (s *LocalStore) peek(key string) (*Record, error) {
	f, err := openFile(s.lockPath(key), os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, lockFileErr(err)
	}
	defer f.Close()
	rec, _, err := readRecord(f, key)
	return rec, err
}

// openFile opens a lock file with openFlags. It skips what os.OpenFile
// does to try a file with the network poller (four fcntl and an epoll call
// that fail on a regular file anyway).
func openFile(path string, flag int, perm uint32) (*os.File, error) {
	for {
		fd, err := syscall.Open(path, flag|openFlags, perm)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return os.NewFile(uintptr(fd), path), nil
	}
}

// lockFileErr marks an error opening a lock file as ErrCorrupt when the
// path names something the store cannot have made (a directory, a symlink,
// a file it may not open): such a record cannot be read (R10). Other
// errors, such as running out of descriptors, pass through.
func lockFileErr(err error) error {
	for _, e := range []error{syscall.ELOOP, syscall.EISDIR, syscall.ENOTDIR, syscall.EACCES, syscall.EPERM, syscall.ENXIO} {
		if errors.Is(err, e) {
			return corrupt("cannot open lock file: %w", err)
		}
	}
	return err
}

// write stores g (released or not) in h's file as write number seq, durably.
func (s *LocalStore) write(h *localLock, seq uint64, g Grant, released bool) error {
	s.roundTrips.Add(1)
	rec := Record{Key: g.Key, Owner: g.Owner, Epoch: g.Epoch, Released: released}
	if err := writeRecord(h.f, seq, rec); err != nil {
		return err
	}
	h.seq = seq
	return nil
}

// storageErr wraps a storage failure. After Close it is ErrClosed: a call
// in flight may find its descriptors closed under it.
func (s *LocalStore) storageErr(op, key string, err error) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return &StorageError{Op: op, Key: key, Err: err}
}

// drop removes key's entry if it is still h and gives up h's flock.
func (s *LocalStore) drop(key string, h *localLock) {
	s.mu.Lock()
	if s.held[key] == h {
		delete(s.held, key)
	}
	s.mu.Unlock()
	if err := s.unlock(h); err != nil {
		s.cfg.logger.Warn("lease: giving up a flock failed", "key", key, "err", err)
	}
}

// unlock gives up h's flock and closes both descriptors, once: Close and
// a call in flight may both try.
func (s *LocalStore) unlock(h *localLock) error {
	var err error
	h.done.Do(func() {
		var ferr error
		if h.f != nil {
			ferr = h.f.Close()
		}
		s.roundTrips.Add(1)
		err = errors.Join(h.fl.Unlock(), ferr)
	})
	return err
}

// pause waits a little before look number try+1, longer each time.
func pause(ctx context.Context, try int) error {
	d := min(50*time.Microsecond<<min(try, 10), localPeekMaxPause)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Record returns key's stored record whatever its state (released, or
// left by a holder that died, or live); ErrNotFound if the key was never
// written. It reads the lock file without creating or locking it, so no
// other store can notice the look. A record whose holder died reads as
// unreleased: whether the flock is still held is Holder's question.
func (s *LocalStore) Record(ctx context.Context, key string) (Record, error) {
	if err := ValidateKey(key); err != nil {
		return Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	if s.isClosed() {
		return Record{}, ErrClosed
	}
	f, err := openFile(s.lockPath(key), os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, s.storageErr("record", key, lockFileErr(err))
	}
	defer f.Close()
	rec, _, err := readRecord(f, key)
	switch {
	case err != nil:
		return Record{}, s.storageErr("record", key, err)
	case rec == nil:
		return Record{}, ErrNotFound
	}
	return *rec, nil
}
