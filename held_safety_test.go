package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// These tests check the layer above the store (R15-R17): one live Held per
// key and store, Helds that end before their grants are given up, no
// grant left held by nobody, and keys that keep their leases whatever
// another key's storage does. Each fails with its mutant (make mutants).

// gateDriver is the memory driver with a hand on its writes: onWrite sees
// every record before it is written, writes wait while the gate is shut,
// and writes of a hanging key wait until their context ends.
type gateDriver struct {
	*memoryDriver

	mu      sync.Mutex
	onWrite func(Record)
	gate    chan struct{} // nil: open
	hang    map[string]bool
}

var _ BatchDriver = (*gateDriver)(nil)

// Capabilities: per key, so that each key's writes go through the gate
// (R12's batches; a session's Helds share one write).
func (*gateDriver) Capabilities() Capabilities { return Capabilities{} }

func newGateDriver() *gateDriver {
	return &gateDriver{memoryDriver: NewMemoryDriver().(*memoryDriver), hang: map[string]bool{}}
}

func (d *gateDriver) shut() { d.mu.Lock(); d.gate = make(chan struct{}); d.mu.Unlock() }
func (d *gateDriver) open() { d.mu.Lock(); close(d.gate); d.gate = nil; d.mu.Unlock() }

func (d *gateDriver) setHang(key string, on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hang[key] = on
}

// before runs the hooks for a write of recs; an error fails the write
// with its outcome unknown.
func (d *gateDriver) before(ctx context.Context, recs ...Record) error {
	d.mu.Lock()
	gate, on := d.gate, d.onWrite
	hang := false
	for _, r := range recs {
		hang = hang || d.hang[r.Key]
	}
	d.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if on != nil {
		for _, r := range recs {
			on(r)
		}
	}
	return nil
}

func (d *gateDriver) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	if err := d.before(ctx, rec); err != nil {
		return 0, err
	}
	return d.memoryDriver.Put(ctx, rec, pre)
}

func (d *gateDriver) PutMany(ctx context.Context, ws []Write) ([]PutResult, error) {
	recs := make([]Record, len(ws))
	for i, w := range ws {
		recs[i] = w.Rec
	}
	if err := d.before(ctx, recs...); err != nil {
		return nil, err
	}
	return d.memoryDriver.PutMany(ctx, ws)
}

// TestR16SecondHoldWaitsForTheFirst: a second Hold of a key through the
// same store does not share the live Held's grant: with FailIfHeld it
// fails naming the store's own owner; otherwise it waits, and after the
// first Held's release it gets a grant of its own with a new epoch.
func TestR16SecondHoldWaitsForTheFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := loopStore(t, NewMemoryDriver(), "alice")
		h1, err := Hold(t.Context(), s, "k")
		if err != nil {
			t.Fatal(err)
		}
		var he *HeldError
		if h, err := Hold(t.Context(), s, "k", FailIfHeld()); !errors.As(err, &he) || he.Owner != "alice" || he.Epoch != 1 {
			if h != nil {
				t.Fatalf("FailIfHeld Hold of a key this store holds returned a Held of epoch %d; want a *HeldError naming alice at epoch 1", h.Grant().Epoch)
			}
			t.Fatalf("FailIfHeld Hold of a key this store holds = %v; want a *HeldError naming alice at epoch 1", err)
		}
		got := make(chan *Held, 1)
		go func() {
			h2, err := Hold(t.Context(), s, "k")
			if err != nil {
				t.Error(err)
			}
			got <- h2
		}()
		synctest.Wait()
		select {
		case h2 := <-got:
			t.Fatalf("second Hold returned epoch %d while the first Held (epoch 1) was live", h2.Grant().Epoch)
		default:
		}
		if err := h1.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		h2 := <-got
		if g := h2.Grant(); g.Epoch != 2 || g.PreviousUnclean {
			t.Errorf("second Hold after a release got %+v; want epoch 2, clean", g)
		}
		if h1.Context().Err() == nil || h2.Context().Err() != nil {
			t.Error("want the first Held ended and the second live")
		}
	})
}

// TestR16WaitersServedInOrder: the waiters of one key in one store are
// served first come, first served, each with a new epoch.
func TestR16WaitersServedInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := loopStore(t, NewMemoryDriver(), "alice")
		h, err := Hold(t.Context(), s, "k")
		if err != nil {
			t.Fatal(err)
		}
		const n = 4
		got := make(chan int, n)
		helds := make([]*Held, n)
		for i := range n {
			go func() {
				hi, err := Hold(t.Context(), s, "k")
				if err != nil {
					t.Error(err)
					return
				}
				helds[i] = hi
				got <- i
			}()
			synctest.Wait() // queued before the next one starts
		}
		for want := range n {
			if err := h.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			i := <-got
			if i != want {
				t.Fatalf("waiter %d served before waiter %d", i, want)
			}
			h = helds[i]
			if e := h.Grant().Epoch; e != uint64(want+2) {
				t.Errorf("waiter %d got epoch %d; want %d", i, e, want+2)
			}
		}
	})
}

