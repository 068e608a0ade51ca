package postgres

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/pgproxy"
	"github.com/leasekit/lease/internal/pgserver"
	"github.com/leasekit/lease/leasetest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// TestServerClockSkew_R8 runs leasetest's clock-skew suite on PostgreSQL:
// stores whose hosts' clocks are ten minutes off judge by the server's
// clock alone; the holder is cut off from the server by a partition of
// its own proxy.
func TestServerClockSkew_R8(t *testing.T) {
	leasetest.TestServerClockSkew(t, leasetest.SkewRig{
		Pair: func(t *testing.T) (lease.Driver, lease.Driver, func()) {
			table := pgserver.FreshTable(t)
			proxy := pgproxy.New(t, sharedAddr(t))
			d, err := NewDriver(ctxBG, pgserver.SharedDB(t), Table(table))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			return driverVia(t, proxy, table), d, proxy.Partition
		},
		ServerNow: serverNow,
	})
}

// serverNow reads the server's clock.
func serverNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	if err := pgserver.SharedDB(t).QueryRowContext(ctxBG, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// sharedAddr is the shared server's "host:port".
func sharedAddr(t *testing.T) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// driverVia makes a driver on table of the shared server whose every
// connection goes through proxy.
func driverVia(t *testing.T, proxy *pgproxy.Proxy, table string) lease.Driver {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host, cfg.Port = "127.0.0.1", uint16(proxy.Port())
	cfg.Fallbacks = nil
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	d, err := NewDriver(ctxBG, db, Table(table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
