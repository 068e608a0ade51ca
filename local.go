package lease

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasekit/lease/internal/localfs"
)

// LocalStore is a Store for one host with no database: the operating
// system's file lock (flock) decides who holds a key, and it ends a holder's
// lease the moment the holder's process dies. Grants never expire
// (ExpiresAt is zero), so a holder that hangs but stays alive keeps its key.
//
// Each key has one lock file under the root, named by the SHA-256 of the
// key; the file is locked while the key is held and also holds the key's
// record (see internal/localfs). Lock files are created whole (never empty)
// and are never deleted, renamed or replaced by the store. If someone else
// does, the key's grant is lost: on Linux the Held of a grant ends at once
// (watchHeld); elsewhere its next Renew, Confirm or Release says ErrLost.
// Every LocalStore is one
// owner: two stores on one root, in one process or in two, contend as
// separate processes do.
//
// A held key costs one open descriptor, which holds the flock and reads and
// writes the record. Holder and Holders lock nothing: on Linux they read
// which files are locked from /proc/locks.
//
// A LocalStore is safe for concurrent use; calls on one key are serialised.
type LocalStore struct {
	root   string
	cfg    config
	obs    *observer  // nil without WithObserver
	holds  keeperSlot // Hold's loop for this store
	locks  keyLocks
	closed chan struct{} // closed when Close begins

	mu      sync.Mutex            // guards the fields below
	held    map[string]*localLock // the keys whose flock this instance holds
	watch   *localfs.Watch        // the release watch, while any key is watched and for a while after (watchLocked)
	watched map[string]int        // watchRelease calls in force, per key
	spare   map[string]*os.File   // a watched key's descriptor, kept between tries
	done    bool                  // Close has begun

	losses        lossQueue // Helds whose lock file the watch found replaced (watchHeld)
	unwatchedOnce sync.Once // warns once that Helds cannot be watched

	flocks localfs.Flocks // how /proc/locks names the root's device (Linux)

	roundTrips atomic.Uint64 // flock operations and durable writes; read by benchmarks
	watchIdle  time.Duration // how long the watch runs on with nothing to watch: localWatchIdle, less in tests
}

var _ Store = (*LocalStore)(nil)

// localLock is a key whose flock this instance holds.
type localLock struct {
	f     *os.File           // the one descriptor: it holds the flock and reads and writes the record
	id    localfs.FileID     // the inode f is open on
	seq   uint64             // write number of the newest record in the file
	grant Grant              // the grant the record names; zero until acquired
	watch *localfs.HeldCheck // its watchHeld, while a Held has the grant; guarded by LocalStore.mu
	done  sync.Once          // gives the flock up once, whoever gets there first
}

// Bounds on how long a loser of a race waits for the winner's record to
// appear before it names the winner (R5): the winner writes one record
// between taking the flock and returning, well under a second.
const (
	localPeekTries    = 200
	localPeekMaxPause = 5 * time.Millisecond
)

// localReleaseWorkers bounds how many releases ReleaseAll runs at once:
// each waits for its own fdatasync, which the device serves together.
const localReleaseWorkers = 16

// NewLocalStore returns a store keeping its lock files in root. root must
// be a writable directory, or a name that mkdir can create (mode 0700) in an
// existing directory. WithTTL is ignored: grants never expire.
func NewLocalStore(root string, opts ...Option) (*LocalStore, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := localfs.Supported(); err != nil {
		return nil, err
	}
	if root == "" {
		return nil, errors.New("lease: local store root is empty")
	}
	root = filepath.Clean(root)
	if err := prepareRoot(root); err != nil {
		return nil, err
	}
	s := &LocalStore{
		root:    root,
		cfg:     cfg,
		obs:     newObserver(cfg.observer, "local", cfg.owner),
		closed:  make(chan struct{}),
		held:    make(map[string]*localLock),
		watched: make(map[string]int),
		spare:   make(map[string]*os.File),

		watchIdle: localWatchIdle,
	}
	s.losses.settle = s.settleLoss
	return s, nil
}

