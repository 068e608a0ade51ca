package lease

import (
	"container/heap"
	"time"
)

// schedule is a min-heap of items by a time each item keeps, such as a
// Held's next renewal or a waiter's next look. It costs O(log n) to add,
// move or remove an item, so that the keeper's work per wake does not grow
// with the number of keys it keeps (client-go's delaying queue does the
// same). Each item remembers its own position through slot.
type schedule[T comparable] struct {
	items []T
	when  func(T) time.Time
	slot  func(T) *int // the item's index + 1; 0 while not scheduled
}

func newSchedule[T comparable](when func(T) time.Time, slot func(T) *int) *schedule[T] {
	return &schedule[T]{when: when, slot: slot}
}

// set schedules x, or moves it after its time changed.
func (s *schedule[T]) set(x T) {
	if i := *s.slot(x); i > 0 {
		heap.Fix((*scheduleHeap[T])(s), i-1)
		return
	}
	heap.Push((*scheduleHeap[T])(s), x)
}

// remove unschedules x, if it is scheduled.
func (s *schedule[T]) remove(x T) {
	if i := *s.slot(x); i > 0 {
		heap.Remove((*scheduleHeap[T])(s), i-1)
	}
}

// first returns the item with the earliest time.
func (s *schedule[T]) first() (x T, ok bool) {
	if len(s.items) == 0 {
		return x, false
	}
	return s.items[0], true
}

// pop removes and returns the item with the earliest time.
func (s *schedule[T]) pop() T {
	return heap.Pop((*scheduleHeap[T])(s)).(T)
}

func (s *schedule[T]) len() int { return len(s.items) }

// clear unschedules every item.
func (s *schedule[T]) clear() {
	for _, x := range s.items {
		*s.slot(x) = 0
	}
	clear(s.items)
	s.items = s.items[:0]
}

// scheduleHeap is schedule as a container/heap.Interface.
type scheduleHeap[T comparable] schedule[T]

func (h *scheduleHeap[T]) Len() int { return len(h.items) }

func (h *scheduleHeap[T]) Less(i, j int) bool {
	return h.when(h.items[i]).Before(h.when(h.items[j]))
}

func (h *scheduleHeap[T]) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.slot(h.items[i]) = i + 1
	*h.slot(h.items[j]) = j + 1
}

func (h *scheduleHeap[T]) Push(x any) {
	h.items = append(h.items, x.(T))
	*h.slot(x.(T)) = len(h.items)
}

func (h *scheduleHeap[T]) Pop() any {
	n := len(h.items) - 1
	x := h.items[n]
	var zero T
	h.items[n] = zero
	h.items = h.items[:n]
	*h.slot(x) = 0
	return x
}
