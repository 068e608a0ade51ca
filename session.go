package lease

import (
	"context"
	"fmt"
	"time"
)

// SessionRecord is what a backend keeps for a session (R18): the store
// instance that made it, its expiry and its state. Renewing the session
// renews every key record attached to it (R20).
type SessionRecord struct {
	ID        string // 32 lowercase hex digits (128 random bits), never reused
	Owner     string // the owner of the store that made it
	ExpiresAt time.Time
	State     SessionState
}

// SessionState is a session's state (R18). The zero value is not a state:
// a record that holds it is corrupt (R10).
type SessionState uint8

// The states of a session.
const (
	// SessionLive: the session keeps its keys while now < ExpiresAt.
	SessionLive SessionState = 1 + iota
	// SessionEndedClean: its store ended it (ReleaseAll, R22); its keys
	// are free, and go to their next holders with PreviousUnclean false.
	SessionEndedClean
	// SessionEndedUnclean: a taker ended it after it expired (R21); its
	// keys go to their next holders with PreviousUnclean true.
	SessionEndedUnclean
)

func (st SessionState) String() string {
	switch st {
	case SessionLive:
		return "live"
	case SessionEndedClean:
		return "ended-clean"
	case SessionEndedUnclean:
		return "ended-unclean"
	}
	return fmt.Sprintf("SessionState(%d)", uint8(st))
}

// Valid reports whether st is one of the three states.
func (st SessionState) Valid() bool { return st >= SessionLive && st <= SessionEndedUnclean }

// SessionKeyExpiry is the ExpiresAt a store writes into a key record
// attached to a session: far in the future, so that a reader that ignores
// sessions (an older release, a query of its own) sees the key held,
// never free. The key's real expiry is its session's (R20).
var SessionKeyExpiry = time.Date(9999, time.December, 31, 0, 0, 0, 0, time.UTC)

// SessionDriver is a Driver that keeps session records beside its key
// records (R18–R24). A driver that states Capabilities.Sessions
// implements it, and keeps each key record's Session exactly.
//
// Session records follow the rules of key records: PutSession writes
// atomically if pre holds and returns a version larger than every
// earlier one of that session (a session is created only with
// Precondition.Absent, R18), fails with ErrConflict when pre does not
// hold, and returns only once the write is durable; any other error
// leaves the outcome unknown (R9). GetSession returns ErrNotFound when no
// record has the id, and ErrCorrupt for a record that cannot be parsed
// (R10). Package leasetest checks all of this.
type SessionDriver interface {
	Driver
	GetSession(ctx context.Context, id string) (rec SessionRecord, version uint64, err error)
	PutSession(ctx context.Context, rec SessionRecord, pre Precondition) (version uint64, err error)
	// RemoveSessions deletes at most limit session records whose
	// ExpiresAt is before before and which no key record names, and
	// returns how many it deleted (R22: the one exception to R3).
	RemoveSessions(ctx context.Context, before time.Time, limit int) (removed int, err error)
}

// ValidateSessionID reports whether id is a session id this library
// writes: 32 lowercase hex digits. The error matches ErrCorrupt, as a
// record naming another id is corrupt (R10).
func ValidateSessionID(id string) error {
	if len(id) != sessionIDLen {
		return corrupt("session id %q: %d bytes, want %d lowercase hex digits", id, len(id), sessionIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return corrupt("session id %q: byte %#x at %d is not a lowercase hex digit", id, c, i)
		}
	}
	return nil
}

// sessionIDLen is the length of a session id: 128 bits in hex (R18).
const sessionIDLen = 32

// CheckSessionRecord refuses a session record that no store could have
// written (R10): a bad id, owner or state. Drivers and the store use it.
func CheckSessionRecord(rec SessionRecord) error {
	if err := ValidateSessionID(rec.ID); err != nil {
		return err
	}
	if validateOwner(rec.Owner) != nil {
		return corrupt("session %s: owner %q", rec.ID, rec.Owner)
	}
	if !rec.State.Valid() {
		return corrupt("session %s: state %d", rec.ID, uint8(rec.State))
	}
	return nil
}
