package lease

import "time"

// schedule is a 4-ary min-heap of items by a time each item keeps, such as a
// Held's next renewal or a waiter's next look. It costs O(log n) to add,
// move or remove an item, so that the keeper's work per wake does not grow
// with the number of keys it keeps (client-go's delaying queue does the
// same). Each entry carries its item's time, read when the item is set, so
// that sifting compares within the heap's own array instead of following a
// pointer per comparison, and four children per entry halve the levels a
// sift moves through (each move tells an item its slot: a write through a
// pointer); each item remembers its own position through slot.
type schedule[T comparable] struct {
	items []scheduled[T]
	when  func(T) time.Time
	slot  func(T) *int // the item's index + 1; 0 while not scheduled
}

// scheduleArity is how many children an entry of a schedule has.
const scheduleArity = 4

// scheduled is one entry of a schedule: an item and its time when set.
type scheduled[T any] struct {
	at time.Time
	x  T
}

func newSchedule[T comparable](when func(T) time.Time, slot func(T) *int) *schedule[T] {
	return &schedule[T]{when: when, slot: slot}
}

// set schedules x, or moves it after its time changed.
func (s *schedule[T]) set(x T) {
	at := s.when(x)
	if i := *s.slot(x) - 1; i >= 0 {
		s.items[i].at = at
		if !s.down(i) {
			s.up(i)
		}
		return
	}
	s.items = append(s.items, scheduled[T]{at: at, x: x})
	n := len(s.items) - 1
	*s.slot(x) = n + 1
	s.up(n)
}

// remove unschedules x, if it is scheduled.
func (s *schedule[T]) remove(x T) {
	if i := *s.slot(x) - 1; i >= 0 {
		s.removeAt(i)
	}
}

// first returns the item with the earliest time.
func (s *schedule[T]) first() (x T, ok bool) {
	if len(s.items) == 0 {
		return x, false
	}
	return s.items[0].x, true
}

// pop removes and returns the item with the earliest time.
func (s *schedule[T]) pop() T {
	x := s.items[0].x
	s.removeAt(0)
	return x
}

func (s *schedule[T]) len() int { return len(s.items) }

// clear unschedules every item.
func (s *schedule[T]) clear() {
	for _, e := range s.items {
		*s.slot(e.x) = 0
	}
	clear(s.items)
	s.items = s.items[:0]
}

// removeAt takes the entry at i out of the heap.
func (s *schedule[T]) removeAt(i int) {
	last := len(s.items) - 1
	*s.slot(s.items[i].x) = 0
	if i != last {
		s.move(last, i)
	}
	s.items[last] = scheduled[T]{}
	s.items = s.items[:last]
	if i != last {
		if !s.down(i) {
			s.up(i)
		}
	}
}

// move puts the entry at from into place to, and tells its item.
func (s *schedule[T]) move(from, to int) {
	s.items[to] = s.items[from]
	*s.slot(s.items[to].x) = to + 1
}

// up sifts the entry at i towards the root.
func (s *schedule[T]) up(i int) {
	e := s.items[i]
	for i > 0 {
		parent := (i - 1) / scheduleArity
		if !e.at.Before(s.items[parent].at) {
			break
		}
		s.move(parent, i)
		i = parent
	}
	s.items[i] = e
	*s.slot(e.x) = i + 1
}

// down sifts the entry at i towards the leaves and reports whether it
// moved.
func (s *schedule[T]) down(i int) bool {
	start, e, n := i, s.items[i], len(s.items)
	for {
		child := scheduleArity*i + 1
		if child >= n {
			break
		}
		for c := child + 1; c < min(child+scheduleArity, n); c++ {
			if s.items[c].at.Before(s.items[child].at) {
				child = c
			}
		}
		if !s.items[child].at.Before(e.at) {
			break
		}
		s.move(child, i)
		i = child
	}
	s.items[i] = e
	*s.slot(e.x) = i + 1
	return i > start
}
