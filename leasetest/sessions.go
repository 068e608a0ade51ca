package leasetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
)

// The session checks of R24: a driver that states Capabilities.Sessions
// keeps each key record's Session exactly, and keeps session records with
// the compare-and-swap and versions of key records. A store trusts both:
// a Session dropped on write leaves the key per key with a far-future
// expiry (held for good), and a PutSession that upserts lets a taker's kill
// and a holder's renewal both land (R21), or revives an ended session (R19).
// They are checked on the driver directly, call by call, as the optional
// interfaces are in batch.go.

// sessionCase checks one part of R24; it runs only when implements is nil
// or says the driver has the optional interface it needs.
type sessionCase struct {
	name       string
	implements func(lease.Driver) bool
	run        func(t *testing.T, sd lease.SessionDriver)
}

var sessionCases = []sessionCase{
	{"Record.Session kept through Put and Get", nil, testKeySessionPutGet},
	{"Record.Session kept through PutMany", isBatchDriver, testKeySessionPutMany},
	{"Record.Session kept through GetMany", isBatchReader, testKeySessionGetMany},
	{"Record.Session kept through List", isListDriver, testKeySessionList},
	{"List yields key records only", isListDriver, testListNoSessions},
	{"session records round-trip with state, owner and expiry", nil, testSessionRoundTrip},
	{"GetSession of an unknown id is ErrNotFound", nil, testSessionNotFound},
	{"PutSession compare-and-swap", nil, testSessionCAS},
	{"racing PutSessions: exactly one wins", nil, testSessionRace},
	{"RemoveSessions removes expired sessions no key names", nil, testRemoveSessions},
	{"records under the reserved place keys round-trip (R25)", nil, testPlaceRecords},
}

// testPlaceRecords: a store keeps each key's place (R25) in a record under
// "!next!" + key, which R1 forbids to users; a driver stating Sessions
// keeps such records as it keeps any other, through Put, Get and GetMany.
func testPlaceRecords(t *testing.T, sd lease.SessionDriver) {
	ns, res := freshNamespace(t), lease.DriverCapabilities(sd).ExpiryResolution
	s1 := newLiveSession(t, sd, "alice")
	key := "!next!" + ns + "k"
	p := attached(key, "alice", 3, s1.ID, res)
	p.ExpiresAt = atResolution(time.Now().Add(-time.Minute).UTC(), res) // a waiter's start
	v := mustPut(t, sd, p, lease.Precondition{Absent: true})
	wantKey(t, sd, "a waiter's place", p, v)
	p.Released = true
	v = mustPut(t, sd, p, lease.Precondition{Version: v})
	wantKey(t, sd, "a place given up", p, v)
	if br, ok := sd.(lease.BatchReader); ok {
		got, err := br.GetMany(ctxBG, []string{ns + "k", key})
		if err != nil || len(got) != 2 || !errors.Is(got[0].Err, lease.ErrNotFound) || got[1].Err != nil || !sameRecord(got[1].Rec, p) || got[1].Version != v {
			t.Errorf("GetMany(%q, %q) = %+v, %v; want ErrNotFound, then %+v version %d", ns+"k", key, got, err, p, v)
		}
	}
}

// runSessionCases runs the R24 cases when d states Sessions.
func runSessionCases(t *testing.T, d lease.Driver, open DriverOpener) {
	_, isSessionDriver := d.(lease.SessionDriver)
	if !lease.DriverCapabilities(d).Sessions {
		if isSessionDriver {
			t.Logf("the driver is a lease.SessionDriver but does not state Capabilities.Sessions: stores renew its keys one by one, and the R24 cases do not run")
		}
		return
	}
	t.Run("R24", func(t *testing.T) {
		if !isSessionDriver {
			t.Fatalf("the driver (%T) states Capabilities.Sessions but is not a lease.SessionDriver: it lacks %s (R24)",
				d, strings.Join(missingSessionMethods(d), ", "))
		}
		for _, c := range sessionCases {
			if c.implements != nil && !c.implements(d) {
				continue
			}
			t.Run(c.name, func(t *testing.T) { c.run(t, openSessionDriver(t, open)) })
		}
	})
}

