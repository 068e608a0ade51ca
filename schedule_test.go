package lease

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestScheduleOrder: whatever items are set, moved and removed, the
// schedule pops them earliest first, knows each item's slot, and first
// agrees with pop.
func TestScheduleOrder(t *testing.T) {
	type item struct {
		at   time.Time
		slot int
	}
	rapid.Check(t, func(t *rapid.T) {
		base := time.Unix(1000, 0)
		items := make([]*item, rapid.IntRange(1, 40).Draw(t, "items"))
		for i := range items {
			items[i] = &item{}
		}
		s := newSchedule(func(x *item) time.Time { return x.at }, func(x *item) *int { return &x.slot })
		in := map[*item]bool{}
		for range rapid.IntRange(0, 200).Draw(t, "steps") {
			x := items[rapid.IntRange(0, len(items)-1).Draw(t, "item")]
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0, 1:
				x.at = base.Add(time.Duration(rapid.IntRange(0, 20).Draw(t, "at")) * time.Second)
				s.set(x)
				in[x] = true
			case 2:
				s.remove(x)
				delete(in, x)
			case 3:
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
			for i, e := range s.items {
				if e.x.slot != i+1 || !e.at.Equal(e.x.at) {
					t.Fatalf("entry %d: slot %d, at %v (item's %v)", i, e.x.slot, e.at, e.x.at)
				}
				if i > 0 && e.at.Before(s.items[(i-1)/scheduleArity].at) {
					t.Fatalf("entry %d before its parent", i)
				}
			}
			for _, y := range items {
				if !in[y] && y.slot != 0 {
					t.Fatalf("an unscheduled item has slot %d", y.slot)
				}
			}
		}
	})
}
