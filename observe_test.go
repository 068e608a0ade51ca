package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Observe(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// take returns the events seen since the last take, storage calls apart.
func (r *recorder) take() (state, storage []Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Kind == EventStorage {
			storage = append(storage, e)
		} else {
			state = append(state, e)
		}
	}
	r.events = nil
	return state, storage
}

// summary writes events one a line: "kind key epoch detail".
func summary(events []Event) string {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "%s %s %d", e.Kind, e.Key, e.Epoch)
		switch e.Kind {
		case EventAcquired:
			if e.PreviousUnclean {
				b.WriteString(" takeover")
			}
		case EventRenewed:
			fmt.Fprintf(&b, " batch=%d", e.Batch)
		case EventLost:
			fmt.Fprintf(&b, " %s", e.Cause)
		case EventReleased:
			if e.All {
				b.WriteString(" all")
			}
		case EventRenewFailed, EventWaitGaveUp:
			if errors.Is(e.Err, ErrHeld) {
				b.WriteString(" held")
			} else if e.Err != nil {
				b.WriteString(" failed")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func wantEvents(t *testing.T, r *recorder, want ...string) []Event {
	t.Helper()
	got, storage := r.take()
	w := ""
	for _, line := range want {
		w += line + "\n"
	}
	if s := summary(got); s != w {
		t.Errorf("events:\n%s\nwant:\n%s", s, w)
	}
	return storage
}

// balanced checks that every acquired grant in events ended with exactly
// one released or lost event, after it.
func balanced(t *testing.T, events []Event) {
	t.Helper()
	type grant struct {
		key   string
		epoch uint64
	}
	live := map[grant]bool{}
	for _, e := range events {
		g := grant{e.Key, e.Epoch}
		switch e.Kind {
		case EventAcquired:
			if live[g] {
				t.Errorf("%s epoch %d acquired twice", e.Key, e.Epoch)
			}
			live[g] = true
		case EventReleased, EventLost:
			if !live[g] {
				t.Errorf("%s epoch %d %s without a live acquired event", e.Key, e.Epoch, e.Kind)
			}
			delete(live, g)
		}
	}
	for g := range live {
		t.Errorf("%s epoch %d acquired and never ended", g.key, g.epoch)
	}
}

// TestObserverDocumentStore: each state change of a DocumentStore's grants
// is one event, each grant ends once, and every driver call is reported.
func TestObserverDocumentStore(t *testing.T) {
	ctx := t.Context()
	clock := newFakeClock()
	d := NewMemoryDriver()
	r := &recorder{}
	var all []Event
	alice, err := NewDocumentStore(d, WithOwner("alice"), WithClock(clock.Now), WithTTL(time.Minute), WithObserver(r))
	if err != nil {
		t.Fatal(err)
	}
	bob, err := NewDocumentStore(d, WithOwner("bob"), WithClock(clock.Now), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	step := func(want ...string) []Event {
		t.Helper()
		r.mu.Lock()
		all = append(all, r.events...)
		r.mu.Unlock()
		return wantEvents(t, r, want...)
	}

	a := mustAcquire(t, alice, "a")
	mustAcquire(t, alice, "a") // R4c: the same grant, not a new one
	storage := step("acquired a 1")
	// An acquire reads the key with its place (R25), in one call.
	if ops := opsOf(storage); !slices.Equal(ops, []string{"get_many a 2", "put a 1", "get_many a 2"}) {
		t.Errorf("storage calls = %q; want a read of the key and its place, a put, then a read", ops)
	}
	for _, e := range storage {
		if e.Store != "memory" || e.Owner != "alice" || e.Err != nil || e.Duration < 0 {
			t.Errorf("storage event %+v; want store memory, owner alice, no error", e)
		}
	}

	mustAcquire(t, bob, "b")
	clock.Advance(2 * time.Minute)
	mustAcquire(t, alice, "b")
	step("acquired b 2 takeover")

	if _, err := alice.Renew(ctx, a); !errors.Is(err, ErrLost) {
		t.Fatalf("Renew of an expired grant = %v; want ErrLost", err)
	}
	step("lost a 1 expired")
	a = mustAcquire(t, alice, "a")
	if _, err := alice.Renew(ctx, a); err != nil {
		t.Fatal(err)
	}
	step("acquired a 2", "renewed a 2 batch=1")

	clock.Advance(2 * time.Minute)
	mustAcquire(t, bob, "a")
	if _, err := alice.Renew(ctx, a); !errors.Is(err, ErrLost) {
		t.Fatalf("Renew after a takeover = %v; want ErrLost", err)
	}
	step("lost a 2 taken")

	c := mustAcquire(t, alice, "c")
	if err := alice.Release(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := alice.Release(ctx, c); !errors.Is(err, ErrLost) {
		t.Fatalf("second Release = %v; want ErrLost", err)
	}
	step("acquired c 1", "released c 1")

	mustAcquire(t, alice, "c")
	if err := alice.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}
	step("acquired c 2", "released b 2 all", "released c 2 all")

	mustAcquire(t, alice, "d")
	if err := alice.Close(); err != nil {
		t.Fatal(err)
	}
	step("acquired d 1", "lost d 1 closed")
	balanced(t, all)
}

func opsOf(events []Event) []string {
	var ops []string
	for _, e := range events {
		ops = append(ops, fmt.Sprintf("%s %s %d", e.Op, e.Key, e.Batch))
	}
	return ops
}

// TestObserverBatches: the batched paths of Hold's loop report per key,
// with the batch's size, and the batched storage calls once each.
func TestObserverBatches(t *testing.T) {
	ctx := t.Context()
	clock := newFakeClock()
	r := &recorder{}
	s, err := NewDocumentStore(newPerKeyDriver(), WithOwner("alice"), WithClock(clock.Now), WithObserver(r))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res := s.acquireMany(ctx, []string{"a", "b", "c"}, nil)
	storage := wantEvents(t, r, "acquired a 1", "acquired b 1", "acquired c 1")
	if ops := opsOf(storage); !slices.Equal(ops, []string{"get_many  3", "put_many  3"}) {
		t.Errorf("storage calls = %q; want one get_many and one put_many of 3 keys", ops)
	}
	gs := make([]Grant, len(res))
	for i, x := range res {
		gs[i] = x.g
	}
	s.renewMany(ctx, &renewScratch{grants: gs})
	wantEvents(t, r, "renewed a 1 batch=3", "renewed b 1 batch=3", "renewed c 1 batch=3")
}

// TestObserverRenewFailedAndDeadline: a renewal that fails on storage is
// reported as failed and the lease stands; when renewals keep failing,
// Hold's loop ends the lease at its deadline and the loss says so, once
// (a renewal call still in flight at the deadline may report its failure
// after the loss).
func TestObserverRenewFailedAndDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		r := &recorder{}
		s, err := NewDocumentStore(e.d, WithOwner("alice"), WithTTL(holdTTL), WithObserver(r))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		h := mustHold(t, s, "job")
		time.Sleep(holdTTL/3 + time.Millisecond)
		synctest.Wait()
		wantEvents(t, r, "acquired job 1", "renewed job 1 batch=1")

		e.d.set(outageFail)
		<-h.Context().Done()
		synctest.Wait() // a renewal call still in flight at the deadline reports its failure too
		events, _ := r.take()
		lost := slices.IndexFunc(events, func(ev Event) bool { return ev.Kind == EventLost })
		if lost < 1 {
			t.Fatalf("events %s; want failed renewals, then a loss", summary(events))
		}
		if ev := events[lost]; ev.Cause != LossDeadline {
			t.Errorf("loss %s; want cause deadline", summary(events[lost:lost+1]))
		}
		for i, ev := range events {
			if i == lost {
				continue
			}
			if ev.Kind != EventRenewFailed || !errors.Is(ev.Err, errOutage) {
				t.Errorf("event %s (%v); want renew_failed with the outage, and one loss", summary([]Event{ev}), ev.Err)
			}
		}

		e.d.set(outageNone)
		if err := h.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		wantEvents(t, r) // the loss already ended the grant: no release event
	})
}