// missingSessionMethods names the methods of lease.SessionDriver d lacks.
func missingSessionMethods(d lease.Driver) []string {
	var missing []string
	if _, ok := d.(interface {
		GetSession(context.Context, string) (lease.SessionRecord, uint64, error)
	}); !ok {
		missing = append(missing, "GetSession")
	}
	if _, ok := d.(interface {
		PutSession(context.Context, lease.SessionRecord, lease.Precondition) (uint64, error)
	}); !ok {
		missing = append(missing, "PutSession")
	}
	if _, ok := d.(interface {
		RemoveSessions(context.Context, time.Time, int) (int, error)
	}); !ok {
		missing = append(missing, "RemoveSessions")
	}
	if len(missing) == 0 { // methods of the right names with other signatures
		missing = append(missing, "the methods with lease.SessionDriver's signatures")
	}
	return missing
}

// openSessionDriver opens a driver for one case; the opener must give the
// same kind of driver every time.
func openSessionDriver(t *testing.T, open DriverOpener) lease.SessionDriver {
	t.Helper()
	d := open(t)
	sd, ok := d.(lease.SessionDriver)
	if !ok {
		t.Fatalf("the driver (%T) states Capabilities.Sessions but is not a lease.SessionDriver", d)
	}
	return sd
}

// newSessionID returns a fresh random session id, as a store makes one
// (R18): no earlier run against the same database has it.
func newSessionID(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("crypto/rand: %v", err)
	}
	return hex.EncodeToString(b[:])
}

// freshNamespace returns a key prefix that neither this process
// (newNamespace) nor an earlier run against the same database has used.
func freshNamespace(t *testing.T) string {
	return newNamespace() + newSessionID(t)[:8] + "/"
}

// atResolution is t as a driver keeping expiries to res stores it.
func atResolution(t time.Time, res time.Duration) time.Time {
	if res > 0 {
		return t.Truncate(res)
	}
	return t
}

// sessionExpiry is an expiry with as many fractional digits as d keeps, so
// that a driver keeping fewer than it states fails.
func sessionExpiry(d lease.Driver) time.Time {
	return atResolution(NewClock().Now().Add(TTL+123456789*time.Nanosecond), lease.DriverCapabilities(d).ExpiryResolution)
}

// sameRecord reports whether two key records say the same thing, session included.
func sameRecord(a, b lease.Record) bool { return sameState(a, b) && a.Session == b.Session }

// sameSession reports whether two session records say the same thing.
func sameSession(a, b lease.SessionRecord) bool {
	return a.ID == b.ID && a.Owner == b.Owner && a.State == b.State && a.ExpiresAt.Equal(b.ExpiresAt)
}

// mustPutSession writes rec through PutSession and returns its version.
func mustPutSession(t *testing.T, sd lease.SessionDriver, rec lease.SessionRecord, pre lease.Precondition) uint64 {
	t.Helper()
	v, err := sd.PutSession(ctxBG, rec, pre)
	if err != nil {
		t.Fatalf("PutSession(%+v, %+v) = %v", rec, pre, err)
	}
	return v
}

// newLiveSession creates a live session of owner and returns it; a key
// record may name it from then on (R18: the session is durable first).
func newLiveSession(t *testing.T, sd lease.SessionDriver, owner string) lease.SessionRecord {
	t.Helper()
	rec := lease.SessionRecord{ID: newSessionID(t), Owner: owner, ExpiresAt: sessionExpiry(sd), State: lease.SessionLive}
	mustPutSession(t, sd, rec, lease.Precondition{Absent: true})
	return rec
}

// wantSession checks that id holds rec at version v (v == 0: any
// version), or, for a nil rec, that no session record has the id.
func wantSession(t *testing.T, sd lease.SessionDriver, id string, rec *lease.SessionRecord, v uint64) {
	t.Helper()
	got, gotV, err := sd.GetSession(ctxBG, id)
	switch {
	case rec == nil && !errors.Is(err, lease.ErrNotFound):
		t.Errorf("GetSession(%s) = %+v v%d, %v; want ErrNotFound", id, got, gotV, err)
	case rec == nil:
	case err != nil || !sameSession(got, *rec) || (v != 0 && gotV != v):
		t.Errorf("GetSession(%s) = %+v v%d, %v; want %+v v%d", id, got, gotV, err, *rec, v)
	}
}

