// Package schedule is the queue by time of package lease's Hold loop (its
// keeper): renewals, deadlines and looks, with O(log n) moves and removes.
package schedule

import "time"

// Schedule is a 4-ary min-heap of items by a time each item keeps, such as
// a Held's next renewal or a waiter's next look. It costs O(log n) to add,
// move or remove an item, so that the keeper's work per wake does not grow
// with the number of keys it keeps (client-go's delaying queue does the
// same).
//
// Moving or removing an item leaves its old entry in the heap, stale, to be
// dropped when it comes to the top: an item's mark (mark) counts its sets
// and removes, odd while it is scheduled, and an entry is current while it
// carries its item's mark. Sifting thus never writes through an item's
// pointer, and each entry carries its item's time, so comparisons stay
// within the heap's own array; four children per entry halve the levels.
// The keeper moves each Held's renewal and deadline later at every
// renewal, which here is an append that rarely sifts. A stale entry still
// points at its item, so when stale entries outnumber three per item (plus
// a slack), compact drops them all: after a ReleaseAll, say, the ended
// Helds are not kept alive until their old times come up.
//
// Items of equal times come out in the order they were set (a HoldEach's
// keys, in key order; rounds made one after the other), so that what the
// keeper takes together lies together.
type Schedule[T comparable] struct {
	items []scheduled[T]
	n     int    // current entries: the items scheduled
	slack int    // stale entries allowed beyond 3n before compact
	sets  uint64 // entries made so far: the next entry's seq
	when  func(T) time.Time
	mark  func(T) *uint64
}

// Scheduled is one entry of a schedule: an item, its time, its mark when
// it was set, and its place among the entries (earlier entries first when
// times are equal).
type scheduled[T any] struct {
	at   time.Time
	x    T
	mark uint64
	seq  uint64
}

// before reports whether e comes out of the schedule before o.
func (e *scheduled[T]) before(o *scheduled[T]) bool {
	return e.at.Before(o.at) || e.at.Equal(o.at) && e.seq < o.seq
}

// scheduleArity is how many children an entry of a schedule has.
const scheduleArity = 4

// New returns an empty schedule of items whose time when reads, and whose
// mark (a counter the schedule keeps in each item, zero at first) mark
// returns.
func New[T comparable](when func(T) time.Time, mark func(T) *uint64) *Schedule[T] {
	return &Schedule[T]{when: when, mark: mark, slack: 1024}
}

// Set schedules x at its time, or moves it there.
func (s *Schedule[T]) Set(x T) {
	m := s.mark(x)
	if *m%2 == 1 {
		*m += 2 // its entry goes stale
	} else {
		*m++
		s.n++
	}
	s.sets++
	s.items = append(s.items, scheduled[T]{at: s.when(x), x: x, mark: *m, seq: s.sets})
	s.up(len(s.items) - 1)
	s.compactIfStale()
}

// Remove unschedules x, if it is scheduled.
func (s *Schedule[T]) Remove(x T) {
	if m := s.mark(x); *m%2 == 1 {
		*m++
		s.n--
		s.compactIfStale()
	}
}

// Scheduled reports whether x is scheduled.
func (s *Schedule[T]) Scheduled(x T) bool { return *s.mark(x)%2 == 1 }

// First returns the item with the earliest time.
func (s *Schedule[T]) First() (x T, ok bool) {
	s.dropStale()
	if len(s.items) == 0 {
		return x, false
	}
	return s.items[0].x, true
}

// Pop removes and returns the item with the earliest time; the schedule
// must not be empty.
func (s *Schedule[T]) Pop() T {
	s.dropStale()
	x := s.items[0].x
	*s.mark(x)++
	s.n--
	s.removeTop()
	s.compactIfStale()
	return x
}

// Len returns how many items are scheduled.
func (s *Schedule[T]) Len() int { return s.n }

// Clear unschedules every item.
func (s *Schedule[T]) Clear() {
	for _, e := range s.items {
		if m := s.mark(e.x); *m == e.mark {
			*m++
		}
	}
	clear(s.items)
	s.items, s.n = s.items[:0], 0
}

// compactIfStale drops every stale entry once there are more than 3n
// plus slack of them: each compaction follows at least that many sets and
// removes, so it costs O(1) per operation.
func (s *Schedule[T]) compactIfStale() {
	if len(s.items)-s.n <= 3*s.n+s.slack {
		return
	}
	kept := make([]scheduled[T], 0, 2*s.n)
	for _, e := range s.items {
		if *s.mark(e.x) == e.mark {
			kept = append(kept, e)
		}
	}
	s.items = kept
	if len(kept) > 1 {
		for i := (len(kept) - 2) / scheduleArity; i >= 0; i-- {
			s.down(i)
		}
	}
}

// dropStale removes stale entries from the top of the heap.
func (s *Schedule[T]) dropStale() {
	for len(s.items) > 0 && *s.mark(s.items[0].x) != s.items[0].mark {
		s.removeTop()
	}
}

// removeTop takes the top entry out of the heap.
func (s *Schedule[T]) removeTop() {
	last := len(s.items) - 1
	s.items[0] = s.items[last]
	s.items[last] = scheduled[T]{}
	s.items = s.items[:last]
	if last > 0 {
		s.down(0)
	}
	if cap(s.items) > 64 && len(s.items) < cap(s.items)/4 {
		s.items = append([]scheduled[T](nil), s.items...) // give back what a burst of keys grew
	}
}

// up sifts the entry at i towards the root.
func (s *Schedule[T]) up(i int) {
	e := s.items[i]
	for i > 0 {
		parent := (i - 1) / scheduleArity
		if !e.before(&s.items[parent]) {
			break
		}
		s.items[i] = s.items[parent]
		i = parent
	}
	s.items[i] = e
}

// down sifts the entry at i towards the leaves.
func (s *Schedule[T]) down(i int) {
	e, n := s.items[i], len(s.items)
	for {
		child := scheduleArity*i + 1
		if child >= n {
			break
		}
		last := min(child+scheduleArity, n) // i's children are child..last-1
		for c := child + 1; c < last; c++ {
			if s.items[c].before(&s.items[child]) {
				child = c
			}
		}
		if !s.items[child].before(&e) {
			break
		}
		s.items[i] = s.items[child]
		i = child
	}
	s.items[i] = e
}