// TestR17GiveUpEndsHeldsFirst: every write that releases a Held's grant
// (Held.Release, a bare Release of its grant, ReleaseAll) finds the Held
// already ended.
func TestR17GiveUpEndsHeldsFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newGateDriver()
		s := loopStore(t, d, "alice")
		var mu sync.Mutex
		live := map[string]*Held{}
		d.onWrite = func(r Record) {
			mu.Lock()
			defer mu.Unlock()
			if h := live[r.Key]; r.Released && h != nil && h.Context().Err() == nil {
				t.Errorf("release of %q epoch %d written while its Held was live", r.Key, r.Epoch)
			}
		}
		hold := func(key string) *Held {
			h, err := Hold(t.Context(), s, key)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			live[key] = h
			mu.Unlock()
			return h
		}
		if err := hold("one").Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(t.Context(), hold("bare").Grant()); err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			hold(fmt.Sprintf("all-%d", i))
		}
		if err := s.ReleaseAll(t.Context()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		for key, h := range live {
			if h.Context().Err() == nil {
				t.Errorf("Held of %q still live after its release", key)
			}
		}
	})
}

// TestR15CloseEndsHeldsBeforeReturning: Close ends every Held at once, on
// the stores of every kind, also while Holds race it.
func TestR15CloseEndsHeldsBeforeReturning(t *testing.T) {
	stores := map[string]func(t *testing.T) Store{
		"memory": func(t *testing.T) Store { return loopStore(t, NewMemoryDriver(), "alice") },
		"file":   func(t *testing.T) Store { return newLocal(t, t.TempDir(), WithOwner("alice")) },
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			for round := range 50 {
				s := open(t)
				h, err := Hold(t.Context(), s, "k")
				if err != nil {
					t.Fatal(err)
				}
				racing := make(chan *Held, 1)
				go func() {
					h, _ := Hold(t.Context(), s, fmt.Sprintf("race-%d", round))
					racing <- h
				}()
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if cause := context.Cause(h.Context()); !errors.Is(cause, ErrClosed) || !errors.Is(cause, ErrLost) {
					t.Fatalf("round %d: after Close the Held's cause is %v; want ErrLost and ErrClosed", round, cause)
				}
				if r := <-racing; r != nil && r.Context().Err() == nil {
					t.Fatalf("round %d: a Hold racing Close returned a live Held", round)
				}
			}
		})
	}
}

// TestR17WaiterLeavesWhileAcquiring: a waiter whose context ends while its
// key's acquire is in flight leaves no grant behind: the loop gives the
// grant back with a context of its own, so another store gets the key at
// once, cleanly.
func TestR17WaiterLeavesWhileAcquiring(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newGateDriver()
		a, b := loopStore(t, d, "alice"), loopStore(t, d, "bob")
		d.shut()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := Hold(ctx, a, "k"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Hold with its write held back = %v; want the context's end", err)
		}
		d.open() // the acquire lands after its waiter left
		synctest.Wait()
		g, err := b.Acquire(t.Context(), "k")
		if err != nil {
			t.Fatalf("bob's acquire after alice's waiter left = %v; want the key given back", err)
		}
		if g.Epoch != 2 || g.PreviousUnclean {
			t.Errorf("bob got %+v; want epoch 2 after a clean give-back", g)
		}
	})
}

// TestR12HangingKeyCostsOthersNothing: a key whose writes hang makes its
// own Held end at its deadline, and no other Held of the store misses a
// renewal.
func TestR12HangingKeyCostsOthersNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newGateDriver()
		s := loopStore(t, d, "alice")
		var hs []*Held
		for r := range HoldEach(t.Context(), s, []string{"a", "b", "c", "stuck"}) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			hs = append(hs, r.Held)
		}
		d.setHang("stuck", true)
		time.Sleep(5 * holdTTL)
		for _, h := range hs {
			switch err := h.Context().Err(); {
			case h.key == "stuck" && err == nil:
				t.Error("the Held whose writes hang is still live")
			case h.key != "stuck" && err != nil:
				t.Errorf("Held of %q lost beside a hanging key: %v", h.key, context.Cause(h.Context()))
			}
		}
	})
}