// wantKey checks that key holds rec, session included, at version v (v == 0: any).
func wantKey(t *testing.T, d lease.Driver, step string, rec lease.Record, v uint64) {
	t.Helper()
	got, gotV, err := d.Get(ctxBG, rec.Key)
	if err != nil || !sameRecord(got, rec) || (v != 0 && gotV != v) {
		t.Errorf("%s: Get(%q) = %+v v%d, %v; want %+v v%d (Session %q)", step, rec.Key, got, gotV, err, rec, v, rec.Session)
	}
}

// attached is a key record attached to session id, as a store writes it:
// its own expiry is lease.SessionKeyExpiry, its session's is the real one.
func attached(key, owner string, epoch uint64, id string, res time.Duration) lease.Record {
	return lease.Record{Key: key, Owner: owner, Epoch: epoch, ExpiresAt: atResolution(lease.SessionKeyExpiry, res), Session: id}
}

// testKeySessionPutGet: Put keeps a key's Session exactly, "" as "", the
// far-future SessionKeyExpiry to the driver's resolution, and a
// compare-and-swap that moves a key to another session, or off one.
func testKeySessionPutGet(t *testing.T, sd lease.SessionDriver) {
	ns, res := freshNamespace(t), lease.DriverCapabilities(sd).ExpiryResolution
	s1, s2 := newLiveSession(t, sd, "alice"), newLiveSession(t, sd, "alice")

	a := attached(ns+"a", "alice", 1, s1.ID, res)
	v := mustPut(t, sd, a, lease.Precondition{Absent: true})
	wantKey(t, sd, "a key attached to a session", a, v)
	if got, _, err := sd.Get(ctxBG, a.Key); err == nil && !got.ExpiresAt.Equal(a.ExpiresAt) {
		t.Errorf("lease.SessionKeyExpiry %v came back as %v (stated ExpiryResolution %v)", a.ExpiresAt, got.ExpiresAt, res)
	}
	b := batchRecord(ns+"b", "bob", 1, false)
	vb := mustPut(t, sd, b, lease.Precondition{Absent: true})
	wantKey(t, sd, "a key kept per key", b, vb)

	for _, step := range []struct {
		name    string
		session string
	}{
		{"moved to another session", s2.ID},
		{"taken off its session", ""},
		{"put back on a session", s1.ID},
	} {
		a.Session, a.Epoch = step.session, a.Epoch+1
		v = mustPut(t, sd, a, lease.Precondition{Version: v})
		wantKey(t, sd, step.name, a, v)
	}
	a.Released = true
	v = mustPut(t, sd, a, lease.Precondition{Version: v})
	wantKey(t, sd, "released, naming its session", a, v)

	b = attached(b.Key, "bob", 2, s2.ID, res)
	vb = mustPut(t, sd, b, lease.Precondition{Version: vb})
	wantKey(t, sd, "a per-key record attached by compare-and-swap", b, vb)
}

// testKeySessionPutMany: PutMany keeps each write's Session, new records
// and compare-and-swaps alike.
func testKeySessionPutMany(t *testing.T, sd lease.SessionDriver) {
	ns, res := freshNamespace(t), lease.DriverCapabilities(sd).ExpiryResolution
	bd := sd.(lease.BatchDriver)
	s1, s2 := newLiveSession(t, sd, "alice"), newLiveSession(t, sd, "bob")
	released := attached(ns+"released", "alice", 3, s1.ID, res)
	released.Released = true
	recs := []lease.Record{
		attached(ns+"s1", "alice", 1, s1.ID, res),
		attached(ns+"s2", "bob", 1, s2.ID, res),
		batchRecord(ns+"none", "carol", 1, false),
		released,
	}
	versions := putManyOK(t, bd, "new records", recs, nil)
	// Each key moves: s1 → "", s2 → s1, "" → s2, released → s2.
	recs[0].Session, recs[1].Session, recs[2].Session, recs[3].Session = "", s1.ID, s2.ID, s2.ID
	for i := range recs {
		recs[i].Epoch++
	}
	putManyOK(t, bd, "sessions changed by compare-and-swap", recs, versions)
}

