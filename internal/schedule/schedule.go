// Package schedule is the queue by time of package lease's Hold loop (its
// keeper): renewals, deadlines and looks, with O(log n) moves and removes.
package schedule

import (
	"container/heap"
	"time"
)

// Schedule is a min-heap (container/heap) of items by a time each item
// keeps, such as a round's next renewal or a waiter's next look. Each item
// keeps its place in the heap (index), as client-go's delaying queue
// does, so that moving or removing it costs O(log n) and the keeper's work
// per wake does not grow with the number of keys it keeps.
//
// Items of equal times come out in the order they were set (a HoldEach's
// keys, in key order; rounds made one after the other), so that what the
// keeper takes together lies together.
type Schedule[T comparable] struct {
	h entries[T]
}

// New returns an empty schedule of items whose time when reads, and whose
// place in the schedule (an int the schedule keeps in each item: its
// index plus one, 0 while it is not scheduled) index returns.
func New[T comparable](when func(T) time.Time, index func(T) *int) *Schedule[T] {
	return &Schedule[T]{h: entries[T]{when: when, index: index}}
}

// Set schedules x at its time, or moves it there.
func (s *Schedule[T]) Set(x T) {
	s.h.sets++
	if i := *s.h.index(x) - 1; i >= 0 {
		s.h.items[i].at, s.h.items[i].seq = s.h.when(x), s.h.sets
		heap.Fix(&s.h, i)
		return
	}
	heap.Push(&s.h, entry[T]{x: x, at: s.h.when(x), seq: s.h.sets})
}

// Remove unschedules x, if it is scheduled.
func (s *Schedule[T]) Remove(x T) {
	if i := *s.h.index(x) - 1; i >= 0 {
		heap.Remove(&s.h, i)
	}
}

// Scheduled reports whether x is scheduled.
func (s *Schedule[T]) Scheduled(x T) bool { return *s.h.index(x) > 0 }

// First returns the item with the earliest time.
func (s *Schedule[T]) First() (x T, ok bool) {
	if len(s.h.items) == 0 {
		return x, false
	}
	return s.h.items[0].x, true
}

// Pop removes and returns the item with the earliest time; the schedule
// must not be empty.
func (s *Schedule[T]) Pop() T {
	return heap.Pop(&s.h).(entry[T]).x
}

// Len returns how many items are scheduled.
func (s *Schedule[T]) Len() int { return len(s.h.items) }

// Clear unschedules every item.
func (s *Schedule[T]) Clear() {
	for _, e := range s.h.items {
		*s.h.index(e.x) = 0
	}
	s.h.items = nil
}

// entry is one item of a schedule, with its time when it was set and its
// place among the sets (earlier sets first when times are equal).
type entry[T any] struct {
	x   T
	at  time.Time
	seq uint64
}

// entries is a schedule's heap.Interface.
type entries[T any] struct {
	items []entry[T]
	sets  uint64 // sets so far: the next set's seq
	when  func(T) time.Time
	index func(T) *int
}

func (h *entries[T]) Len() int { return len(h.items) }

func (h *entries[T]) Less(i, j int) bool {
	a, b := &h.items[i], &h.items[j]
	return a.at.Before(b.at) || a.at.Equal(b.at) && a.seq < b.seq
}

func (h *entries[T]) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.index(h.items[i].x), *h.index(h.items[j].x) = i+1, j+1
}

func (h *entries[T]) Push(x any) {
	e := x.(entry[T])
	*h.index(e.x) = len(h.items) + 1
	h.items = append(h.items, e)
}

func (h *entries[T]) Pop() any {
	last := len(h.items) - 1
	e := h.items[last]
	h.items[last] = entry[T]{}
	h.items = h.items[:last]
	if last == 0 {
		h.items = nil // give back what a burst of keys grew
	}
	*h.index(e.x) = 0
	return e
}