// TestHoldEachBatchesFirstLooks: HoldEach of many free keys takes them in
// a few batched reads and writes, with no one-key call and no goroutine
// per key.
func TestHoldEachBatchesFirstLooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newCountingDriver()
		s := loopStore(t, d, "alice")
		const n = 10000
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("profile/%05d", i)
		}
		held := 0
		for r := range HoldEach(t.Context(), s, keys) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			held++
		}
		if held != n {
			t.Fatalf("held %d keys; want %d", held, n)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.gets+d.puts != 0 || d.getMany+d.putMany > 10 {
			t.Errorf("HoldEach of %d keys: %d one-key and %d batched calls; want none and at most 10",
				n, d.gets+d.puts, d.getMany+d.putMany)
		}
	})
}

// TestRenewalsInKeyOrder: R12 batches renewals: however the keys were
// held (one HoldEach given them in any order, or a Hold each from
// goroutines at once), one period renews each key once, in as few calls
// as maxBatch allows. The keys of a HoldEach are renewed in calls that
// each write a range of keys, in key order, that no other call of the
// period overlaps: HoldEach takes its keys in key order, and a round
// keeps the order of the call that made it, so a call writes keys that
// lie close together in the store. The keeper does not sort its waves,
// so keys held by Holds from goroutines are renewed in no particular
// order (BenchmarkPerKeyRenewal: sorting earned nothing on a driver
// without Sessions; a driver that states them renews no key per key).
func TestRenewalsInKeyOrder(t *testing.T) {
	for _, way := range []string{"HoldEach", "Hold"} {
		t.Run(way, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := &putRecorder{memoryDriver: NewMemoryDriver().(*memoryDriver)}
				s := loopStore(t, d, "alice")
				keys := profileKeys(3*maxBatch + 17)
				if way == "HoldEach" {
					for r := range HoldEach(t.Context(), s, keys) {
						if r.Err != nil {
							t.Fatal(r.Err)
						}
					}
				} else {
					var wg sync.WaitGroup
					for _, key := range keys {
						wg.Go(func() {
							if _, err := Hold(t.Context(), s, key); err != nil {
								t.Error(err)
							}
						})
					}
					wg.Wait()
				}
				d.record()
				time.Sleep(holdTTL/3 + holdTTL/6) // one renewal period: every key renewed once
				calls := d.recorded()
				wantBatched(t, calls, len(keys))
				if way == "HoldEach" {
					wantKeyRanges(t, calls)
				}
			})
		})
	}
}

// wantBatched checks that calls, the keys of one period's renewal calls,
// renew each of n keys once, in as few calls as maxBatch allows.
func wantBatched(t *testing.T, calls [][]string, n int) {
	t.Helper()
	seen := make(map[string]bool, n)
	for _, c := range calls {
		for _, key := range c {
			if seen[key] {
				t.Fatalf("%q renewed twice in one period", key)
			}
			seen[key] = true
		}
	}
	if len(seen) != n {
		t.Fatalf("%d keys renewed in one period; want each of the %d once", len(seen), n)
	}
	if want := (n + maxBatch - 1) / maxBatch; len(calls) != want {
		t.Errorf("%d keys renewed in %d calls; want %d", n, len(calls), want)
	}
}

// wantKeyRanges checks that calls, the keys of one period's renewal
// calls, are each in key order, and that no two calls' ranges of keys
// overlap.
func wantKeyRanges(t *testing.T, calls [][]string) {
	t.Helper()
	for _, c := range calls {
		if !slices.IsSorted(c) {
			t.Errorf("a renewal call of %d keys is not in key order", len(c))
		}
	}
	calls = slices.Clone(calls)
	slices.SortFunc(calls, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	for i := 1; i < len(calls); i++ {
		if prev := calls[i-1]; prev[len(prev)-1] >= calls[i][0] {
			t.Errorf("renewal calls overlap: one writes %q..%q, another %q..%q",
				prev[0], prev[len(prev)-1], calls[i][0], calls[i][len(calls[i])-1])
		}
	}
}

// putRecorder is a memory driver that records the keys of each PutMany
// once told to.
type putRecorder struct {
	*memoryDriver
	mu    sync.Mutex
	on    bool
	calls [][]string
}

// Capabilities: per key, whose renewals the recorder watches.
func (*putRecorder) Capabilities() Capabilities { return Capabilities{} }

func (d *putRecorder) record() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.on = true
}

func (d *putRecorder) recorded() [][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}

func (d *putRecorder) PutMany(ctx context.Context, ws []Write) ([]PutResult, error) {
	d.mu.Lock()
	if d.on {
		keys := make([]string, len(ws))
		for i, w := range ws {
			keys[i] = w.Rec.Key
		}
		d.calls = append(d.calls, keys)
	}
	d.mu.Unlock()
	return d.memoryDriver.PutMany(ctx, ws)
}

