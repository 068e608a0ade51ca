//go:build unix

package pgproxy_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasekit/lease/internal/pgproxy"
	"github.com/leasekit/lease/internal/pgserver"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgserver.Cleanup()
	os.Exit(code)
}

// connect opens a connection to the shared server through p.
func connect(t *testing.T, p *pgproxy.Proxy) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(p.Addr(), ":")
	cfg.Host = host
	fmt.Sscan(port, &cfg.Port)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect through the proxy: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// TestFaults: statements pass through the proxy; Cut fails the next
// matching statement without forwarding it; DropReply forwards it (it
// commits) and cuts the connection before the client hears; Partition
// refuses new connections.
func TestFaults(t *testing.T) {
	p := pgproxy.New(t, addrOf(t))
	ctx := context.Background()
	table := pgserver.UniqueName("pgproxy")
	setup := connect(t, p)
	if _, err := setup.Exec(ctx, "CREATE TABLE "+table+" (k text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pgserver.SharedDB(t).Exec("DROP TABLE IF EXISTS " + table) })

	cut := p.Cut("INSERT INTO " + table)
	if _, err := connect(t, p).Exec(ctx, "INSERT INTO "+table+" VALUES ('cut')"); err == nil {
		t.Fatal("an INSERT through Cut succeeded")
	}
	<-cut
	dropped := p.DropReply("INSERT INTO " + table)
	if _, err := connect(t, p).Exec(ctx, "INSERT INTO "+table+" VALUES ('dropped')"); err == nil {
		t.Fatal("an INSERT whose reply was dropped succeeded")
	}
	<-dropped
	var keys string
	err := connect(t, p).QueryRow(ctx, "SELECT coalesce(string_agg(k, ',' ORDER BY k), '') FROM "+table).Scan(&keys)
	if err != nil || keys != "dropped" {
		t.Fatalf("rows after the faults: %q, %v; want only the dropped reply's row", keys, err)
	}

	p.Partition()
	if err := setup.Ping(ctx); err == nil {
		t.Fatal("a connection survived Partition")
	}
	cfg, _ := pgx.ParseConfig(pgserver.SharedURL(t))
	host, port, _ := strings.Cut(p.Addr(), ":")
	cfg.Host = host
	fmt.Sscan(port, &cfg.Port)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if c, err := pgx.ConnectConfig(cctx, cfg); err == nil {
		c.Close(ctx)
		t.Fatal("connected through a partitioned proxy")
	}
}

// addrOf is the shared server's host:port.
func addrOf(t *testing.T) string {
	cfg, err := pgx.ParseConfig(pgserver.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}