// putManyOK writes recs in one PutMany (Absent when versions is nil, else
// on those versions), checks each by Get, and returns the new versions.
func putManyOK(t *testing.T, bd lease.BatchDriver, step string, recs []lease.Record, versions []uint64) []uint64 {
	t.Helper()
	ws := make([]lease.Write, len(recs))
	for i, rec := range recs {
		ws[i] = lease.Write{Rec: rec, Pre: lease.Precondition{Absent: true}}
		if versions != nil {
			ws[i].Pre = lease.Precondition{Version: versions[i]}
		}
	}
	results, err := bd.PutMany(ctxBG, ws)
	if err != nil || len(results) != len(ws) {
		t.Fatalf("%s: PutMany = %d results, %v; want %d, no error", step, len(results), err, len(ws))
	}
	out := make([]uint64, len(results))
	for i, r := range results {
		if r.Err != nil {
			t.Fatalf("%s: PutMany write %d (%+v) = %v", step, i, ws[i], r.Err)
		}
		out[i] = r.Version
		wantKey(t, bd, step+" by PutMany", recs[i], r.Version)
	}
	return out
}

// testKeySessionGetMany: GetMany answers each record's Session as Get does.
func testKeySessionGetMany(t *testing.T, sd lease.SessionDriver) {
	ns, res := freshNamespace(t), lease.DriverCapabilities(sd).ExpiryResolution
	s1 := newLiveSession(t, sd, "alice")
	recs := []lease.Record{attached(ns+"s1", "alice", 1, s1.ID, res), batchRecord(ns+"none", "bob", 1, false)}
	versions := make([]uint64, len(recs))
	for i, rec := range recs {
		versions[i] = mustPut(t, sd, rec, lease.Precondition{Absent: true})
	}
	recs[0].Session, recs[1].Session = "", s1.ID
	for i, rec := range recs {
		versions[i] = mustPut(t, sd, rec, lease.Precondition{Version: versions[i]})
	}
	results, err := sd.(lease.BatchReader).GetMany(ctxBG, []string{recs[0].Key, recs[1].Key})
	if err != nil || len(results) != len(recs) {
		t.Fatalf("GetMany = %d results, %v; want %d", len(results), err, len(recs))
	}
	for i, r := range results {
		if r.Err != nil || r.Version != versions[i] || !sameRecord(r.Rec, recs[i]) {
			t.Errorf("GetMany answer %d = %+v; want %+v v%d (Session %q)", i, r, recs[i], versions[i], recs[i].Session)
		}
	}
}

// testKeySessionList: List yields each record's Session as Get does.
func testKeySessionList(t *testing.T, sd lease.SessionDriver) {
	ns, res := freshNamespace(t), lease.DriverCapabilities(sd).ExpiryResolution
	s1 := newLiveSession(t, sd, "alice")
	released := attached(ns+"b-released", "alice", 2, s1.ID, res)
	released.Released = true
	want := []lease.Record{attached(ns+"a", "alice", 1, s1.ID, res), released, batchRecord(ns+"c", "bob", 1, false)}
	for _, rec := range want {
		mustPut(t, sd, rec, lease.Precondition{Absent: true})
	}
	got, err := sd.(lease.ListDriver).List(ctxBG, ns, "", 10)
	if err != nil || len(got) != len(want) {
		t.Fatalf("List(%q) = %+v, %v; want %d records", ns, got, err, len(want))
	}
	for i := range want {
		if !sameRecord(got[i], want[i]) {
			t.Errorf("List record %d = %+v; want %+v (Session %q)", i, got[i], want[i], want[i].Session)
		}
	}
}