// TestConcurrentHoldsCoalesce: many goroutines calling Hold on one store
// at once share batched looks.
func TestConcurrentHoldsCoalesce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newCountingDriver()
		s := loopStore(t, d, "alice")
		const n = 1000
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if _, err := Hold(t.Context(), s, fmt.Sprintf("p/%d", i)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		d.mu.Lock()
		defer d.mu.Unlock()
		if calls := d.gets + d.puts + d.getMany + d.putMany; calls > 10 {
			t.Errorf("%d concurrent Holds cost %d storage calls; want at most 10", n, calls)
		}
	})
}

// TestHoldAloneLooksAtOnce: a Hold with no other Hold to share its look
// looks at once, however soon after the store's previous Hold: a worker
// holding one key after another never waits for company (the gathering
// window is for Holds that come together). The bubble's clock counts any
// wait.
func TestHoldAloneLooksAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newCountingDriver()
		s := loopStore(t, d, "alice")
		for i := range 10 {
			start := time.Now()
			h := mustHold(t, s, fmt.Sprintf("job/%d", i%3))
			if err := h.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			if waited := time.Since(start); waited != 0 {
				t.Fatalf("Hold %d right after the one before waited %v; want no wait", i, waited)
			}
		}
	})
}

// TestR17LeftWaiterGivesBackAtOnce: on a store that acquires one key at
// a time, a look whose keys are answered one by one gives back the grant
// of a waiter that left as soon as that grant is answered, not when the
// look's slowest key is: until then the key would be held by nobody.
func TestR17LeftWaiterGivesBackAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := NewMemoryDriver()
		slow := &slowAcquire{Store: loopStore(t, d, "alice"), key: "slow", unblock: make(chan struct{})}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan []HoldResult)
		go func() {
			var rs []HoldResult
			for r := range HoldEach(ctx, slow, []string{"fast", "slow"}) {
				rs = append(rs, r)
			}
			done <- rs
		}()
		synctest.Wait() // "fast" is acquired; the look waits for "slow"
		cancel()
		for _, r := range <-done {
			if r.Err == nil {
				t.Errorf("HoldEach yielded %q after its context ended", r.Key)
			}
		}
		synctest.Wait()
		if rec, _, err := d.Get(t.Context(), "fast"); err != nil || !rec.Released {
			t.Errorf("fast: %+v, %v while the look still waits for slow; want it given back", rec, err)
		}
		close(slow.unblock)
		synctest.Wait() // slow's grant is given back too before the store closes
		if rec, _, err := d.Get(t.Context(), "slow"); err != nil || !rec.Released {
			t.Errorf("slow: %+v, %v once its look ended; want it given back", rec, err)
		}
	})
}

// slowAcquire is a Store that acquires one key at a time (it cannot
// batch), and whose Acquire of key waits until unblock closes.
type slowAcquire struct {
	Store
	key     string
	unblock chan struct{}
}

func (s *slowAcquire) Acquire(ctx context.Context, key string) (Grant, error) {
	if key == s.key {
		<-s.unblock
	}
	return s.Store.Acquire(ctx, key)
}

// TestHoldEachStopsAndGivesBack: stopping a HoldEach early keeps what was
// yielded and gives back nothing the caller did not see.
func TestHoldEachStopsAndGivesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := loopStore(t, NewMemoryDriver(), "alice")
		var first *Held
		for r := range HoldEach(t.Context(), s, []string{"a", "b", "c"}) {
			if r.Err != nil {
				t.Fatalf("first result = %v; want a Held", r.Err)
			}
			first = r.Held
			break
		}
		synctest.Wait()
		if first == nil || first.Context().Err() != nil {
			t.Fatal("the yielded Held is not live")
		}
		n := 0
		for rec, err := range s.Holders(t.Context(), "") {
			if err != nil {
				t.Fatal(err)
			}
			if rec.Key != first.key {
				t.Errorf("%q still held after HoldEach stopped", rec.Key)
			}
			n++
		}
		if n != 1 {
			t.Errorf("%d keys held; want only the yielded one", n)
		}
	})
}

// TestHoldEachRejectsBadKeys: an invalid or repeated key gets its own
// error and costs the other keys nothing.
func TestHoldEachRejectsBadKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := loopStore(t, NewMemoryDriver(), "alice")
		errs := map[string]error{}
		held := 0
		for r := range HoldEach(t.Context(), s, []string{"a", "bad//key", "a", "b"}) {
			if r.Err != nil {
				errs[r.Key] = r.Err
				continue
			}
			held++
		}
		if held != 2 || !errors.Is(errs["bad//key"], ErrInvalidKey) || errs["a"] == nil {
			t.Errorf("held %d, errors %v; want a and b held, bad//key invalid, the second a refused", held, errs)
		}
	})
}

