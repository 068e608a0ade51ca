package lease

import (
	"context"
	"errors"
	"os"
	"testing"
)

// recordReader is what the command's `lease holder` asks of a store to
// tell what a free key's last holder left.
type recordReader interface {
	Store
	Record(ctx context.Context, key string) (Record, error)
}

// TestRecordWhateverItsState: R3. On the memory driver and the local
// store (leasetest checks the same on every driver), Record returns the stored record of a
// key, live, expired, released or left by a holder that died, and
// ErrNotFound only for a key never written; it writes and creates nothing.
func TestRecordWhateverItsState(t *testing.T) {
	for name, open := range map[string]func(t *testing.T, clock *fakeClock, owner string) recordReader{
		"memory": func() func(*testing.T, *fakeClock, string) recordReader {
			d := NewMemoryDriver()
			return func(t *testing.T, clock *fakeClock, owner string) recordReader {
				s, err := NewDocumentStore(d, WithOwner(owner), WithClock(clock.Now), WithTTL(testTTL))
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		}(),
		"local": func() func(*testing.T, *fakeClock, string) recordReader {
			root := ""
			return func(t *testing.T, clock *fakeClock, owner string) recordReader {
				if root == "" {
					root = t.TempDir()
				}
				s, err := NewLocalStore(root, WithOwner(owner))
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			clock := newFakeClock()
			a, b := open(t, clock, "host-a"), open(t, clock, "host-b")
			defer b.Close()

			if _, err := b.Record(ctx, "never"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Record of a key never written = %v; want ErrNotFound", err)
			}
			if _, err := b.Record(ctx, "a//b"); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("Record of an invalid key = %v; want ErrInvalidKey", err)
			}
			g := mustAcquire(t, a, "k")
			rec, err := b.Record(ctx, "k")
			if err != nil || rec.Owner != "host-a" || rec.Epoch != 1 || rec.Released {
				t.Errorf("Record of a live key = %+v, %v; want host-a's epoch 1, unreleased", rec, err)
			}
			if err := a.Release(ctx, g); err != nil {
				t.Fatal(err)
			}
			if rec, err := b.Record(ctx, "k"); err != nil || rec.Epoch != 1 || !rec.Released {
				t.Errorf("Record of a released key = %+v, %v; want epoch 1, released", rec, err)
			}

			mustAcquire(t, a, "k")
			a.Close() // dies holding k
			clock.Advance(testTTL)
			if _, err := b.Holder(ctx, "k"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Holder after the holder died = %v; want ErrNotFound", err)
			}
			if rec, err := b.Record(ctx, "k"); err != nil || rec.Owner != "host-a" || rec.Epoch != 2 || rec.Released {
				t.Errorf("Record after the holder died = %+v, %v; want host-a's epoch 2, unreleased", rec, err)
			}
			// Reading changed nothing: the next holder still sees the crash.
			if g := mustAcquire(t, b, "k"); g.Epoch != 3 || !g.PreviousUnclean {
				t.Errorf("acquire after Record = %+v; want epoch 3, PreviousUnclean", g)
			}
			b.Close()
			if _, err := b.Record(ctx, "k"); !errors.Is(err, ErrClosed) {
				t.Errorf("Record on a closed store = %v; want ErrClosed", err)
			}
		})
	}
}

// TestLocalRecordCreatesNothing: R14's rule for readers. Record of a key
// never written creates no lock file.
func TestLocalRecordCreatesNothing(t *testing.T) {
	root := t.TempDir()
	s, err := NewLocalStore(root)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Record(t.Context(), "jobs/nightly"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Record = %v; want ErrNotFound", err)
	}
	entries, err := os.ReadDir(root)
	if err != nil || len(entries) != 0 {
		t.Errorf("root after Record holds %v (%v); want nothing", entries, err)
	}
}
