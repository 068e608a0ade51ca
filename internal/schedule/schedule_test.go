package schedule

import (
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestScheduleOrder: whatever items are set, moved and removed, the
// schedule pops them earliest first (of equal times, the one set first),
// never an item that is not scheduled,
// knows which items are scheduled (each item's index names its own
// entry), and first agrees with pop.
func TestScheduleOrder(t *testing.T) {
	type item struct {
		at    time.Time
		index int
		set   int // when it was last set
	}
	rapid.Check(t, func(t *rapid.T) {
		base := time.Unix(1000, 0)
		items := make([]*item, rapid.IntRange(1, 40).Draw(t, "items"))
		for i := range items {
			items[i] = &item{}
		}
		s := New(func(x *item) time.Time { return x.at }, func(x *item) *int { return &x.index })
		in := map[*item]bool{}
		sets := 0
		for range rapid.IntRange(0, 200).Draw(t, "steps") {
			x := items[rapid.IntRange(0, len(items)-1).Draw(t, "item")]
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op == 9:
				s.Clear()
				clear(in)
			case op < 5:
				x.at = base.Add(time.Duration(rapid.IntRange(0, 20).Draw(t, "at")) * time.Second)
				s.Set(x)
				sets++
				x.set, in[x] = sets, true
			case op < 7:
				s.Remove(x)
				delete(in, x)
			default:
				if s.Len() == 0 {
					continue
				}
				first, _ := s.First()
				got := s.Pop()
				if got != first {
					t.Fatalf("first %p, pop %p", first, got)
				}
				for y := range in {
					if y.at.Before(got.at) {
						t.Fatalf("popped %v before %v", got.at, y.at)
					}
					if y.at.Equal(got.at) && y.set < got.set {
						t.Fatalf("popped the item set %d-th before the one set %d-th, of equal times", got.set, y.set)
					}
				}
				delete(in, got)
			}
			if s.Len() != len(in) {
				t.Fatalf("len %d, want %d", s.Len(), len(in))
			}
			for i, e := range s.h.items {
				if i > 0 && s.h.Less(i, (i-1)/2) {
					t.Fatalf("entry %d before its parent", i)
				}
				if e.x.index != i+1 {
					t.Fatalf("entry %d: its item's index is %d", i, e.x.index)
				}
				if !in[e.x] || !e.at.Equal(e.x.at) {
					t.Fatalf("entry %d: for an item scheduled %v, at %v (item's %v)", i, in[e.x], e.at, e.x.at)
				}
			}
			for _, y := range items {
				if s.Scheduled(y) != in[y] {
					t.Fatalf("scheduled %v, want %v", s.Scheduled(y), in[y])
				}
			}
		}
	})
}

// TestScheduleLargeOrder: in heaps of thousands of entries (a store's
// waiting keys, its rounds), with times all equal, repeating or apart, pops come earliest
// first and, of equal times, in the order set; removing and moving items
// between pops keeps it so.
func TestScheduleLargeOrder(t *testing.T) {
	type item struct {
		at    time.Time
		index int
		set   int
	}
	r := rand.New(rand.NewPCG(1, 2))
	base := time.Unix(1000, 0)
	for _, c := range []struct {
		n, times int
		moves    bool
	}{
		{443, 1, false}, {2000, 1, true}, {1000, 250, true}, {10000, 2500, false}, {10000, 2500, true},
		{2605, 1e6, false}, {10000, 1e6, true},
	} {
		n := c.n
		s := New(func(x *item) time.Time { return x.at }, func(x *item) *int { return &x.index })
		items := make([]*item, n)
		for i := range items {
			items[i] = &item{}
		}
		sets := 0
		set := func(x *item) {
			x.at = base.Add(time.Duration(r.IntN(c.times)) * time.Millisecond)
			s.Set(x)
			sets++
			x.set = sets
		}
		for _, x := range items {
			set(x)
		}
		if c.moves {
			for _, x := range items[:n/10] {
				set(x) // moved
			}
			for _, x := range items[n/10 : n/5] {
				s.Remove(x)
			}
		}
		var last *item
		for s.Len() > 0 {
			x := s.Pop()
			if last != nil && (x.at.Before(last.at) || x.at.Equal(last.at) && x.set < last.set) {
				t.Fatalf("n=%d: popped (%v, set %d) after (%v, set %d)", n, x.at.Sub(base), x.set, last.at.Sub(base), last.set)
			}
			last = x
		}
	}
}