// TestObserverWait: a Hold that waits reports the start of its wait, and
// its end with the time it took: the key, or giving up.
func TestObserverWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newHoldEnv(t)
		r := &recorder{}
		alice, err := NewDocumentStore(e.d, WithOwner("alice"), WithTTL(time.Hour), WithObserver(r))
		if err != nil {
			t.Fatal(err)
		}
		defer alice.Close()
		bob := e.store("bob", time.Hour)
		bg := mustAcquire(t, bob, "job")

		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		if _, err := Hold(ctx, alice, "job"); !errors.Is(err, ErrHeld) {
			t.Fatalf("Hold = %v; want ErrHeld after the timeout", err)
		}
		events, _ := r.take()
		if s := summary(events); s != "wait_started job 0\nwait_gave_up job 0 held\n" {
			t.Errorf("events:\n%s", s)
		}
		if d := events[len(events)-1].Duration; d < 3*time.Second-gatherWindow || d > 3*time.Second {
			t.Errorf("gave up after %v; want 3s less the first look's gathering", d)
		}

		go func() {
			time.Sleep(2 * time.Second)
			_ = bob.Release(context.Background(), bg)
		}()
		h := mustHold(t, alice, "job")
		defer h.Release(context.Background())
		events, _ = r.take()
		if s := summary(events); s != "wait_started job 0\nacquired job 2\nwait_done job 2\n" {
			t.Errorf("events:\n%s", s)
		}
		if d := events[len(events)-1].Duration; d < 2*time.Second || d > 3*time.Second {
			t.Errorf("waited %v; want about 2s", d)
		}
	})
}