// testListNoSessions: session records kept beside key records (reserved
// keys in the same table, say) never show up as keys in List, where
// Holders would yield them. A reserved prefix outside R1's alphabet sorts
// before or after every key; List is asked at both ends.
func testListNoSessions(t *testing.T, sd lease.SessionDriver) {
	newLiveSession(t, sd, "alice")
	ld := sd.(lease.ListDriver)
	for _, after := range []string{"", strings.Repeat("z", 256)} {
		recs, err := ld.List(ctxBG, "", after, 5)
		if err != nil {
			t.Fatalf("List(\"\", after %.8q…, 5) = %v", after, err)
		}
		for _, rec := range recs {
			if err := lease.ValidateKey(rec.Key); err != nil {
				t.Errorf("List yields %+v, which is no key (%v): is it a session record?", rec, err)
			}
		}
	}
}

// sessionOwners are owners a session record must keep byte for byte:
// R1's longest, and the printable characters SQL and JSON quote.
var sessionOwners = []string{
	"alice",
	"host-1.example.com-4242-0123abcd",
	`q'u"o\t%e_d;--*/{}[]$`,
	strings.Repeat("o", 256),
}

// testSessionRoundTrip: every state, owner and expiry comes back as
// written, and so does a record changed by compare-and-swap.
func testSessionRoundTrip(t *testing.T, sd lease.SessionDriver) {
	exp := sessionExpiry(sd)
	for i, owner := range sessionOwners {
		for _, state := range []lease.SessionState{lease.SessionLive, lease.SessionEndedClean, lease.SessionEndedUnclean} {
			rec := lease.SessionRecord{ID: newSessionID(t), Owner: owner, ExpiresAt: exp.Add(time.Duration(i) * time.Second), State: state}
			v := mustPutSession(t, sd, rec, lease.Precondition{Absent: true})
			wantSession(t, sd, rec.ID, &rec, v)
		}
	}
	// A session as a store moves it: renewed, then ended (R19, R21, R22).
	rec := newLiveSession(t, sd, "alice")
	_, v, err := sd.GetSession(ctxBG, rec.ID)
	if err != nil {
		t.Fatalf("GetSession(%s) = %v", rec.ID, err)
	}
	for _, step := range []struct {
		state lease.SessionState
		by    time.Duration
	}{{lease.SessionLive, TTL}, {lease.SessionEndedUnclean, 0}, {lease.SessionEndedClean, 0}} {
		rec.State, rec.ExpiresAt = step.state, rec.ExpiresAt.Add(step.by)
		v = mustPutSession(t, sd, rec, lease.Precondition{Version: v})
		wantSession(t, sd, rec.ID, &rec, v)
	}
}

// testSessionNotFound: an id no record has is ErrNotFound, never a zero record.
func testSessionNotFound(t *testing.T, sd lease.SessionDriver) {
	wantSession(t, sd, newSessionID(t), nil, 0)
}

// testSessionCAS checks PutSession's preconditions as Put's: Absent only
// creates (never an upsert, R18: a session id is never reused), Version
// only updates that version, and versions strictly increase.
func testSessionCAS(t *testing.T, sd lease.SessionDriver) {
	rec := lease.SessionRecord{ID: newSessionID(t), Owner: "alice", ExpiresAt: sessionExpiry(sd), State: lease.SessionLive}
	if _, err := sd.PutSession(ctxBG, rec, lease.Precondition{Version: 1}); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("PutSession with a Version of a missing id = %v; want ErrConflict", err)
	}
	wantSession(t, sd, rec.ID, nil, 0)
	v := mustPutSession(t, sd, rec, lease.Precondition{Absent: true})
	if v == 0 {
		t.Fatalf("PutSession Absent = version 0; want a version a compare-and-swap can name")
	}
	other := lease.SessionRecord{ID: rec.ID, Owner: "bob", ExpiresAt: rec.ExpiresAt.Add(TTL), State: lease.SessionLive}
	refused := func(step string, pre lease.Precondition) {
		t.Helper()
		if got, err := sd.PutSession(ctxBG, other, pre); !errors.Is(err, lease.ErrConflict) {
			t.Fatalf("%s: PutSession(%+v) = v%d, %v; want ErrConflict", step, pre, got, err)
		}
		wantSession(t, sd, rec.ID, &rec, v)
	}
	refused("Absent over a live session (an upsert)", lease.Precondition{Absent: true})
	for i, state := range []lease.SessionState{lease.SessionLive, lease.SessionEndedUnclean, lease.SessionEndedClean} {
		prev := v
		rec.State, rec.ExpiresAt = state, rec.ExpiresAt.Add(time.Second)
		v = mustPutSession(t, sd, rec, lease.Precondition{Version: prev})
		if v <= prev {
			t.Fatalf("write %d: PutSession on v%d = v%d; want a larger version", i, prev, v)
		}
		wantSession(t, sd, rec.ID, &rec, v)
		refused("a stale version", lease.Precondition{Version: prev})
		refused("a version never issued", lease.Precondition{Version: v + 1})
	}
	refused("Absent over an ended session (a revival)", lease.Precondition{Absent: true})
}