// prepareRoot makes sure root is a directory this process can create files
// in, creating it (but not its parents) if missing. Stores opened at once on
// a missing root race to create it: the losers' EEXIST is checked like any
// existing root.
func prepareRoot(root string) error {
	err := os.Mkdir(root, 0o700)
	if err != nil && !errors.Is(err, os.ErrExist) {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("lease: local store root %q does not exist and cannot be created: %w", root, err)
		}
		if _, serr := os.Stat(root); serr != nil {
			return fmt.Errorf("lease: local store root %q: %w", root, err)
		}
	}
	fi, err := os.Stat(root)
	switch {
	case err != nil:
		return fmt.Errorf("lease: local store root %q: %w", root, err)
	case !fi.IsDir():
		return fmt.Errorf("lease: local store root %q is not a directory", root)
	}
	// Access checks lie on some filesystems (read-only mounts, ACLs), so
	// create and remove a file the way the store will.
	f, err := localfs.CreateTemp(root, ".probe-")
	if err != nil {
		return fmt.Errorf("lease: local store root %q is not writable: %w", root, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// openLocalStore serves Open("file:/path/dir"). It accepts "file:/dir" and
// "file:///dir", not a host name.
func openLocalStore(root string, opts []Option) (Store, error) {
	if rest, ok := strings.CutPrefix(root, "//"); ok {
		if !strings.HasPrefix(rest, "/") {
			// Not shown: what would be its user info may hold a password.
			return nil, errors.New("lease: file: URL names a host (file://HOST/...); want file:/path/dir")
		}
		root = rest
	}
	return NewLocalStore(root, opts...)
}

// Owner returns the owner id this store writes into records.
func (s *LocalStore) Owner() string { return s.cfg.owner }

// lockName is the name of key's lock file: a fixed-length name safe on
// every filesystem, whatever the key.
func lockName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:]) + ".lock"
}

// lockPath is where key's lock file lives.
func (s *LocalStore) lockPath(key string) string {
	return filepath.Join(s.root, lockName(key))
}

// Acquire takes key (R4, "expired" meaning "its flock is free"). Taking the
// flock fails at once if another holder has it: the error is a *HeldError
// naming that holder. A key held by this instance returns the same grant.
func (s *LocalStore) Acquire(ctx context.Context, key string) (Grant, error) {
	g, err := s.acquire(ctx, key)
	if err == nil {
		s.obs.acquired(g)
	}
	return g, err
}

func (s *LocalStore) acquire(ctx context.Context, key string) (Grant, error) {
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
		// twice, a pause apart: it may be a dead holder's, with the flock
		// taken by a winner whose record (written a few system calls
		// after its flock, visible before its fdatasync) has not appeared
		// yet.
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
	rec, _, err := s.readRecord(h.f, key)
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
	rec, p, seq, err := s.readRecordPlace(h.f, key)
	if err != nil { // R10: give the flock back, write nothing
		s.giveBack(key, h)
		return Grant{}, s.storageErr("acquire", key, err)
	}
	if seen != noRace && rec != nil && rec.Epoch > seen {
		// R5: another store acquired the key while we waited for its
		// flock; we lost that race, even though the winner has released.
		s.giveBack(key, h)
		return Grant{}, heldBy(*rec)
	}
	// We hold the flock, so the record's holder, if any, is gone.
	in := acquireInput{Stored: rec, Expired: true, Owner: s.cfg.owner}
	if rec != nil {
		in.Place = judgePlace(p, rec.Epoch, s.cfg.owner, "", false, s.cfg.now())
	}
	out := decide(in)
	if out.Err != nil {
		s.giveBack(key, h)
		return Grant{}, out.Err
	}
	g := out.Next
	g.Key = key
	err = s.write(h, seq+1, g, false)
	if err == nil && seq == 1 {
		// The first grant of a new file: the file's name must be as
		// durable as the grant, or a power loss could bring back a key
		// never written, and epoch 1 again (R2).
		err = localfs.SyncDir(s.root)
	}
	if err != nil {
		// Whether the write landed is unknown; giving the flock back is a
		// crash to the next holder, which is safe either way: it finds the
		// old record or this one, unreleased, and moves past both (R9).
		s.giveBack(key, h)
		return Grant{}, s.storageErr("acquire", key, err)
	}
	h.grant = g
	if g.PreviousUnclean {
		s.cfg.logger.Info("lease: took over from a holder that died without releasing",
			"key", key, "previous_owner", rec.Owner, "epoch", g.Epoch)
	}
	s.mu.Lock()
	closed := s.done
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
	next, err := s.renew(ctx, g)
	s.obs.renewed(g, err, 1)
	return next, err
}

