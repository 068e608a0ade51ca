package lease

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/leasekit/lease/internal/localfs"
)

// This file holds what a store tells an Observer (WithObserver): the
// Event type and the helpers that stores and Hold's loop call where a
// state changes or a storage call returns. Every helper is a method on a
// nil *observer that returns at once, so a store without an observer pays
// one nil check per event and allocates nothing.

// Observer receives a store's events (WithObserver). Observe is called
// synchronously, on the goroutine that made the change, sometimes while
// the store holds a key's lock: it must be quick and must not call back
// into the store. It may be called from many goroutines at once.
type Observer interface {
	Observe(Event)
}

// WithObserver makes the store hand o an Event at each state change of
// its grants (acquired, renewed, renewal failed, lost, released), at each
// wait of a Hold through it, and at each storage call. A nil o observes
// nothing. Without an observer the store allocates nothing for events.
func WithObserver(o Observer) Option { return func(c *config) { c.observer = o } }

// EventKind says what an Event reports.
type EventKind uint8

// The kinds of Event, and the fields each one sets beyond Kind, Store and
// Owner.
const (
	// EventAcquired: a new grant (Key, Epoch); PreviousUnclean marks a
	// takeover from a holder that did not release. A grant the store
	// already held (R4c) is not acquired again. Every acquired grant
	// later ends with exactly one EventReleased or EventLost from the
	// same store, unless the process ends first.
	EventAcquired EventKind = iota + 1
	// EventRenewed: a grant was renewed (Key, Epoch); Batch is the number
	// of keys renewed in the same storage call.
	EventRenewed
	// EventRenewFailed: a renewal failed and the lease still stands, for
	// now (storage failing: Err); Hold retries until its deadline. A
	// renewal that finds the lease gone is an EventLost instead.
	EventRenewFailed
	// EventLost: a grant ended without a release by its holder (Key,
	// Epoch, Cause).
	EventLost
	// EventReleased: a grant was released (Key, Epoch); All when by
	// ReleaseAll.
	EventReleased
	// EventWaitStarted: a Hold found Key held (or storage failing) and
	// began to wait for it.
	EventWaitStarted
	// EventWaitDone: a waiting Hold got Key (Epoch) after Duration.
	EventWaitDone
	// EventWaitGaveUp: a waiting Hold stopped waiting for Key after
	// Duration, with Err (its context ended, the store closed, or a look
	// failed for good).
	EventWaitGaveUp
	// EventStorage: one storage call returned: Op, Batch keys (Key when
	// the call was about one key), Duration, and Err if it failed.
	EventStorage
	// EventSessionStarted: the store started a session (Session) for its
	// Helds' keys (R18).
	EventSessionStarted
	// EventSessionRenewed: the store renewed its session (Session) in one
	// write, renewing every key attached to it (R20); Err when the write
	// failed and the session still stands, for now.
	EventSessionRenewed
	// EventSessionEnded: the store's session (Session) ended: lapsed,
	// ended by another store, or ended clean by ReleaseAll (Err says
	// which). Every Held of it ended first; each key reports EventLost
	// or EventReleased of its own.
	EventSessionEnded
	// EventSessionKilled: the store ended another store's session
	// (Session) that had expired, before taking one of its keys (R21).
	EventSessionKilled
)

var eventKindNames = [...]string{
	EventAcquired:    "acquired",
	EventRenewed:     "renewed",
	EventRenewFailed: "renew_failed",
	EventLost:        "lost",
	EventReleased:    "released",
	EventWaitStarted: "wait_started",
	EventWaitDone:    "wait_done",
	EventWaitGaveUp:  "wait_gave_up",
	EventStorage:     "storage",

	EventSessionStarted: "session_started",
	EventSessionRenewed: "session_renewed",
	EventSessionEnded:   "session_ended",
	EventSessionKilled:  "session_killed",
}

// String returns the kind's name in snake case, e.g. "renew_failed".
func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && eventKindNames[k] != "" {
		return eventKindNames[k]
	}
	return "unknown"
}

// LossCause says why a grant was lost (EventLost).
type LossCause uint8