// wrappingStore is a caller's Store around one of ours (for metrics or
// logging) that says what it wraps.
type wrappingStore struct{ Store }

func (w wrappingStore) Unwrap() Store { return w.Store }

// TestR16WrapperKeepsBatchingAndClose: a Store that wraps one of ours and
// implements Unwrapper keeps the batched renewals (one batched write per
// renewal period) and R15 (Close through the wrapper ends its Helds).
func TestR16WrapperKeepsBatchingAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newCountingDriver()
		w := wrappingStore{loopStore(t, d, "alice")}
		var hs []*Held
		for i := range 100 {
			hs = append(hs, mustHold(t, w, fmt.Sprintf("p/%d", i)))
		}
		d.trips()
		const periods = 3
		time.Sleep(periods * holdTTL / 3)
		if single, batched := d.trips(); single > 0 || batched > 2*periods {
			t.Errorf("through a wrapper: %d one-key and %d batched round trips in %d renewal periods; want batched only, about one write per period",
				single, batched, periods)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if !errors.Is(context.Cause(h.Context()), ErrClosed) {
				t.Fatalf("%s still live after Close through the wrapper", h.key)
			}
		}
	})
}

// TestR16ForeignStoreOneKeeper: Holds through a Store of a type this
// package does not ship, racing their Releases, never end up with two
// keepers for one store: a second Hold of a key waits for the first.
func TestR16ForeignStoreOneKeeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := plainStore{loopStore(t, NewMemoryDriver(), "alice")}
		var live sync.Map
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				for range 20 {
					h, err := Hold(t.Context(), s, "k")
					if err != nil {
						t.Error(err)
						return
					}
					if other, dup := live.LoadOrStore("k", i); dup {
						t.Errorf("two live Helds of one key in one store (goroutines %v and %d)", other, i)
					}
					time.Sleep(time.Millisecond)
					live.Delete("k")
					if err := h.Release(t.Context()); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
	})
}

// writerDriver is the memory driver behind one writer, as SQLite is: every
// write holds the writer for perKey per record, reads cost a tenth of that
// and take no lock.
type writerDriver struct {
	*memoryDriver
	perKey time.Duration
	writer chan struct{} // one token: a channel, since synctest sees a goroutine blocked on it as idle
}

func (d *writerDriver) write(n int) func() {
	d.writer <- struct{}{}
	time.Sleep(time.Duration(n) * d.perKey)
	return func() { <-d.writer }
}

func (d *writerDriver) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	defer d.write(1)()
	return d.memoryDriver.Put(ctx, rec, pre)
}

func (d *writerDriver) PutMany(ctx context.Context, ws []Write) ([]PutResult, error) {
	defer d.write(len(ws))()
	return d.memoryDriver.PutMany(ctx, ws)
}

func (d *writerDriver) GetMany(ctx context.Context, keys []string) ([]GetResult, error) {
	time.Sleep(time.Duration(len(keys)) * d.perKey / 10)
	return d.memoryDriver.GetMany(ctx, keys)
}

// TestRenewalsFirstDuringStartUp: R17. While a 10,000-key HoldEach takes
// a slow single-writer store's writer, the Helds already held keep their
// renewal schedule: none comes within its safety margin, none is lost.
func TestRenewalsFirstDuringStartUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &writerDriver{memoryDriver: NewMemoryDriver().(*memoryDriver), perKey: 50 * time.Microsecond, writer: make(chan struct{}, 1)}
		s := loopStore(t, d, "alice")
		var early []*Held
		for i := range 100 {
			early = append(early, mustHold(t, s, fmt.Sprintf("early/%d", i)))
		}
		keys := make([]string, 10000)
		for i := range keys {
			keys[i] = fmt.Sprintf("late/%05d", i)
		}
		start := time.Now()
		n := 0
		for r := range HoldEach(t.Context(), s, keys) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			n++
		}
		t.Logf("HoldEach of %d keys took %v of virtual time at %v per written key", n, time.Since(start), d.perKey)
		for _, h := range early {
			if err := h.Context().Err(); err != nil {
				t.Fatalf("%s lost during start-up: %v", h.key, context.Cause(h.Context()))
			}
			if left := time.Until(h.Grant().ExpiresAt); left < h.margin {
				t.Errorf("%s came within its safety margin: %v left", h.key, left)
			}
		}
	})
}
