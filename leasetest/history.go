package leasetest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/leasekit/lease"
)

// Op names a recorded call.
type Op string

// The calls a Recorder logs.
const (
	OpAcquire Op = "acquire"
	OpRenew   Op = "renew"
	OpRelease Op = "release"
	OpHolder  Op = "holder"
	// OpReleaseAll is a store's ReleaseAll: it touches every key, so the
	// history checks it against each key's record.
	OpReleaseAll Op = "release all"
)

// Call is what a recorded call was asked: by which store (owner), at which
// reading of the store's clock, on which key, with which grant.
type Call struct {
	Op    Op
	Key   string      // "" for release all
	Owner string      // the calling store's owner; one owner per store instance
	Now   time.Time   // the store's clock when the call began
	Grant lease.Grant // renew and release
	// Session: an acquire that attaches the key to the store's session,
	// as Hold's do (R18); its grant expires with the session (R20).
	Session bool
}

// Answer kinds: how a recorded call ended.
const (
	KindOK       = "ok"
	KindHeld     = "held"      // ErrHeld
	KindLost     = "lost"      // ErrLost
	KindNotFound = "not found" // ErrNotFound
	KindStorage  = "storage"   // a *StorageError: R9 says nothing changed
	KindOther    = "other"     // anything else: no rule allows it here
)

// Answer is what a recorded call returned.
type Answer struct {
	Kind   string
	Grant  lease.Grant     // acquire and renew, when KindOK
	Record lease.Record    // holder, when KindOK
	Held   lease.HeldError // acquire, when KindHeld
	Err    string          // the error's text, for the visualization
}

// Recorder logs every call made through the stores it wraps, with its
// invocation and response times, for CheckHistory. It is safe for
// concurrent use.
type Recorder struct {
	mu      sync.Mutex // guards ops and clients
	start   time.Time
	ops     []porcupine.Operation
	clients int
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Wrap returns s, recording each Acquire, Renew, Release, Holder and
// ReleaseAll call made through it. owner must be s's owner and clock its clock: the history
// judges each call at the clock's reading when it began, so the clock must
// not move while calls are in flight.
func (r *Recorder) Wrap(s lease.Store, owner string, clock func() time.Time) lease.Store {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clients++
	return &recorded{Store: s, r: r, client: r.clients - 1, owner: owner, clock: clock}
}

// History returns the calls recorded so far.
func (r *Recorder) History() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.ops...)
}

func (r *Recorder) since() int64 { return int64(time.Since(r.start)) }

