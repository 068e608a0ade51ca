//go:build unix

package postgres

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/pgserver"
)

// TestPostgresRenewalIsOneRoundTrip: through the pool Open makes, a
// session's renewal is its one statement, also on a connection idle for
// longer than a second, which pgx pings before reusing it for any other
// call. Time is the bubble's: the pool's connection is idle for a renewal
// period at the default TTL without the test waiting for it.
func TestPostgresRenewalIsOneRoundTrip(t *testing.T) {
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	table := pgserver.FreshTable(t)
	synctest.Test(t, func(t *testing.T) {
		sent := countRequests(cfg)
		db := openPool(cfg, 1) // one connection: every call reuses it
		defer db.Close()
		d, err := newPostgresDriver(ctxBG, db, config{table: table})
		if err != nil {
			t.Fatal(err)
		}
		id := sid(1)
		rec := lease.SessionRecord{ID: id, Owner: "holder", ExpiresAt: time.Now().Add(lease.DefaultTTL), State: lease.SessionLive}
		version, err := d.PutSession(ctxBG, rec, lease.Precondition{Absent: true})
		if err != nil {
			t.Fatal(err)
		}
		// One call of each kind first, so that its statement is prepared
		// on the connection: the calls counted below are the steady ones.
		write := func(st lease.SessionState) {
			t.Helper()
			rec.State, rec.ExpiresAt = st, time.Now().Add(lease.DefaultTTL)
			if version, err = d.PutSession(ctxBG, rec, lease.Precondition{Version: version}); err != nil {
				t.Fatalf("PutSession(%v) at version %d: %v", st, version, err)
			}
		}
		get := func() {
			t.Helper()
			if _, _, err := d.Get(ctxBG, "k"); !errors.Is(err, lease.ErrNotFound) {
				t.Fatalf("Get = %v; want ErrNotFound", err)
			}
		}
		write(lease.SessionLive)
		get()
		trips := func(call func()) int {
			time.Sleep(lease.DefaultTTL / 3) // the connection idles for a renewal period
			before := sent()
			call()
			return sent() - before
		}
		if n := trips(func() { write(lease.SessionLive) }); n != 1 {
			t.Errorf("a renewal on a connection idle for %v took %d round trips; want 1, no ping first", lease.DefaultTTL/3, n)
		}
		if n := trips(get); n != 2 {
			t.Errorf("a read on a connection idle for %v took %d round trips; want 2, a ping and the read", lease.DefaultTTL/3, n)
		}
		if n := trips(func() { write(lease.SessionEndedClean) }); n != 2 {
			t.Errorf("a session's end on a connection idle for %v took %d round trips; want 2, a ping and the write", lease.DefaultTTL/3, n)
		}
	})
}

// TestPostgresRenewalOnADroppedConnection: what a renewal risks without
// the ping. The server drops the pool's idle connection (as a restart or
// a failover does); the next renewal, not pinged first, either lands on
// another connection or fails having written nothing, and a retry at the
// same version lands (R9).
func TestPostgresRenewalOnADroppedConnection(t *testing.T) {
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	table := pgserver.FreshTable(t)
	synctest.Test(t, func(t *testing.T) {
		db := openPool(cfg, 1)
		defer db.Close()
		admin := openPool(cfg, 1)
		defer admin.Close()
		d, err := newPostgresDriver(ctxBG, db, config{table: table})
		if err != nil {
			t.Fatal(err)
		}
		rec := lease.SessionRecord{ID: sid(1), Owner: "holder", ExpiresAt: time.Now().Add(lease.DefaultTTL), State: lease.SessionLive}
		version, err := d.PutSession(ctxBG, rec, lease.Precondition{Absent: true})
		if err != nil {
			t.Fatal(err)
		}
		var pid int
		if err := db.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		var gone bool
		if err := admin.QueryRow(`SELECT pg_terminate_backend($1, 60000)`, pid).Scan(&gone); err != nil || !gone {
			t.Fatalf("terminating the pool's connection: %v, %v", gone, err)
		}
		time.Sleep(lease.DefaultTTL / 3)
		rec.ExpiresAt = time.Now().Add(lease.DefaultTTL)
		next, err := d.PutSession(ctxBG, rec, lease.Precondition{Version: version})
		if err == nil {
			t.Logf("the renewal landed on a new connection")
		} else {
			t.Logf("the renewal failed: %v", err)
			if errors.Is(err, lease.ErrConflict) {
				t.Fatalf("renewal on a dropped connection: %v; want a storage error, not a conflict", err)
			}
			if _, v, gerr := d.GetSession(ctxBG, rec.ID); gerr != nil || v != version {
				t.Fatalf("after the failed renewal (%v): version %d, %v; want %d, nothing written", err, v, gerr, version)
			}
			if next, err = d.PutSession(ctxBG, rec, lease.Precondition{Version: version}); err != nil {
				t.Fatalf("the renewal retried at version %d: %v", version, err)
			}
		}
		if next != version+1 {
			t.Fatalf("renewed to version %d; want %d", next, version+1)
		}
	})
}
