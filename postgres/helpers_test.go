package postgres

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasekit/lease/internal/pgserver"
	"github.com/leasekit/lease/internal/storechild"
)

var ctxBG = context.Background()

// TestStoreChild is the store child's entry point (package childproc);
// run directly it does nothing.
func TestStoreChild(t *testing.T) { storechild.Serve(t) }

// newTestPostgresDriver makes a driver on a fresh table of the shared
// pool; it closes when the test ends.
func newTestPostgresDriver(t testing.TB) *postgresDriver {
	t.Helper()
	d, err := NewDriver(ctxBG, pgserver.SharedDB(t), Table(pgserver.FreshTable(t)))
	if err != nil {
		t.Fatalf("NewDriver: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d.(*postgresDriver)
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// pgQuote quotes s as an SQL string literal.
func pgQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// countRequests makes the connections cfg opens count the requests they
// send, and returns the count so far: pgx sends each request (a
// statement, a ping) in one write and waits for its answer before the
// next, so that each is one round trip.
func countRequests(cfg *pgx.ConnConfig) func() int {
	var sent atomic.Int64
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return requestCounter{Conn: c, sent: &sent}, nil
	}
	return func() int { return int(sent.Load()) }
}

// requestCounter is a connection that counts the writes sent on it.
type requestCounter struct {
	net.Conn
	sent *atomic.Int64
}

func (c requestCounter) Write(p []byte) (int, error) {
	c.sent.Add(1)
	return c.Conn.Write(p)
}