func (r *Recorder) log(client int, in Call, call int64, out Answer) {
	ret := r.since()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// recorded is a Store whose calls a Recorder logs.
type recorded struct {
	lease.Store
	r      *Recorder
	client int
	owner  string
	clock  func() time.Time
}

func (s *recorded) begin(op Op, key string, g lease.Grant) (Call, int64) {
	return Call{Op: op, Key: key, Owner: s.owner, Now: s.clock(), Grant: g}, s.r.since()
}

func (s *recorded) Acquire(ctx context.Context, key string) (lease.Grant, error) {
	in, call := s.begin(OpAcquire, key, lease.Grant{})
	g, err := s.Store.Acquire(ctx, key)
	s.r.log(s.client, in, call, answer(err, func(a *Answer) { a.Grant = g }))
	return g, err
}

func (s *recorded) Renew(ctx context.Context, g lease.Grant) (lease.Grant, error) {
	in, call := s.begin(OpRenew, g.Key, g)
	got, err := s.Store.Renew(ctx, g)
	s.r.log(s.client, in, call, answer(err, func(a *Answer) { a.Grant = got }))
	return got, err
}

func (s *recorded) Release(ctx context.Context, g lease.Grant) error {
	in, call := s.begin(OpRelease, g.Key, g)
	err := s.Store.Release(ctx, g)
	s.r.log(s.client, in, call, answer(err, nil))
	return err
}

func (s *recorded) Holder(ctx context.Context, key string) (lease.Record, error) {
	in, call := s.begin(OpHolder, key, lease.Grant{})
	rec, err := s.Store.Holder(ctx, key)
	s.r.log(s.client, in, call, answer(err, func(a *Answer) { a.Record = rec }))
	return rec, err
}

// ReleaseAll releases every grant of the store, ending its session clean
// where it has one (R13, R22): each key's record is freed on its own.
func (s *recorded) ReleaseAll(ctx context.Context) error {
	in, call := s.begin(OpReleaseAll, "", lease.Grant{})
	err := s.Store.ReleaseAll(ctx)
	s.r.log(s.client, in, call, answer(err, nil))
	return err
}

// acquireInSession acquires key into the store's session, as Hold does
// (R18), through the batched acquire that the lease package's own tests
// expose (batcher); ok is false, and nothing is called, for a store that
// offers none or keeps no sessions.
func (s *recorded) acquireInSession(ctx context.Context, key string) (g lease.Grant, ok bool, err error) {
	b, isBatcher := s.Store.(batcher)
	if !isBatcher || !b.KeepsSessions() {
		return lease.Grant{}, false, nil
	}
	in, call := s.begin(OpAcquire, key, lease.Grant{})
	in.Session = true
	gs, errs := b.AcquireBatch(ctx, []string{key})
	if len(gs) != 1 || len(errs) != 1 {
		err = fmt.Errorf("leasetest: AcquireBatch of one key answered %d grants and %d errors", len(gs), len(errs))
	} else {
		g, err = gs[0], errs[0]
	}
	s.r.log(s.client, in, call, answer(err, func(a *Answer) { a.Grant = g }))
	return g, true, err
}

// Holders passes through unrecorded, as does Close: a history to be
// checked must not use them.
func (s *recorded) Holders(ctx context.Context, prefix string) iter.Seq2[lease.Record, error] {
	return s.Store.Holders(ctx, prefix)
}

// answer classifies err; ok fills in the result of a call that succeeded.
func answer(err error, ok func(*Answer)) Answer {
	var a Answer
	var held *lease.HeldError
	var se *lease.StorageError
	switch {
	case err == nil:
		a.Kind = KindOK
		if ok != nil {
			ok(&a)
		}
		return a
	case errors.As(err, &held):
		a.Kind, a.Held = KindHeld, *held
	case errors.Is(err, lease.ErrLost):
		a.Kind = KindLost
	case errors.Is(err, lease.ErrNotFound):
		a.Kind = KindNotFound
	case errors.As(err, &se):
		a.Kind = KindStorage
	default:
		a.Kind = KindOther
	}
	a.Err = err.Error()
	return a
}

// keyState is the sequential model's state of one key: its record.
type keyState struct {
	Exists   bool
	Owner    string
	Epoch    uint64
	Expires  int64 // UnixNano; 0 with ttl 0: never expires
	Released bool
	Unclean  bool // the holder's grant said PreviousUnclean
	// Session: the key is attached to its holder's session, whose expiry
	// Expires is (R20). TestLinearizable attaches to a store's sessions
	// the keys of one key only, so that a session's writes (a renewal,
	// ReleaseAll's clean end, a taker's kill) change this key alone and
	// the history can still be checked key by key.
	Session bool
	// Lapsed: the holder's store found that session over (a renewal
	// answered ErrLost while the record still named the grant: the
	// store's own deadline, by a clock the history does not see, R19).
	// It never renews it again; its next acquire of the key takes it
	// again at epoch + 1 (R4d), while other stores still see it held
	// until it expires.
	Lapsed bool
}

// LeaseModel is the sequential specification of the lease rules that
// CheckHistory checks histories against: one record per key, changed by
// acquire (R4), renew (R6) and release (R7) and read by holder, with expiry
// judged at each call's clock reading and ttl (0: grants never expire,
// holders live until they release). Owners must be one per store instance,
// so that "held by this instance" (R4c) is "the record names my owner".
func LeaseModel(ttl time.Duration) porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			var everyKey []porcupine.Operation // release all: one write per key, each at a point of its own
			for _, op := range history {
				in := op.Input.(Call)
				if in.Op == OpReleaseAll {
					everyKey = append(everyKey, op)
					continue
				}
				if _, ok := byKey[in.Key]; !ok {
					keys = append(keys, in.Key)
				}
				byKey[in.Key] = append(byKey[in.Key], op)
			}
			parts := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				parts = append(parts, append(byKey[k], everyKey...))
			}
			return parts
		},
		Init: func() any { return keyState{} },
		Step: func(state, input, output any) (bool, any) {
			return step(state.(keyState), input.(Call), output.(Answer), ttl)
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(Call), output.(Answer)
			return describe(in, out)
		},
		DescribeState: func(state any) string {
			s := state.(keyState)
			switch {
			case !s.Exists:
				return "no record"
			case s.Released:
				return fmt.Sprintf("released by %s at epoch %d", s.Owner, s.Epoch)
			case s.Lapsed:
				return fmt.Sprintf("%s epoch %d until %s, in a session its store let lapse", s.Owner, s.Epoch, expiryText(s.Expires))
			case s.Session:
				return fmt.Sprintf("%s epoch %d until %s, in its session", s.Owner, s.Epoch, expiryText(s.Expires))
			}
			return fmt.Sprintf("%s epoch %d until %s", s.Owner, s.Epoch, expiryText(s.Expires))
		},
	}
}

