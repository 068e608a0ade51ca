package lease

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestScheduleOrder: whatever items are set, moved and removed, the
// schedule pops them earliest first, never an item that is not scheduled,
// knows which items are scheduled, first agrees with pop, and stale
// entries never outnumber three per item plus the slack.
func TestScheduleOrder(t *testing.T) {
	type item struct {
		at   time.Time
		mark uint64
	}
	rapid.Check(t, func(t *rapid.T) {
		base := time.Unix(1000, 0)
		items := make([]*item, rapid.IntRange(1, 40).Draw(t, "items"))
		for i := range items {
			items[i] = &item{}
		}
		s := newSchedule(func(x *item) time.Time { return x.at }, func(x *item) *uint64 { return &x.mark })
		s.slack = rapid.IntRange(0, 8).Draw(t, "slack") // small, so that compactions happen
		in := map[*item]bool{}
		for range rapid.IntRange(0, 200).Draw(t, "steps") {
			x := items[rapid.IntRange(0, len(items)-1).Draw(t, "item")]
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op == 9:
				s.clear()
				clear(in)
			case op < 5:
				x.at = base.Add(time.Duration(rapid.IntRange(0, 20).Draw(t, "at")) * time.Second)
				s.set(x)
				in[x] = true
			case op < 7:
				s.remove(x)
				delete(in, x)
			default:
				if s.len() == 0 {
					continue
				}
				first, _ := s.first()
				got := s.pop()
				if got != first {
					t.Fatalf("first %p, pop %p", first, got)
				}
				for y := range in {
					if y.at.Before(got.at) {
						t.Fatalf("popped %v before %v", got.at, y.at)
					}
				}
				delete(in, got)
			}
			if s.len() != len(in) {
				t.Fatalf("len %d, want %d", s.len(), len(in))
			}
			current := 0
			for i, e := range s.items {
				if i > 0 && e.at.Before(s.items[(i-1)/scheduleArity].at) {
					t.Fatalf("entry %d before its parent", i)
				}
				if e.mark != e.x.mark {
					continue // stale
				}
				current++
				if !in[e.x] || !e.at.Equal(e.x.at) {
					t.Fatalf("entry %d: current for an item scheduled %v, at %v (item's %v)", i, in[e.x], e.at, e.x.at)
				}
			}
			if stale := len(s.items) - current; stale > 3*current+s.slack {
				t.Fatalf("%d stale entries beside %d current ones (slack %d)", stale, current, s.slack)
			}
			if current != len(in) {
				t.Fatalf("%d current entries, want %d", current, len(in))
			}
			for _, y := range items {
				if s.scheduled(y) != in[y] {
					t.Fatalf("scheduled %v, want %v", s.scheduled(y), in[y])
				}
			}
		}
	})
}