// The causes of a loss.
const (
	// LossTaken: the record no longer names the grant: another holder
	// took the key after it expired, or the record changed under it.
	LossTaken LossCause = iota + 1
	// LossExpired: the grant ran out before it was renewed.
	LossExpired
	// LossClosed: the store was closed while the grant was held (R15).
	LossClosed
	// LossDeadline: Hold's renewals kept failing until ExpiresAt minus
	// the safety margin, and Hold ended the lease.
	LossDeadline
)

var lossCauseNames = [...]string{
	LossTaken:    "taken",
	LossExpired:  "expired",
	LossClosed:   "closed",
	LossDeadline: "deadline",
}

// String returns "taken", "expired", "closed" or "deadline".
func (c LossCause) String() string {
	if int(c) < len(lossCauseNames) && lossCauseNames[c] != "" {
		return lossCauseNames[c]
	}
	return "unknown"
}

// StorageOp names the storage call an EventStorage reports (Event.Op).
// Its values are short snake-case words, fit for a metric attribute.
type StorageOp string

// The storage operations. A DocumentStore calls its driver (get,
// get_many, put, put_many, list); a LocalStore takes and gives up flocks
// (lock, unlock) and reads and writes lock files' records (read, write:
// durable).
const (
	OpGet     StorageOp = "get"      // Driver.Get
	OpGetMany StorageOp = "get_many" // BatchReader.GetMany
	OpPut     StorageOp = "put"      // Driver.Put
	OpPutMany StorageOp = "put_many" // BatchDriver.PutMany
	OpList    StorageOp = "list"     // ListDriver.List
	OpLock    StorageOp = "lock"     // LocalStore: flock a key's lock file
	OpUnlock  StorageOp = "unlock"   // LocalStore: give the flock up
	OpRead    StorageOp = "read"     // LocalStore: read a lock file's record
	OpWrite   StorageOp = "write"    // LocalStore: write a record durably

	OpGetSession     StorageOp = "get_session"     // SessionDriver.GetSession
	OpPutSession     StorageOp = "put_session"     // SessionDriver.PutSession
	OpRemoveSessions StorageOp = "remove_sessions" // SessionDriver.RemoveSessions
)

// Event is one thing a store did. Which fields are set depends on Kind.
type Event struct {
	Kind  EventKind
	Store string // the store kind: its driver's Name ("memory", "sqlite", …) or "local"
	Owner string // the store's owner
	Key   string // empty for a storage call about several keys

	Session string // EventSession…: the session's id; also set on a storage call about a session

	Epoch           uint64    // the grant's epoch
	PreviousUnclean bool      // EventAcquired: a takeover
	All             bool      // EventReleased: by ReleaseAll
	Cause           LossCause // EventLost

	Op       StorageOp     // EventStorage: the operation (OpGet, …)
	Batch    int           // EventStorage, EventRenewed: keys in the call
	Duration time.Duration // EventStorage, EventWaitDone, EventWaitGaveUp
	Err      error         // EventStorage, EventRenewFailed, EventWaitGaveUp
}

// observer is a store's link to its Observer, nil when it has none. It
// remembers which grants it reported acquired and not yet ended, so that
// each one ends with exactly one EventReleased or EventLost, whichever
// path (the store, Hold's loop, Close) sees the end first.
type observer struct {
	o     Observer
	store string
	owner string

	mu   sync.Mutex
	live map[string]uint64 // key → epoch of a grant reported acquired and not yet ended
}

func newObserver(o Observer, store, owner string) *observer {
	if o == nil {
		return nil
	}
	return &observer{o: o, store: store, owner: owner, live: make(map[string]uint64)}
}

func (ob *observer) emit(e Event) {
	e.Store = ob.store
	if e.Owner == "" {
		e.Owner = ob.owner
	}
	ob.o.Observe(e)
}

// start returns the time a storage call or wait begins; the zero time
// without an observer, which then needs no clock.
func (ob *observer) start() time.Time {
	if ob == nil {
		return time.Time{}
	}
	return time.Now()
}

// The helpers the stores call on their hot paths are small enough to be
// inlined: without an observer, each costs a nil check and no call.

