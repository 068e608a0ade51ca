package lease_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/mongoserver"
	"github.com/leasekit/lease/internal/pgserver"
	"github.com/leasekit/lease/mongodb"
	"github.com/leasekit/lease/postgres"
	"github.com/leasekit/lease/sqlite"
)

// drivers is the one table of the document drivers this module ships, as
// the tests open them: TestContract runs the conformance suite on each,
// and the package's own tests (forEachDriver) get them through
// lease.RegisterTestDriver. open is called once per test; several stores
// share the driver it returns, which closes when the test ends.
var drivers = []lease.DriverUnderTest{
	{Name: "memory", Open: func(t *testing.T) lease.Driver { return lease.NewMemoryDriver() }},
	{Name: "sqlite", Open: openSQLite},
	{Name: "mongodb", Open: openMongo},
	{Name: "postgres", Open: openPostgres},
	// The same driver on a pool that sends every statement in the simple
	// query protocol, as PgBouncer in transaction mode needs.
	{Name: "postgres-simple-protocol", Open: openPostgresSimple},
}

func init() {
	for _, d := range drivers {
		lease.RegisterTestDriver(d)
	}
	lease.OpenSQLiteForTest = sqlite.Open
}

// TestMain stops every PostgreSQL server the tests started, whatever the
// result.
func TestMain(m *testing.M) {
	code := m.Run()
	pgserver.Cleanup()
	os.Exit(code)
}

// openSQLite opens a fresh database file in the test's temp dir.
func openSQLite(t *testing.T) lease.Driver {
	t.Helper()
	d, err := sqlite.Open(filepath.Join(t.TempDir(), "leases.db"))
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// openMongo opens a driver on a fresh collection of the test server,
// through the serialising proxy on FerretDB (see package mongoserver).
func openMongo(t *testing.T) lease.Driver {
	t.Helper()
	return newMongoDriver(t, mongoserver.Collection(t, mongoserver.SharedClient(t)))
}

// newMongoDriver makes a driver on coll, allowing FerretDB behind its
// serialising proxy; it closes when the test ends.
func newMongoDriver(t testing.TB, coll *mongo.Collection) lease.Driver {
	t.Helper()
	var opts []mongodb.Option
	if mongoserver.Shared(t).Ferret {
		opts = append(opts, mongodb.AllowUnsafeServer())
	}
	d, err := mongodb.NewDriver(coll, opts...)
	if err != nil {
		t.Fatalf("mongodb.NewDriver: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// openPostgres opens a driver on a fresh table of the shared server's pool.
func openPostgres(t *testing.T) lease.Driver {
	t.Helper()
	return newPostgresDriver(t, pgserver.SharedDB(t))
}

// openPostgresSimple opens a driver on a pool of its own that uses the
// simple query protocol.
func openPostgresSimple(t *testing.T) lease.Driver {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(t))
	if err != nil {
		t.Fatalf("%s: %v", pgserver.EnvURL, err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return newPostgresDriver(t, db)
}

// newPostgresDriver makes a driver on a fresh table of db; it closes when
// the test ends (db stays open).
func newPostgresDriver(t testing.TB, db *sql.DB) lease.Driver {
	t.Helper()
	d, err := postgres.NewDriver(t.Context(), db, postgres.Table(pgserver.FreshTable(t)))
	if err != nil {
		t.Fatalf("postgres.NewDriver: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