func (s *LocalStore) renew(ctx context.Context, g Grant) (Grant, error) {
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
// not hold, or whose lock file was replaced, fails with ErrLost.
func (s *LocalStore) Release(ctx context.Context, g Grant) error {
	err := s.release(ctx, g)
	s.obs.released(g, false, err)
	return err
}

func (s *LocalStore) release(ctx context.Context, g Grant) error {
	return s.giveUpKey(ctx, "release", g, "", time.Time{})
}

// placesOn reports that the local store can hand a key off (R25): its
// records keep a reserved next owner.
func (s *LocalStore) placesOn() bool { return true }

// handoff releases g reserved for owner until a TTL from now (R25), in
// the one write that releases it: only a store of owner takes the key
// until then. Local grants never expire; the bound is WithTTL's, or
// DefaultTTL.
func (s *LocalStore) handoff(ctx context.Context, g Grant, owner string) error {
	return s.giveUpKey(ctx, "handoff", g, owner, s.cfg.now().Add(s.cfg.ttl))
}

// giveUpKey writes g's record released, reserved for next until until
// when next is not "" (a hand-off), durably, and then gives up the flock.
func (s *LocalStore) giveUpKey(ctx context.Context, op string, g Grant, next string, until time.Time) error {
	unlock, err := s.begin(ctx, g.Key)
	if err != nil {
		return err
	}
	defer unlock()
	s.holds.giveUp(g) // its Held ends before the key can pass on (R17)
	// Only the flock's holder writes the record, so while this instance
	// holds the flock the record names its grant: no read is needed. But
	// the flock guards the key only while the path names the locked file.
	h := s.heldLock(g.Key)
	if h == nil || h.grant.Owner != g.Owner || h.grant.Epoch != g.Epoch {
		return lost(g.Key, g.Epoch)
	}
	if !s.stillLinked(g.Key, h) {
		s.drop(g.Key, h)
		return lost(g.Key, g.Epoch)
	}
	rec := localfs.Record{Key: g.Key, Owner: g.Owner, Epoch: g.Epoch, Released: true, Next: next}
	if next != "" {
		rec.Until = until.UnixNano()
	}
	if err := s.writeSlot(h, h.seq+1, rec); err != nil {
		return s.storageErr(op, g.Key, err)
	}
	s.drop(g.Key, h)
	return nil
}

// Holder returns the record of key's live holder: an unreleased record
// whose flock is taken, in the file the key's path names now. It is ErrNotFound when the key was never written,
// is released, or its holder died. It creates and locks nothing.
func (s *LocalStore) Holder(ctx context.Context, key string) (Record, error) {
	unlock, err := s.begin(ctx, key)
	if err != nil {
		return Record{}, err
	}
	defer unlock()
	if h := s.heldLock(key); h != nil {
		rec, _, err := s.readRecord(h.f, key)
		if err != nil {
			return Record{}, s.storageErr("holder", key, err)
		}
		// The descriptor may be open on a file that no longer is the
		// key's: then the path, not this store, knows the holder.
		if names(rec, h.grant) && s.stillLinked(key, h) {
			return *rec, nil
		}
	}
	rec, err := s.liveRecord(key, s.flocks.View(s.root))
	switch {
	case err != nil:
		return Record{}, s.storageErr("holder", key, err)
	case rec == nil:
		return Record{}, ErrNotFound
	}
	return *rec, nil
}

// liveRecord reads key's record without locking anything and returns it
// if it names a live holder: unreleased, and its file flocked by someone
// (view tells). It returns nil when nobody holds key.
func (s *LocalStore) liveRecord(key string, view *localfs.FlockView) (*Record, error) {
	f, id, err := localfs.OpenLockFile(s.lockPath(key), os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, lockFileErr(err)
	}
	defer f.Close()
	rec, _, err := readRecord(f, key)
	if err != nil || rec == nil || rec.Released {
		return nil, err
	}
	locked, err := view.Locked(f, id)
	if err != nil || !locked {
		return nil, err
	}
	// Read again: a winner that took the flock of a dead holder's file
	// may have written its own record meanwhile.
	if again, _, err := readRecord(f, key); err == nil && again != nil && !again.Released {
		return again, nil
	}
	return nil, nil
}

// ReleaseAll releases every grant this instance holds, each as Release
// would (R13): durable before it returns, a grant whose write failed kept.
// Each release waits for its own file's fdatasync, so a few run at once.
// It goes on past failures and joins them.
func (s *LocalStore) ReleaseAll(ctx context.Context) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	grants := make([]Grant, 0, len(s.held))
	for _, h := range s.held {
		grants = append(grants, h.grant)
	}
	s.mu.Unlock()
	s.holds.giveUp(grants...) // their Helds end before any key can pass on (R17)
	errs := make([]error, len(grants))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(localReleaseWorkers, len(grants)) {
		wg.Go(func() {
			for i := range next {
				errs[i] = s.release(ctx, grants[i])
				s.obs.released(grants[i], true, errs[i])
			}
		})
	}
	for i := range grants {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// Close gives up every flock this instance holds without writing, as a
// crash would: the next holder of each key sees PreviousUnclean. It ends
// the store's watch. Later calls fail with ErrClosed. Close is idempotent.
func (s *LocalStore) Close() error {
	s.holds.close() // every Held ends before its flock is dropped (R15, R17)
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return nil
	}
	s.done = true
	close(s.closed)
	s.obs.closed()
	held, spare, w := s.held, s.spare, s.watch
	s.held, s.spare, s.watch = map[string]*localLock{}, map[string]*os.File{}, nil
	s.mu.Unlock()
	var errs []error
	for _, h := range held {
		errs = append(errs, s.unlock(h))
	}
	for _, f := range spare {
		f.Close()
	}
	if w != nil {
		w.Stop()
	}
	s.losses.close() // after the watch: nothing adds losses any more
	return errors.Join(errs...)
}

func (s *LocalStore) logger() *slog.Logger { return s.cfg.logger }

func (s *LocalStore) keeperSlot() *keeperSlot { return &s.holds }

// begin checks a call's key, context and store, then takes key's lock.
func (s *LocalStore) begin(ctx context.Context, key string) (unlock func(), err error) {
	return s.locks.begin(ctx, key, s.isClosed)
}

// usable refuses a call on a closed store or with an ended ctx.
func (s *LocalStore) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.isClosed() {
		return ErrClosed
	}
	return nil
}