// acquired reports g, once. A grant of the key that g replaces (this
// store's own grant, which expired, R4d) is reported lost first.
func (ob *observer) acquired(g Grant) {
	if ob != nil {
		ob.onAcquired(g)
	}
}

func (ob *observer) onAcquired(g Grant) {
	ob.mu.Lock()
	old, had := ob.live[g.Key]
	if had && old == g.Epoch {
		ob.mu.Unlock()
		return
	}
	ob.live[g.Key] = g.Epoch
	ob.mu.Unlock()
	if had {
		ob.emit(Event{Kind: EventLost, Key: g.Key, Owner: g.Owner, Epoch: old, Cause: LossExpired})
	}
	ob.emit(Event{Kind: EventAcquired, Key: g.Key, Owner: g.Owner, Epoch: g.Epoch, PreviousUnclean: g.PreviousUnclean})
}

// end reports whether g was reported acquired and had not ended, and
// marks it ended.
func (ob *observer) end(g Grant) bool {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if epoch, ok := ob.live[g.Key]; ok && epoch == g.Epoch {
		delete(ob.live, g.Key)
		return true
	}
	return false
}

// lost reports that g ended without a release, unless it already ended.
func (ob *observer) lost(g Grant, cause LossCause) {
	if ob != nil && ob.end(g) {
		ob.emit(Event{Kind: EventLost, Key: g.Key, Owner: g.Owner, Epoch: g.Epoch, Cause: cause})
	}
}

// released reports the answer to a release of g: released, or lost when
// the store found it gone (ErrLost). Other errors leave g held.
func (ob *observer) released(g Grant, all bool, err error) {
	if ob != nil {
		ob.onReleased(g, all, err)
	}
}

func (ob *observer) onReleased(g Grant, all bool, err error) {
	switch {
	case err == nil:
		if ob.end(g) {
			ob.emit(Event{Kind: EventReleased, Key: g.Key, Owner: g.Owner, Epoch: g.Epoch, All: all})
		}
	case errors.Is(err, ErrLost):
		ob.lost(g, LossTaken)
	}
}

// renewed reports the answer to a renewal of g, one of batch keys renewed
// in one call.
func (ob *observer) renewed(g Grant, err error, batch int) {
	if ob != nil {
		ob.onRenewed(g, err, batch)
	}
}

func (ob *observer) onRenewed(g Grant, err error, batch int) {
	switch {
	case err == nil:
		ob.emit(Event{Kind: EventRenewed, Key: g.Key, Owner: g.Owner, Epoch: g.Epoch, Batch: batch})
	case errors.Is(err, ErrLost):
		cause := LossTaken
		if errors.As(err, new(*expiredLost)) {
			cause = LossExpired
		}
		ob.lost(g, cause)
	default:
		ob.emit(Event{Kind: EventRenewFailed, Key: g.Key, Owner: g.Owner, Epoch: g.Epoch, Batch: batch, Err: err})
	}
}

// session reports a change of a session (kind EventSession…).
func (ob *observer) session(kind EventKind, id string, err error) {
	if ob != nil {
		ob.emit(Event{Kind: kind, Session: id, Err: err})
	}
}

// closed reports every grant still held as lost to Close (R15).
func (ob *observer) closed() {
	if ob == nil {
		return
	}
	ob.mu.Lock()
	live := ob.live
	ob.live = make(map[string]uint64)
	ob.mu.Unlock()
	for key, epoch := range live {
		ob.emit(Event{Kind: EventLost, Key: key, Owner: ob.owner, Epoch: epoch, Cause: LossClosed})
	}
}

// storage reports one storage call, begun at start, about key (or batch
// keys when key is "").
func (ob *observer) storage(op StorageOp, key string, batch int, start time.Time, err error) {
	if ob != nil {
		ob.onStorage(op, key, batch, start, err)
	}
}

func (ob *observer) onStorage(op StorageOp, key string, batch int, start time.Time, err error) {
	ob.emit(Event{Kind: EventStorage, Op: op, Key: key, Batch: batch, Duration: time.Since(start), Err: err})
}

