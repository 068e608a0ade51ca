//go:build unix

package pgserver

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// query runs SELECT 1 on s, or returns why it could not.
func query(s *Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var one int
	return c.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// TestServerLifecycle: a server of the test's own answers, is down after
// Stop and after Kill (as a crash), and comes back on the same port with
// its data after Start.
func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	if err := query(s); err != nil {
		t.Fatalf("a started server: %v\nlog: %s", err, s.Log())
	}
	s.Stop()
	if err := query(s); err == nil {
		t.Fatal("a stopped server answered")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := query(s); err != nil {
		t.Fatalf("a restarted server: %v", err)
	}
	s.Kill()
	if err := query(s); err == nil {
		t.Fatal("a killed server answered")
	}
}

// TestShared: the shared server (or LEASE_POSTGRES_URL) answers through
// its pool, and FreshTable names differ.
func TestShared(t *testing.T) {
	if err := SharedDB(t).Ping(); err != nil {
		t.Fatal(err)
	}
	if a, b := FreshTable(t), FreshTable(t); a == b {
		t.Fatalf("FreshTable twice: %q", a)
	}
}