// sessionRacers is how many goroutines race one PutSession.
const sessionRacers = 8

// testSessionRace: goroutines race PutSessions on one precondition, as a
// taker's kill races a holder's renewal (R21): exactly one lands, and the
// stored record is the winner's, at the version it was told.
func testSessionRace(t *testing.T, sd lease.SessionDriver) {
	for round := range 10 {
		id := newSessionID(t)
		won := raceSessions(t, sd, id, lease.Precondition{Absent: true}, fmt.Sprintf("round %d, creating", round))
		raceSessions(t, sd, id, lease.Precondition{Version: won}, fmt.Sprintf("round %d, on v%d", round, won))
	}
}

// raceSessions runs sessionRacers PutSessions of id on pre at once, checks
// that exactly one won, and returns its version.
func raceSessions(t *testing.T, sd lease.SessionDriver, id string, pre lease.Precondition, step string) uint64 {
	t.Helper()
	type answer struct {
		rec lease.SessionRecord
		v   uint64
		err error
	}
	answers := make([]answer, sessionRacers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range answers {
		answers[i].rec = lease.SessionRecord{ID: id, Owner: fmt.Sprintf("racer-%d", i), ExpiresAt: sessionExpiry(sd), State: lease.SessionState(1 + i%3)}
		wg.Go(func() {
			<-start
			answers[i].v, answers[i].err = sd.PutSession(ctxBG, answers[i].rec, pre)
		})
	}
	close(start)
	wg.Wait()
	var winners []answer
	for i, a := range answers {
		switch {
		case a.err == nil:
			winners = append(winners, a)
		case !errors.Is(a.err, lease.ErrConflict):
			t.Fatalf("%s: racer %d's PutSession(%+v) = %v; want success or ErrConflict", step, i, pre, a.err)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%s: %d of %d racing PutSessions won; want exactly one", step, len(winners), sessionRacers)
	}
	w := winners[0]
	if !pre.Absent && w.v <= pre.Version {
		t.Fatalf("%s: the winner got v%d; want a version above %d", step, w.v, pre.Version)
	}
	wantSession(t, sd, id, &w.rec, w.v)
	return w.v
}

// removalHorizon: the RemoveSessions check's sessions expire before it,
// and only they do: no store's clock, real or fake, reads 1999. The check
// may so count what RemoveSessions removes below it, even in a database
// other tests share.
var removalHorizon = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// removals serializes the RemoveSessions checks of this process, which
// share the sessions before removalHorizon when they share a database.
var removals sync.Mutex

// testRemoveSessions checks RemoveSessions (R22's one exception to R3):
// it removes sessions that expired before `before` and that no key record
// names, whatever their state, at most limit of them, and says how many;
// it keeps a session a key names (released or not), one expiring at or
// after `before`, and every version it does not remove.
func testRemoveSessions(t *testing.T, sd lease.SessionDriver) {
	removals.Lock()
	defer removals.Unlock()
	sweepBeforeHorizon(t, sd)
	ns, res := freshNamespace(t), lease.DriverCapabilities(sd).ExpiryResolution
	before := time.Date(1990, 1, 1, 1, 0, 0, 0, time.UTC)
	step := max(res, time.Nanosecond)
	session := func(state lease.SessionState, expires time.Time) lease.SessionRecord {
		rec := lease.SessionRecord{ID: newSessionID(t), Owner: "alice", ExpiresAt: expires, State: state}
		mustPutSession(t, sd, rec, lease.Precondition{Absent: true})
		return rec
	}
	long := before.Add(-time.Hour)
	moved := session(lease.SessionLive, long) // a key named it, then another session
	removable := []lease.SessionRecord{
		session(lease.SessionLive, long),
		session(lease.SessionEndedClean, before.Add(-30*time.Minute)),
		session(lease.SessionEndedUnclean, before.Add(-step)),
		moved,
	}
	named, namedReleased := session(lease.SessionLive, long), session(lease.SessionEndedClean, long)
	unexpired, atBefore := session(lease.SessionLive, before.Add(time.Hour)), session(lease.SessionLive, before)
	kept := []lease.SessionRecord{named, namedReleased, unexpired, atBefore}

	mustPut(t, sd, attached(ns+"named", "alice", 1, named.ID, res), lease.Precondition{Absent: true})
	gone := attached(ns+"released", "alice", 1, namedReleased.ID, res)
	gone.Released = true
	mustPut(t, sd, gone, lease.Precondition{Absent: true})
	mover := attached(ns+"mover", "alice", 1, moved.ID, res)
	v := mustPut(t, sd, mover, lease.Precondition{Absent: true})
	mover.Session = named.ID
	mustPut(t, sd, mover, lease.Precondition{Version: v})

	// remove calls RemoveSessions, wants n removed, and then gone
	// removable sessions in all and every kept one still there.
	remove := func(before time.Time, limit, n, gone int) {
		t.Helper()
		got, err := sd.RemoveSessions(ctxBG, before, limit)
		if err != nil || got != n {
			t.Fatalf("RemoveSessions(%v, limit %d) = %d, %v; want %d removed", before, limit, got, err, n)
		}
		wantRemoved(t, sd, fmt.Sprintf("RemoveSessions(limit %d)", limit), removable, gone)
		wantRemoved(t, sd, fmt.Sprintf("RemoveSessions(limit %d)", limit), kept, 0)
	}
	remove(before, 0, 0, 0)
	remove(before, 3, 3, 3)
	remove(before, 100, 1, len(removable))
	remove(before, 100, 0, len(removable))

	// Once `before` passes them, the unnamed ones go; the named ones stay.
	later := before.Add(2 * time.Hour)
	if n, err := sd.RemoveSessions(ctxBG, later, 100); err != nil || n != 2 {
		t.Fatalf("RemoveSessions(%v, limit 100) = %d, %v; want 2 removed (expiring at and after %v)", later, n, err, before)
	}
	wantRemoved(t, sd, "RemoveSessions past every expiry", []lease.SessionRecord{unexpired, atBefore}, 2)
	wantRemoved(t, sd, "RemoveSessions past every expiry", []lease.SessionRecord{named, namedReleased}, 0)
}

// sweepBeforeHorizon removes the unnamed sessions an earlier, interrupted
// run of testRemoveSessions may have left before removalHorizon.
func sweepBeforeHorizon(t *testing.T, sd lease.SessionDriver) {
	t.Helper()
	for range 100 {
		n, err := sd.RemoveSessions(ctxBG, removalHorizon, 1000)
		if err != nil {
			t.Fatalf("RemoveSessions(%v, 1000) = %v", removalHorizon, err)
		}
		if n == 0 {
			return
		}
	}
}

// wantRemoved checks that exactly n of recs are gone (ErrNotFound) and
// that the others read as written.
func wantRemoved(t *testing.T, sd lease.SessionDriver, step string, recs []lease.SessionRecord, n int) {
	t.Helper()
	var removed []string
	for _, rec := range recs {
		got, _, err := sd.GetSession(ctxBG, rec.ID)
		switch {
		case errors.Is(err, lease.ErrNotFound):
			removed = append(removed, rec.ID)
		case err != nil || !sameSession(got, rec):
			t.Errorf("%s: GetSession(%s) = %+v, %v; want %+v or ErrNotFound", step, rec.ID, got, err, rec)
		}
	}
	if len(removed) != n {
		t.Errorf("%s: %d of %d sessions read ErrNotFound (%v); want %d", step, len(removed), len(recs), removed, n)
	}
}
