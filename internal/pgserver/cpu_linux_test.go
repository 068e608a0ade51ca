//go:build linux

package pgserver

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestServerCPU: a server's CPU counts its backends' work, while they run
// and after their connection closed (the postmaster reaped them), and
// never goes back.
func TestServerCPU(t *testing.T) {
	s := Start(t)
	before, err := s.CPU()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		t.Fatal(err)
	}
	var backend int
	if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		t.Fatal(err)
	}
	// Work in the backend until it has used a few clock ticks of CPU.
	var own int64
	for own < 5 {
		var n int64
		if err := c.QueryRow(ctx, "SELECT count(*) FROM generate_series(1, 1000000)").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if own, err = procTicks(backend, false); err != nil {
			t.Fatal(err)
		}
	}
	during, err := s.CPU()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := during-before, time.Duration(own)*clockTick; got < want {
		t.Fatalf("the server's CPU grew by %v while its backend used %v", got, want)
	}
	c.Close(ctx)
	// Once the postmaster has reaped the backend, its time is in the
	// postmaster's cutime and cstime: the sum does not drop.
	for {
		if _, _, err := procStat(backend); err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling for the backend to exit
	}
	after, err := s.CPU()
	if err != nil {
		t.Fatal(err)
	}
	if after < during {
		t.Fatalf("the server's CPU went from %v to %v once its backend exited", during, after)
	}
}