// expiredLost is lost() for a grant that ran out before it was renewed:
// the same error, which tells the observer the cause.
type expiredLost struct{ error }

func (e *expiredLost) Unwrap() error { return e.error }

func lostExpired(key string, epoch uint64) error { return &expiredLost{lost(key, epoch)} }

// The keeper's helpers: Hold's loop calls each in one line where its
// state changes.

// observeLost reports that the loop ended g's Helds with cause.
func (k *keeper) observeLost(g Grant, cause LossCause) { observerOf(k.s).lost(g, cause) }

// observeWaitStart reports that a Hold began to wait for key, and returns
// when (the zero time without an observer).
func (k *keeper) observeWaitStart(key string) time.Time {
	ob := observerOf(k.s)
	if ob == nil {
		return time.Time{}
	}
	ob.emit(Event{Kind: EventWaitStarted, Key: key})
	return time.Now()
}

// observeWaitEnd reports how a wait for key begun at since ended: with g,
// or with err.
func (k *keeper) observeWaitEnd(key string, since time.Time, g Grant, err error) {
	ob := observerOf(k.s)
	if ob == nil {
		return
	}
	e := Event{Kind: EventWaitDone, Key: key, Epoch: g.Epoch, Duration: time.Since(since)}
	if err != nil {
		e.Kind, e.Epoch, e.Err = EventWaitGaveUp, 0, err
	}
	ob.emit(e)
}

// The stores' storage calls, each reported to the observer.

func (s *DocumentStore) observed() *observer { return s.obs }

func (s *DocumentStore) get(ctx context.Context, key string) (Record, uint64, error) {
	ctx = s.clock.probe(ctx)
	if s.obs == nil {
		return s.d.Get(ctx, key)
	}
	return s.getObserved(ctx, key)
}

func (s *DocumentStore) getObserved(ctx context.Context, key string) (Record, uint64, error) {
	start := time.Now()
	rec, version, err := s.d.Get(ctx, key)
	s.obs.storage(OpGet, key, 1, start, err)
	return rec, version, err
}

func (s *DocumentStore) put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	ctx = s.clock.probe(ctx)
	if s.obs == nil {
		return s.d.Put(ctx, rec, pre)
	}
	return s.putObserved(ctx, rec, pre)
}

func (s *DocumentStore) putObserved(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	start := time.Now()
	version, err := s.d.Put(ctx, rec, pre)
	s.obs.storage(OpPut, rec.Key, 1, start, err)
	return version, err
}

func (s *DocumentStore) getSession(ctx context.Context, id string) (SessionRecord, uint64, error) {
	if s.sr == nil {
		return SessionRecord{}, 0, corrupt("a record names session %s, and the %s driver keeps no sessions", id, s.d.Name())
	}
	ctx = s.clock.probe(ctx)
	start := s.obs.start()
	rec, version, err := s.sr.GetSession(ctx, id)
	if s.obs != nil {
		s.obs.emit(Event{Kind: EventStorage, Op: OpGetSession, Session: id, Batch: 1, Duration: time.Since(start), Err: err})
	}
	return rec, version, err
}

func (s *DocumentStore) putSession(ctx context.Context, rec SessionRecord, pre Precondition) (uint64, error) {
	ctx = s.clock.probe(ctx)
	start := s.obs.start()
	version, err := s.sd.PutSession(ctx, rec, pre)
	if s.obs != nil {
		s.obs.emit(Event{Kind: EventStorage, Op: OpPutSession, Session: rec.ID, Batch: 1, Duration: time.Since(start), Err: err})
	}
	return version, err
}

func (s *DocumentStore) getMany(ctx context.Context, br BatchReader, keys []string) ([]GetResult, error) {
	ctx = s.clock.probe(ctx)
	start := s.obs.start()
	results, err := br.GetMany(ctx, keys)
	s.obs.storage(OpGetMany, batchKey(keys), len(keys), start, err)
	return results, err
}

