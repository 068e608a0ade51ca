package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// lateDriver loses the reply of every write while on: the write is kept
// back and lands only when the test says, as a slow network write would.
type lateDriver struct {
	Driver
	mu   sync.Mutex // guards the fields below
	on   bool
	kept []Write
}

var errLateReply = errors.New("injected: reply lost")

func (d *lateDriver) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.on {
		d.kept = append(d.kept, Write{Rec: rec, Pre: pre})
		return 0, errLateReply
	}
	return d.Driver.Put(ctx, rec, pre)
}

// land applies the i-th kept write now, if its precondition still holds.
func (d *lateDriver) land(t *testing.T, i int) {
	t.Helper()
	d.mu.Lock()
	w := d.kept[i]
	d.mu.Unlock()
	if _, err := d.Driver.Put(t.Context(), w.Rec, w.Pre); err != nil {
		t.Fatalf("landing write %d: %v", i, err)
	}
}

func (d *lateDriver) setOn(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.on = on
}

// TestTwoUnsettledAcquireWrites: R9. Two acquire writes of one key whose
// outcomes are unknown are both remembered: when the first lands late,
// after the retry's write was sent, the store recognises its own grant
// (R4c) instead of naming itself as another holder, and after expiry it
// takes the key back cleanly (R4d), not as a takeover from a dead holder.
func TestTwoUnsettledAcquireWrites(t *testing.T) {
	clock := newFakeClock()
	d := &lateDriver{Driver: NewMemoryDriver()}
	s := newDocStore(t, d, clock, "alice")
	d.setOn(true)
	for range 2 {
		if _, err := s.Acquire(t.Context(), "job"); !errors.Is(err, ErrStorage) {
			t.Fatalf("Acquire with the reply lost = %v; want ErrStorage", err)
		}
		clock.Advance(time.Millisecond) // the retry's write differs from the first
	}
	d.setOn(false)
	d.land(t, 0) // the first write lands, late
	g, err := s.Acquire(t.Context(), "job")
	if err != nil || g.Epoch != 1 || g.Owner != "alice" || g.PreviousUnclean {
		t.Fatalf("Acquire after the first write landed = %+v, %v; want alice's epoch 1 back", g, err)
	}
	clock.Advance(testTTL)
	g, err = s.Acquire(t.Context(), "job")
	if err != nil || g.Epoch != 2 || g.PreviousUnclean {
		t.Fatalf("Acquire after expiry = %+v, %v; want epoch 2, not PreviousUnclean", g, err)
	}
}