// TestObserverLocalStore: the local store reports the same state changes,
// and its flock and record operations as storage calls.
func TestObserverLocalStore(t *testing.T) {
	ctx := t.Context()
	r := &recorder{}
	s, err := NewLocalStore(t.TempDir(), WithOwner("alice"), WithObserver(r))
	if err != nil {
		t.Fatal(err)
	}
	a := mustAcquire(t, s, "a")
	storage := wantEvents(t, r, "acquired a 1")
	if ops := opsOf(storage); !slices.Contains(ops, "lock a 1") || !slices.Contains(ops, "write a 1") {
		t.Errorf("storage calls = %q; want a lock and a write", ops)
	}
	if _, err := s.Renew(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	storage = wantEvents(t, r, "renewed a 1 batch=1", "released a 1")
	if ops := opsOf(storage); !slices.Contains(ops, "unlock a 1") {
		t.Errorf("storage calls = %q; want an unlock", ops)
	}
	mustAcquire(t, s, "b")
	if err := s.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, "c")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, r, "acquired b 1", "released b 1 all", "acquired c 1", "lost c 1 closed")
	for _, e := range storage {
		if e.Store != "local" {
			t.Errorf("store kind %q; want local", e.Store)
		}
	}
}

// counter is the cheapest useful Observer: it counts events by kind.
type counter struct {
	mu sync.Mutex
	n  [EventStorage + 1]int
}

func (c *counter) Observe(e Event) {
	c.mu.Lock()
	c.n[e.Kind]++
	c.mu.Unlock()
}

// TestObserveAllocs: reporting allocates nothing, with or without an
// observer, so a store costs the same allocations per operation either way.
func TestObserveAllocs(t *testing.T) {
	ctx := t.Context()
	cycle := func(s *DocumentStore) func() {
		return func() {
			g, err := s.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if g, err = s.Renew(ctx, g); err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctx, g); err != nil {
				t.Fatal(err)
			}
		}
	}
	bare, err := NewDocumentStore(NewMemoryDriver())
	if err != nil {
		t.Fatal(err)
	}
	counted, err := NewDocumentStore(NewMemoryDriver(), WithObserver(&counter{}))
	if err != nil {
		t.Fatal(err)
	}
	without := testing.AllocsPerRun(200, cycle(bare))
	with := testing.AllocsPerRun(200, cycle(counted))
	if with != without {
		t.Errorf("an acquire, renew and release cycle allocates %v times with a counting observer, %v without; want the same", with, without)
	}

	var none *observer
	g := Grant{Key: "k", Owner: "o", Epoch: 1}
	if n := testing.AllocsPerRun(200, func() {
		none.acquired(g)
		none.renewed(g, nil, 1)
		none.released(g, false, nil)
		none.storage(OpPut, "k", 1, none.start(), nil)
	}); n != 0 {
		t.Errorf("reporting without an observer allocates %v times; want 0", n)
	}
}

// TestSlogObserver: each event is one record at its level, naming the key,
// and debug records stay out of an info logger.
func TestSlogObserver(t *testing.T) {
	var buf strings.Builder
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		Level:       slog.LevelInfo,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return dropTime(a) },
	}))
	clock := newFakeClock()
	s, err := NewDocumentStore(NewMemoryDriver(), WithOwner("alice"), WithClock(clock.Now), WithObserver(NewSlogObserver(l)))
	if err != nil {
		t.Fatal(err)
	}
	g := mustAcquire(t, s, "job")
	if _, err := s.Renew(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if _, err := s.Renew(t.Context(), g); !errors.Is(err, ErrLost) {
		t.Fatalf("Renew = %v; want ErrLost", err)
	}
	want := "level=INFO msg=\"lease: acquired\" store=memory owner=alice key=job epoch=1 takeover=false\n" +
		"level=WARN msg=\"lease: lost\" store=memory owner=alice key=job epoch=1 cause=expired\n"
	if buf.String() != want {
		t.Errorf("log:\n%s\nwant:\n%s", buf.String(), want)
	}
}

func dropTime(a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
