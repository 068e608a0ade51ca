package postgres

import (
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/pgserver"
	"github.com/leasekit/lease/internal/testkit"
	"github.com/leasekit/lease/leasetest"
)

// TestContract runs the conformance suite (package leasetest) on this
// driver: TestDriver over one driver on the shared server's pool, again
// over a pool that sends every statement in the simple query protocol (as
// PgBouncer in transaction mode needs), and TestStore over stores that each
// have a driver of their own on one table, as separate processes do.
func TestContract(t *testing.T) {
	t.Run("driver", func(t *testing.T) { leasetest.TestDriver(t, openTestPostgres) })
	t.Run("simple-protocol", func(t *testing.T) { leasetest.TestDriver(t, openSimpleProtocol) })
	t.Run("drivers", func(t *testing.T) { leasetest.TestStore(t, openPostgresStore) })
	t.Run("R11 capabilities", func(t *testing.T) { testkit.WantCapabilities(t, openTestPostgres(t)) })
}

// openTestPostgres opens a driver on a fresh table of the shared pool.
func openTestPostgres(t *testing.T) lease.Driver { return newTestPostgresDriver(t) }

// openSimpleProtocol opens a driver on a fresh table, on a pool of its own
// that uses the simple query protocol.
func openSimpleProtocol(t *testing.T) lease.Driver {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(t))
	if err != nil {
		t.Fatalf("%s: %v", pgserver.EnvURL, err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return newDriverOn(t, db, pgserver.FreshTable(t))
}

// openPostgresStore opens a store with a driver of its own on the test's
// one table of the shared server.
func openPostgresStore(t *testing.T, clock func() time.Time, owner string) lease.Store {
	t.Helper()
	table := leasetest.Shared(t, func() string { return pgserver.FreshTable(t) })
	d := newDriverOn(t, pgserver.SharedDB(t), table)
	s, err := lease.NewDocumentStore(d, lease.WithOwner(owner), lease.WithClock(clock), lease.WithTTL(leasetest.TTL))
	if err != nil {
		t.Fatalf("NewDocumentStore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newDriverOn makes a driver on table of db; it closes when the test ends
// (db stays open).
func newDriverOn(t testing.TB, db *sql.DB, table string) lease.Driver {
	t.Helper()
	d, err := NewDriver(t.Context(), db, Table(table))
	if err != nil {
		t.Fatalf("NewDriver: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