func (s *DocumentStore) putMany(ctx context.Context, bd BatchDriver, ws []Write) ([]PutResult, error) {
	ctx = s.clock.probe(ctx)
	start := s.obs.start()
	results, err := bd.PutMany(ctx, ws)
	key := ""
	if len(ws) == 1 {
		key = ws[0].Rec.Key
	}
	s.obs.storage(OpPutMany, key, len(ws), start, err)
	return results, err
}

func (s *DocumentStore) list(ctx context.Context, ld ListDriver, prefix, after string) ([]Record, error) {
	ctx = s.clock.probe(ctx)
	start := s.obs.start()
	recs, err := ld.List(ctx, prefix, after, holdersPage)
	s.obs.storage(OpList, "", len(recs), start, err)
	return recs, err
}

// batchKey is the Key of a storage event about keys: the key when there
// is one.
func batchKey(keys []string) string {
	switch {
	case len(keys) == 1, len(keys) == 2 && keys[1] == placeKey(keys[0]): // a key and its place (R25)
		return keys[0]
	}
	return ""
}

func (s *LocalStore) observed() *observer { return s.obs }

func (s *LocalStore) readRecord(f *os.File, key string) (*Record, uint64, error) {
	rec, _, seq, err := s.readRecordPlace(f, key)
	return rec, seq, err
}

func (s *LocalStore) readRecordPlace(f *os.File, key string) (*Record, place, uint64, error) {
	start := s.obs.start()
	rec, p, seq, err := readRecordPlace(f, key)
	s.obs.storage(OpRead, key, 1, start, err)
	return rec, p, seq, err
}

func (s *LocalStore) writeRecord(f *os.File, seq uint64, rec localfs.Record) error {
	start := s.obs.start()
	err := writeRecord(f, seq, rec)
	s.obs.storage(OpWrite, rec.Key, 1, start, err)
	return err
}

func (s *LocalStore) flockTry(key string, f *os.File) (bool, error) {
	start := s.obs.start()
	locked, err := localfs.FlockTry(f)
	s.obs.storage(OpLock, key, 1, start, err)
	return locked, err
}

func (s *LocalStore) flockUnlock(key string, f *os.File) error {
	start := s.obs.start()
	err := localfs.FlockUnlock(f)
	s.obs.storage(OpUnlock, key, 1, start, err)
	return err
}

// NewSlogObserver returns an Observer that writes each event to l as one
// record: storage calls, renewals and the start of waits at Debug;
// acquisitions, releases and waits that got their key at Info; failed
// renewals, losses and waits given up at Warn. Keys and owners are in
// every record. It suits a command's --verbose flag and tests; a service
// that holds many keys wants metrics (leaseotel) rather than a line per
// renewal.
func NewSlogObserver(l *slog.Logger) Observer {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return slogObserver{l}
}

type slogObserver struct{ l *slog.Logger }

func (o slogObserver) Observe(e Event) {
	level := slog.LevelInfo
	switch e.Kind {
	case EventStorage, EventRenewed, EventWaitStarted:
		level = slog.LevelDebug
	case EventRenewFailed, EventLost, EventWaitGaveUp:
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if !o.l.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("store", e.Store), slog.String("owner", e.Owner)}
	if e.Key != "" {
		attrs = append(attrs, slog.String("key", e.Key))
	}
	if e.Epoch != 0 {
		attrs = append(attrs, slog.Uint64("epoch", e.Epoch))
	}
	switch e.Kind {
	case EventAcquired:
		attrs = append(attrs, slog.Bool("takeover", e.PreviousUnclean))
	case EventReleased:
		attrs = append(attrs, slog.Bool("all", e.All))
	case EventLost:
		attrs = append(attrs, slog.String("cause", e.Cause.String()))
	case EventRenewed:
		attrs = append(attrs, slog.Int("batch", e.Batch))
	case EventStorage:
		attrs = append(attrs, slog.String("op", string(e.Op)), slog.Int("batch", e.Batch))
	}
	if e.Duration != 0 || e.Kind == EventStorage {
		attrs = append(attrs, slog.Duration("duration", e.Duration))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("err", e.Err.Error()))
	}
	o.l.LogAttrs(ctx, level, "lease: "+e.Kind.String(), attrs...)
}
