//go:build unix

package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/pgserver"
)

// attachKey writes key's row for owner "holder" at epoch 1, attached to
// session (R20: its own expiry is SessionKeyExpiry), and returns its grant.
func attachKey(t *testing.T, d *postgresDriver, key, session string, released bool) lease.Grant {
	t.Helper()
	rec := lease.Record{Key: key, Owner: "holder", Epoch: 1, ExpiresAt: lease.SessionKeyExpiry, Session: session, Released: released}
	if _, err := d.Put(ctxBG, rec, lease.Precondition{Absent: true}); err != nil {
		t.Fatal(err)
	}
	return lease.Grant{Key: key, Owner: "holder", Epoch: 1, ExpiresAt: lease.SessionKeyExpiry}
}

// TestFenceSession_R20: a grant attached to a session is live for Fence
// only while its session is: live and unexpired by the server's clock. A
// fenced write of a live one commits; one whose session ended (clean or
// unclean), expired, or has no record fails with ErrLost saying which,
// and its transaction commits nothing; a released key is released
// whatever its session. The session's expiry counts, not the key row's
// far-future one.
func TestFenceSession_R20(t *testing.T) {
	for _, api := range fenceAPIs {
		t.Run(api.name, func(t *testing.T) {
			r := newFenceRig(t)
			now := serverNow(t)
			live, clean, unclean, expired, missing := sid(1), sid(2), sid(3), sid(4), sid(5)
			putSession(t, r.d, live, now.Add(time.Hour), lease.SessionLive)
			putSession(t, r.d, clean, now.Add(time.Hour), lease.SessionEndedClean)
			putSession(t, r.d, unclean, now.Add(time.Hour), lease.SessionEndedUnclean)
			putSession(t, r.d, expired, now.Add(-time.Second), lease.SessionLive)
			table := Table(r.d.table)

			g := attachKey(t, r.d, "live", live, false)
			tx := api.begin(t)
			if err := tx.fence(g, table); err != nil {
				t.Fatalf("Fence of a grant of a live session = %v", err)
			}
			r.write(t, tx, g, "live")
			if err := tx.commit(); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct{ key, session, why string }{
				{"clean", clean, "its session " + clean + " ended (ended-clean)"},
				{"unclean", unclean, "its session " + unclean + " ended (ended-unclean)"},
				{"expired", expired, "its session " + expired + " expired at "},
				{"missing", missing, "its session " + missing + " has no record"},
			} {
				g := attachKey(t, r.d, c.key, c.session, false)
				tx := api.begin(t)
				r.write(t, tx, g, c.key)
				wantFenceLost(t, tx.fence(g, table), g, c.why)
				tx.rollback()
			}
			released := attachKey(t, r.d, "released", live, true)
			tx = api.begin(t)
			wantFenceLost(t, tx.fence(released, table), released, "released")
			tx.rollback()
			for _, note := range []string{"live", "clean", "unclean", "expired", "missing"} {
				if n, want := r.count(t, note), map[bool]int{true: 1}[note == "live"]; n != want {
					t.Errorf("%d %s writes committed; want %d", n, note, want)
				}
			}
		})
	}
}