func expiryText(ns int64) string {
	if ns == 0 {
		return "released"
	}
	return time.Unix(0, ns).UTC().Format("15:04:05.000")
}

func describe(in Call, out Answer) string {
	var arg string
	if in.Op == OpRenew || in.Op == OpRelease {
		arg = fmt.Sprintf(" epoch %d", in.Grant.Epoch)
	}
	if in.Session {
		arg = " into its session"
	}
	res := out.Kind
	switch {
	case out.Kind == KindOK && (in.Op == OpAcquire || in.Op == OpRenew):
		res = fmt.Sprintf("epoch %d until %s unclean=%v", out.Grant.Epoch, expiryText(unixNano(out.Grant.ExpiresAt)), out.Grant.PreviousUnclean)
	case out.Kind == KindOK && in.Op == OpHolder:
		res = fmt.Sprintf("%s epoch %d", out.Record.Owner, out.Record.Epoch)
	case out.Kind == KindHeld:
		res = fmt.Sprintf("held by %s epoch %d", out.Held.Owner, out.Held.Epoch)
	case out.Err != "":
		res = out.Err
	}
	return fmt.Sprintf("%s %s(%s%s) at %s -> %s", in.Owner, in.Op, in.Key, arg, in.Now.UTC().Format("15:04:05.000"), res)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// step applies one call to one key's record: whether the answer is allowed,
// and the record afterwards.
func step(s keyState, in Call, out Answer, ttl time.Duration) (bool, keyState) {
	now := in.Now.UnixNano()
	live := s.Exists && !s.Released && (ttl == 0 || now < s.Expires)
	if out.Kind == KindStorage {
		return true, s // R9: a *StorageError means the old state stands
	}
	switch in.Op {
	case OpAcquire:
		return stepAcquire(s, in, out, ttl, live)
	case OpRenew:
		if !live || s.Owner != in.Grant.Owner || s.Epoch != in.Grant.Epoch || s.Lapsed { // R6, R19
			return out.Kind == KindLost, s
		}
		if s.Session && out.Kind == KindLost { // R19: the store's own deadline for its session passed
			next := s
			next.Lapsed = true
			return true, next
		}
		next := s
		if ttl > 0 {
			next.Expires = now + int64(ttl) // R20: for a key of a session, its session's renewal
		}
		g := out.Grant
		return out.Kind == KindOK && g.Owner == s.Owner && g.Epoch == s.Epoch && unixNano(g.ExpiresAt) == next.Expires, next
	case OpRelease:
		if !s.Exists || s.Released || s.Owner != in.Grant.Owner || s.Epoch != in.Grant.Epoch { // R7; R22: a session ended clean released it
			return out.Kind == KindLost, s
		}
		return out.Kind == KindOK, released(s)
	case OpReleaseAll:
		// R13, R22: a key whose record names the store's owner is freed
		// (its session ended clean, or its record released), whatever its
		// expiry; ErrLost tells of a key of it that another store took,
		// which may be any key.
		if out.Kind != KindOK && out.Kind != KindLost {
			return false, s
		}
		if s.Exists && !s.Released && s.Owner == in.Owner {
			return true, released(s)
		}
		return true, s
	case OpHolder:
		if !live {
			return out.Kind == KindNotFound, s
		}
		r := out.Record
		return out.Kind == KindOK && r.Owner == s.Owner && r.Epoch == s.Epoch && !r.Released && unixNano(r.ExpiresAt) == s.Expires, s
	}
	return false, s
}

// stepAcquire applies an acquire (R4, R5); into the store's session for
// in.Session (R18, R21).
func stepAcquire(s keyState, in Call, out Answer, ttl time.Duration, live bool) (bool, keyState) {
	g := out.Grant
	if live && s.Owner == in.Owner && !s.Lapsed { // R4c
		same := out.Kind == KindOK && g.Owner == s.Owner && g.Epoch == s.Epoch &&
			unixNano(g.ExpiresAt) == s.Expires && g.PreviousUnclean == s.Unclean
		if same || !in.Session || g.Epoch != s.Epoch+1 {
			return same, s
		}
		// R19: an acquire into the session may find the store's own
		// deadline for it passed, lapse it, and take the key again in a
		// new one (R4d), at epoch + 1, as below.
	} else if live && s.Owner != in.Owner { // R4e; R21: a live session keeps its keys
		return out.Kind == KindHeld && out.Held.Owner == s.Owner && out.Held.Epoch == s.Epoch, s
	}
	// R4a, b, d, f; R21: a taker ends the dead session first, and the key
	// goes on with PreviousUnclean unless its session ended clean (which
	// released it here).
	next := keyState{Exists: true, Owner: in.Owner, Epoch: s.Epoch + 1,
		Unclean: s.Exists && !s.Released && s.Owner != in.Owner, Session: in.Session && ttl > 0}
	if ttl > 0 {
		next.Expires = in.Now.UnixNano() + int64(ttl)
	}
	expires := unixNano(g.ExpiresAt) == next.Expires
	if next.Session { // R20: the session's expiry; a session joined, not started, expires sooner
		next.Expires = unixNano(g.ExpiresAt)
		expires = next.Expires > in.Now.UnixNano() && next.Expires <= in.Now.UnixNano()+int64(ttl)
	}
	return out.Kind == KindOK && g.Key == in.Key && g.Owner == in.Owner && g.Epoch == next.Epoch &&
		expires && g.PreviousUnclean == next.Unclean, next
}

// released is s once its record is released: by a release of its own, or
// with its session's clean end (R7, R22), which the next holder sees alike.
func released(s keyState) keyState {
	s.Released, s.Session, s.Lapsed = true, false, false
	return s
}

// CheckHistory checks that the recorded history is linearizable against
// LeaseModel(ttl). When it is not, it writes porcupine's HTML visualization
// into t.ArtifactDir() and fails, naming the file (run go test with
// -artifacts to keep it).
func CheckHistory(t *testing.T, r *Recorder, ttl time.Duration) {
	t.Helper()
	history := r.History()
	m := LeaseModel(ttl)
	res, info := porcupine.CheckOperationsVerbose(m, history, time.Minute)
	switch res {
	case porcupine.Ok:
		t.Logf("%d calls (%s): linearizable", len(history), sessionCalls(history))
		return
	case porcupine.Unknown:
		t.Logf("%d calls: porcupine ran out of time; nothing is known", len(history))
		return
	}
	path := filepath.Join(t.ArtifactDir(), "linearizability.html")
	if err := porcupine.VisualizePath(m, info, path); err != nil {
		t.Errorf("history of %d calls is not linearizable against the lease rules; writing the visualization failed: %v", len(history), err)
		return
	}
	t.Errorf("history of %d calls is not linearizable against the lease rules; see %s (kept when go test runs with -artifacts)", len(history), path)
}

// sessionCalls counts the calls of history that wrote sessions, for the log.
func sessionCalls(history []porcupine.Operation) string {
	var into, all int
	for _, op := range history {
		in, out := op.Input.(Call), op.Output.(Answer)
		switch {
		case in.Session && out.Kind == KindOK:
			into++
		case in.Op == OpReleaseAll:
			all++
		}
	}
	return fmt.Sprintf("%d acquires into a session, %d release-alls", into, all)
}

// TestLinearizable runs 4 stores on one backend, calling Acquire, Renew,
// Release and Holder at once on 2 keys, over 50 rounds between which the
// clock jumps (by up to a TTL, to the last round's expiries or 1ms before
// them, or not at all), and checks the
// recorded history with CheckHistory.
//
// Where the stores keep sessions and offer their batched acquire to tests
// (the lease package's DocumentStore in its own tests, batcher), each also
// acquires one of the keys into its session as Hold does, renews it (one
// session write, R20) and calls ReleaseAll (the session's clean end, R22),
// and the others take it after a kill (R21): the history holds those
// session writes. A store attaches one key only to its sessions, so that
// the history is still checked key by key.
func TestLinearizable(t *testing.T, open StoreOpener) {
	ttl := probeTTL(t, open)
	const workers, rounds, callsPerRound = 4, 50, 20
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	clock := NewClock()
	rec := NewRecorder()
	ns := newNamespace()
	keys := []string{ns + "a", ns + "b"}
	stores := make([]lease.Store, workers)
	rngs := make([]*rand.Rand, workers)
	sessionKeys := make([]string, workers) // the key each store acquires into its sessions; "": none
	for i := range stores {
		owner := fmt.Sprintf("worker-%d", i)
		s := open(t, clock.Now, owner)
		t.Cleanup(func() { s.Close() })
		stores[i] = rec.Wrap(s, owner, clock.Now)
		rngs[i] = rand.New(rand.NewPCG(seed, uint64(i+1)))
		if b, ok := s.(batcher); ok && b.KeepsSessions() {
			sessionKeys[i] = keys[i%len(keys)]
		}
	}
	grants := make([]map[string]lease.Grant, workers) // each worker's last grant per key
	for i := range grants {
		grants[i] = map[string]lease.Grant{}
	}
	for range rounds {
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Go(func() {
				for range callsPerRound {
					randomCall(rngs[i], s, keys, grants[i], sessionKeys[i])
				}
			})
		}
		wg.Wait()
		switch rng.IntN(4) { // the clock moves only between rounds
		case 0:
			clock.Advance(time.Duration(rng.Int64N(int64(ttl)+1)) / time.Millisecond * time.Millisecond)
		case 1: // to the expiry of the last round's grants
			clock.Advance(ttl)
		case 2: // to 1ms before it
			clock.Advance(ttl - time.Millisecond)
		}
	}
	CheckHistory(t, rec, ttl)
}

// randomCall makes one random call through s, remembering grants; with
// sessionKey, an acquire of that key into the store's session or a
// ReleaseAll too.
func randomCall(rng *rand.Rand, s lease.Store, keys []string, grants map[string]lease.Grant, sessionKey string) {
	if sessionKey != "" {
		switch rng.IntN(6) {
		case 0:
			if got, ok, err := s.(*recorded).acquireInSession(ctxBG, sessionKey); ok && err == nil {
				grants[sessionKey] = got
			}
			return
		case 1:
			if rng.IntN(4) == 0 {
				s.ReleaseAll(ctxBG)
				return
			}
		}
	}
	key := keys[rng.IntN(len(keys))]
	g, have := grants[key]
	switch n := rng.IntN(10); {
	case n < 4 || !have:
		if got, err := s.Acquire(ctxBG, key); err == nil {
			grants[key] = got
		}
	case n < 6:
		if got, err := s.Renew(ctxBG, g); err == nil {
			grants[key] = got
		}
	case n < 8:
		s.Release(ctxBG, g)
	default:
		s.Holder(ctxBG, key)
	}
}
