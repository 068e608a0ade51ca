package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestSessionWaitEndsWithContext: a call that waits behind one of its
// store's session writes in flight (a session start, a renewal) returns
// when its own context ends, not when that write does. The session's
// locks were sync.Mutexes held across the write: ReleaseAll waited for a
// Hold's session start and Confirm for another renewal whatever their
// contexts said, and TestHeldModel's synctest bubble hung on them.
func TestSessionWaitEndsWithContext(t *testing.T) {
	// blockNext makes d's next session write wait until the returned
	// release is called, and returns a channel closed once it waits.
	blockNext := func(d *sessionCounter) (waiting <-chan struct{}, release func()) {
		w, gate := make(chan struct{}), make(chan struct{})
		var once sync.Once
		d.mu.Lock()
		d.onPutSession = func(SessionRecord) {
			first := false
			once.Do(func() { first = true })
			if first {
				close(w)
				<-gate
			}
		}
		d.mu.Unlock()
		var opened sync.Once
		return w, func() { opened.Do(func() { close(gate) }) }
	}
	// within waits for call, which must end with ctx's error once ctx
	// (20ms) ends: a bound of seconds is only there to report a hang.
	within := func(t *testing.T, name string, call func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- call(ctx) }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s behind a session write in flight = %v; want its context's end", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return 10s after its context ended: it waits for the session write in flight", name)
		}
	}

	t.Run("ReleaseAll behind a session start", func(t *testing.T) {
		d := newSessionCounter()
		s := loopStore(t, d, "alice")
		waiting, release := blockNext(d)
		defer release()
		holding := make(chan error, 1)
		go func() {
			h, err := Hold(t.Context(), s, "profile:1")
			if err == nil {
				err = h.Release(context.Background())
			}
			holding <- err
		}()
		<-waiting
		within(t, "ReleaseAll", s.ReleaseAll)
		release()
		if err := <-holding; err != nil {
			t.Fatalf("the Hold whose session start was held up: %v", err)
		}
	})

	t.Run("Confirm behind a renewal", func(t *testing.T) {
		d := newSessionCounter()
		s := loopStore(t, d, "alice")
		h := mustHold(t, s, "profile:1")
		waiting, release := blockNext(d)
		defer release()
		confirming := make(chan error, 1)
		go func() {
			_, err := h.Confirm(t.Context())
			confirming <- err
		}()
		<-waiting
		within(t, "Confirm", func(ctx context.Context) error { _, err := h.Confirm(ctx); return err })
		release()
		if err := <-confirming; err != nil {
			t.Fatalf("the Confirm whose renewal was held up: %v", err)
		}
		if err := h.Context().Err(); err != nil {
			t.Fatalf("the Held ended: %v", context.Cause(h.Context()))
		}
	})
}

// TestReleaseAllBesideReleases: ReleaseAll ends the store's session
// (R22) while bare Releases of its keys are on their way (as a keeper
// gives back a key taken for a Hold whose caller left). The end of the
// session drops its grants from the table under the table's lock alone,
// so a Release must read its entry under that lock too: under -race, a
// Release that read its entry after the lock, then waited on its write
// while ReleaseAll dropped that entry, was a data race (nothing but time
// orders the two here, as nothing did when TestHeldModel found it). Every
// key ends free, and each call answers nil or ErrLost.
func TestReleaseAllBesideReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &slowEnds{memoryDriver: NewMemoryDriver().(*memoryDriver)}
		s := loopStore(t, d, "alice")
		hs := holdAll(t, s, profileKeys(4))
		var wg sync.WaitGroup
		for _, h := range hs {
			g := h.Grant()
			wg.Go(func() {
				if err := s.Release(context.Background(), g); err != nil && !errors.Is(err, ErrLost) {
					t.Errorf("Release(%q) beside ReleaseAll = %v; want nil or ErrLost", g.Key, err)
				}
			})
		}
		wg.Go(func() {
			if err := s.ReleaseAll(context.Background()); err != nil && !errors.Is(err, ErrLost) {
				t.Errorf("ReleaseAll beside Releases = %v; want nil or ErrLost", err)
			}
		})
		wg.Wait()
		for _, h := range hs {
			if rec, err := s.Holder(context.Background(), h.key); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Holder(%q) after ReleaseAll and Release = %+v, %v; want ErrNotFound", h.key, rec, err)
			}
		}
	})
}

// slowEnds is the memory driver whose session ends land a second after
// they are sent, and whose key releases two seconds after: a Release
// reads its table entry, ReleaseAll ends the session and drops that
// entry, and only then does the Release's write land.
type slowEnds struct{ *memoryDriver }

func (d *slowEnds) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	if rec.Released {
		time.Sleep(2 * time.Second)
	}
	return d.memoryDriver.Put(ctx, rec, pre)
}

func (d *slowEnds) PutSession(ctx context.Context, rec SessionRecord, pre Precondition) (uint64, error) {
	if rec.State == SessionEndedClean {
		time.Sleep(time.Second)
	}
	return d.memoryDriver.PutSession(ctx, rec, pre)
}