func (s *LocalStore) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// heldLock returns key's entry in the table, or nil.
func (s *LocalStore) heldLock(key string) *localLock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[key]
}

// confirm finds the entry for g and checks that it still stands: the lock
// file is still the locked inode, and the record names g. A grant that no
// longer stands is dropped and reported as ErrLost.
func (s *LocalStore) confirm(op string, g Grant) (*localLock, error) {
	if err := ValidateKey(g.Key); err != nil {
		return nil, err
	}
	h := s.heldLock(g.Key)
	if h == nil || h.grant.Owner != g.Owner || h.grant.Epoch != g.Epoch {
		return nil, lost(g.Key, g.Epoch)
	}
	rec, seq, err := s.readRecord(h.f, g.Key)
	if err != nil {
		return nil, s.storageErr(op, g.Key, err)
	}
	if !names(rec, h.grant) || !s.stillLinked(g.Key, h) {
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

// write stores g (released or not) in h's file as write number seq, durably.
func (s *LocalStore) write(h *localLock, seq uint64, g Grant, released bool) error {
	return s.writeSlot(h, seq, localfs.Record{Key: g.Key, Owner: g.Owner, Epoch: g.Epoch, Released: released})
}

// writeSlot stores rec in h's lock file as write number seq.
func (s *LocalStore) writeSlot(h *localLock, seq uint64, rec localfs.Record) error {
	s.roundTrips.Add(1)
	if err := s.writeRecord(h.f, seq, rec); err != nil {
		return err
	}
	h.seq = seq
	return nil
}

// storageErr wraps a storage failure; running out of descriptors says so
// (fdLimitError). After Close it is ErrClosed: a call
// in flight may find its descriptors closed under it.
func (s *LocalStore) storageErr(op, key string, err error) error {
	if s.isClosed() {
		return ErrClosed
	}
	var limit *fdLimitError
	if !errors.As(err, &limit) && (errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)) {
		err = &fdLimitError{err}
	}
	return &StorageError{Op: op, Key: key, Err: err}
}

// drop removes key's entry if it is still h, stops watching its lock
// file and gives up h's flock.
func (s *LocalStore) drop(key string, h *localLock) {
	s.mu.Lock()
	if s.held[key] == h {
		delete(s.held, key)
	}
	s.unwatchHeldLocked(key, h)
	s.mu.Unlock()
	if err := s.unlock(h); err != nil {
		s.cfg.logger.Warn("lease: giving up a flock failed", "key", key, "err", err)
	}
}

// giveBack gives up the flock of a refused acquire. A watched key keeps
// the descriptor for its next try: closing a writable descriptor on a lock
// file wakes every waiter on the key (watchRelease), and waiters refused
// alike, say on a corrupt record, would wake each other without end.
func (s *LocalStore) giveBack(key string, h *localLock) {
	h.done.Do(func() {
		s.roundTrips.Add(1)
		if err := s.flockUnlock(key, h.f); err != nil {
			h.f.Close()
			return
		}
		s.keepSpare(key, h.f)
	})
}

// unlock gives up h's flock and closes its descriptor, once: Close and a
// call in flight may both try. The flock is given up before the close, so
// that a waiter woken by the close (watchRelease) finds it free.
func (s *LocalStore) unlock(h *localLock) error {
	var err error
	h.done.Do(func() {
		s.roundTrips.Add(1)
		err = errors.Join(s.flockUnlock(h.grant.Key, h.f), h.f.Close())
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
	rec, err := s.peek(key)
	switch {
	case err != nil:
		return Record{}, s.storageErr("record", key, err)
	case rec == nil:
		return Record{}, ErrNotFound
	}
	return *rec, nil
}
