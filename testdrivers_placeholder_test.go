package lease

// PLACEHOLDER until main's shared test infrastructure is merged: main's
// documents_test.go defines testDriver, testDrivers and the contract suite
// that runs on every registered driver. On merging, delete this file; the
// registration in mongo_test.go then feeds main's suite.

import (
	"context"
	"errors"
	"testing"
	"time"
)

type testDriver struct {
	name string
	open func(t *testing.T) Driver
}

var testDrivers = []testDriver{{name: "memory", open: func(*testing.T) Driver { return NewMemoryDriver() }}}

// placeholderClock is a settable clock for the stand-in suite below.
type placeholderClock struct{ now time.Time }

func (c *placeholderClock) Now() time.Time { return c.now }

// TestPlaceholderContract is a small stand-in for main's contract suite:
// R4 a-f, R6, R7, R2 on every registered driver.
func TestPlaceholderContract(t *testing.T) {
	for _, td := range testDrivers {
		t.Run(td.name, func(t *testing.T) {
			ctx := context.Background()
			d := td.open(t)
			clk := &placeholderClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			a, _ := NewDocumentStore(d, WithOwner("a"), WithClock(clk.Now), WithTTL(time.Minute))
			b, _ := NewDocumentStore(d, WithOwner("b"), WithClock(clk.Now), WithTTL(time.Minute))

			g, err := a.Acquire(ctx, "k") // R4a
			if err != nil || g.Epoch != 1 || g.PreviousUnclean {
				t.Fatalf("R4a: got %+v, %v; want epoch 1", g, err)
			}
			if g2, err := a.Acquire(ctx, "k"); err != nil || g2 != g { // R4c
				t.Fatalf("R4c: got %+v, %v; want %+v", g2, err, g)
			}
			var he *HeldError
			if _, err := b.Acquire(ctx, "k"); !errors.As(err, &he) || he.Owner != "a" || he.Epoch != 1 { // R4e
				t.Fatalf("R4e: got %v; want held by a", err)
			}
			clk.now = clk.now.Add(30 * time.Second)
			g, err = a.Renew(ctx, g) // R6
			if err != nil || !g.ExpiresAt.Equal(clk.now.Add(time.Minute)) {
				t.Fatalf("R6: got %+v, %v", g, err)
			}
			if rec, err := b.Holder(ctx, "k"); err != nil || rec.Owner != "a" || !rec.ExpiresAt.Equal(g.ExpiresAt) {
				t.Fatalf("Holder: got %+v, %v", rec, err)
			}
			clk.now = g.ExpiresAt
			if _, err := a.Renew(ctx, g); !errors.Is(err, ErrLost) { // R6 after expiry
				t.Fatalf("R6 expired: got %v; want ErrLost", err)
			}
			gb, err := b.Acquire(ctx, "k") // R4f
			if err != nil || gb.Epoch != 2 || !gb.PreviousUnclean {
				t.Fatalf("R4f: got %+v, %v; want epoch 2, unclean", gb, err)
			}
			if err := a.Release(ctx, g); !errors.Is(err, ErrLost) { // R7
				t.Fatalf("R7 stale: got %v; want ErrLost", err)
			}
			if err := b.Release(ctx, gb); err != nil { // R7
				t.Fatalf("R7: %v", err)
			}
			if _, err := b.Holder(ctx, "k"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Holder after release: got %v; want ErrNotFound", err)
			}
			g, err = a.Acquire(ctx, "k") // R4b
			if err != nil || g.Epoch != 3 || g.PreviousUnclean {
				t.Fatalf("R4b: got %+v, %v; want epoch 3", g, err)
			}
			clk.now = g.ExpiresAt
			g4, err := a.Acquire(ctx, "k") // R4d
			if err != nil || g4.Epoch != 4 || g4.PreviousUnclean {
				t.Fatalf("R4d: got %+v, %v; want epoch 4", g4, err)
			}
		})
	}
}
