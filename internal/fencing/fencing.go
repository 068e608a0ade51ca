// Package fencing holds what the SQL drivers' Fence functions share: the
// check of the grant they are given and the verdict on the record their
// statement found, so that both drivers say the same thing the same way.
package fencing

import (
	"errors"
	"fmt"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/rules"
)

// CheckGrant refuses, before any statement, a grant that no store returns:
// an invalid key or owner, or epoch 0.
func CheckGrant(g lease.Grant) error {
	if err := lease.ValidateKey(g.Key); err != nil {
		return err
	}
	if err := rules.CheckOwner(g.Owner); err != nil || g.Epoch == 0 {
		return fmt.Errorf("lease: fence %q epoch %d: not a grant of a store (owner %q)", g.Key, g.Epoch, g.Owner)
	}
	return nil
}

// Verdict judges the key's record as the fencing statement found it (found
// false: the key has no record): nil when it still names g's owner and
// epoch, unreleased, and now, read from the clock that judges expiry
// (clock names it: "this host's clock", "the server's clock"), is before
// its expiry (R6's test), else an error matching lease.ErrLost that says
// which of these failed. A session-attached record's expiry is its
// session's, which SessionVerdict judges (R20).
func Verdict(g lease.Grant, rec lease.Record, found bool, now time.Time, clock string) error {
	var why string
	switch {
	case !found:
		why = "the key has no record"
	case rec.Owner != g.Owner || rec.Epoch != g.Epoch:
		why = fmt.Sprintf("the record names %q at epoch %d", rec.Owner, rec.Epoch)
	case rec.Released:
		why = "the grant was released"
	case rec.Session == "" && !now.Before(rec.ExpiresAt):
		why = fmt.Sprintf("the grant expired at %s (now %s by %s)",
			rec.ExpiresAt.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano), clock)
	default:
		return nil
	}
	return lost(g, why)
}

// SessionVerdict judges, once Verdict passed a session-attached record,
// the session it names (id) as the fencing statement found it (found
// false: the session has no record): nil while it is live and now is
// before its expiry (R20), else an error matching lease.ErrLost that says
// which of these failed.
func SessionVerdict(g lease.Grant, id string, sess lease.SessionRecord, found bool, now time.Time, clock string) error {
	var why string
	switch {
	case !found:
		why = fmt.Sprintf("its session %s has no record", id)
	case sess.State != lease.SessionLive:
		why = fmt.Sprintf("its session %s ended (%s)", id, sess.State)
	case !now.Before(sess.ExpiresAt):
		why = fmt.Sprintf("its session %s expired at %s (now %s by %s)", id,
			sess.ExpiresAt.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano), clock)
	default:
		return nil
	}
	return lost(g, why)
}

func lost(g lease.Grant, why string) error {
	return fmt.Errorf("%w: %q epoch %d: %s", lease.ErrLost, g.Key, g.Epoch, why)
}

// Failed wraps a failure of the fencing statement (the database's error,
// or a record it could not read) as a *lease.StorageError; the context's
// end stays visible to errors.Is.
func Failed(key, where string, err error) error {
	return &lease.StorageError{Op: "fence", Key: key, Err: fmt.Errorf("%s: %w", where, err)}
}

// ErrNotTx is the error for a nil transaction.
var ErrNotTx = errors.New("lease: fence given a nil transaction")