// TestFenceSessionStaysRenewable_R20_R21: while a fenced transaction of a
// session-attached grant is open, the session's row is not locked: its
// renewal, and a taker's kill of it (R21), complete at once; the taker's
// write of the key waits for the transaction (the server shows it blocked
// by the fenced backend) and lands after the commit, behind the fenced
// write; the old grant then fences as lost.
func TestFenceSessionStaysRenewable_R20_R21(t *testing.T) {
	for _, api := range fenceAPIs {
		t.Run(api.name, func(t *testing.T) {
			r := newFenceRig(t)
			id := sid(1)
			now := serverNow(t)
			putSession(t, r.d, id, now.Add(time.Hour), lease.SessionLive)
			g := attachKey(t, r.d, "profile/9", id, false)
			tx := api.begin(t)
			if err := tx.fence(g, Table(r.d.table)); err != nil {
				t.Fatalf("Fence = %v", err)
			}
			r.write(t, tx, g, "fenced")

			// A guard against a hang, not a wait: a blocked write fails the test.
			guard, cancel := context.WithTimeout(ctxBG, time.Minute)
			defer cancel()
			rec := lease.SessionRecord{ID: id, Owner: "holder", ExpiresAt: now.Add(2 * time.Hour), State: lease.SessionLive}
			v, err := r.d.PutSession(guard, rec, lease.Precondition{Version: 1})
			if err != nil {
				t.Fatalf("renewing the session while fenced = %v; want it not to wait", err)
			}
			rec.State = lease.SessionEndedUnclean
			if _, err := r.d.PutSession(guard, rec, lease.Precondition{Version: v}); err != nil {
				t.Fatalf("a taker's kill of the session while fenced = %v; want it not to wait", err)
			}

			done := make(chan takeover, 1)
			go func() {
				taken := lease.Record{Key: g.Key, Owner: "taker", Epoch: 2, ExpiresAt: now.Add(time.Hour)}
				_, err := r.d.Put(ctxBG, taken, lease.Precondition{Version: 1})
				done <- takeover{lease.Grant{Key: g.Key, Owner: "taker", Epoch: 2}, err}
			}()
			waitBlockedBy(t, tx.pid, done)
			if err := tx.commit(); err != nil {
				t.Fatal(err)
			}
			if got := <-done; got.err != nil {
				t.Fatalf("the taker's key write after the commit = %v", got.err)
			}
			if n := r.count(t, "fenced"); n != 1 {
				t.Fatalf("%d fenced writes; want 1", n)
			}
			late := api.begin(t)
			defer late.rollback()
			wantFenceLost(t, late.fence(g, Table(r.d.table)), g, `names "taker" at epoch 2`)
		})
	}
}

// TestFenceSessionCorrupt_R10: a key row whose session is not an id, or
// whose session row cannot be parsed, makes Fence fail with a
// *lease.StorageError matching ErrCorrupt, not ErrLost: nothing is known.
func TestFenceSessionCorrupt_R10(t *testing.T) {
	r := newFenceRig(t)
	db := pgserver.SharedDB(t)
	dropChecks(t, r.d.table, "session")
	dropChecks(t, r.d.sessions, "state")
	pgExec(t, `INSERT INTO `+r.d.sessions+` VALUES ('`+sid(1)+`', 'holder', now() + interval '1 hour', 0, 1)`,
		`INSERT INTO `+r.d.sessions+` VALUES ('`+sid(2)+`', 'holder', now() + interval '1 hour', NULL, 1)`)
	for _, c := range []struct{ key, session string }{
		{"bad-id", `'xyz'`}, {"null-id", `NULL`}, {"state-0", pgQuote(sid(1))}, {"null-state", pgQuote(sid(2))},
	} {
		if _, err := db.Exec(`INSERT INTO ` + r.d.table + ` VALUES ('` + c.key + `', 'holder', 1, '9999-12-31', false, 1, ` + c.session + `)`); err != nil {
			t.Fatal(err)
		}
		g := lease.Grant{Key: c.key, Owner: "holder", Epoch: 1}
		for _, api := range fenceAPIs {
			tx := api.begin(t)
			err := tx.fence(g, Table(r.d.table))
			tx.rollback()
			if !errors.Is(err, lease.ErrCorrupt) || !errors.Is(err, lease.ErrStorage) || errors.Is(err, lease.ErrLost) ||
				strings.Contains(err.Error(), "\n") || strings.Count(err.Error(), `"`+c.key+`"`) > 2 {
				t.Errorf("%s: Fence (%s) = %v; want a one-line *StorageError matching ErrCorrupt", c.key, api.name, err)
			}
		}
	}
}
