package lease

// renewScratch is the memory one batched renewal call works in, for up to
// maxBatch keys: the keeper's Helds, grants and tickets, and the store's
// locks, writes and answers. The keeper keeps one per renewal call it may
// have in flight for its next calls, so that renewing N keys every period
// does not allocate N-sized slices each time (each a fresh large
// allocation: pages to fault in and clear, then to give back).
type renewScratch struct {
	helds   []*Held
	grants  []Grant
	tickets []*heldGrant
	out     []grantResult
	keys    []string
	ok      []bool
	taken   []*keyLock
	idx     []int
	batch   []batchWrite
	ws      []Write
	errs    []error
}

// sized returns s cleared, with length n, reusing its array when it is
// large enough.
func sized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// scratchLocked returns a renewal call's scratch: a kept one, or a new
// one. k.mu must be held.
func (k *keeper) scratchLocked() *renewScratch {
	if n := len(k.scratch); n > 0 {
		sc := k.scratch[n-1]
		k.scratch = k.scratch[:n-1]
		return sc
	}
	return &renewScratch{}
}

// keepScratchLocked keeps sc for a later renewal call, unless enough are
// kept. k.mu must be held.
func (k *keeper) keepScratchLocked(sc *renewScratch) {
	if len(k.scratch) < maxRenewCalls {
		k.scratch = append(k.scratch, sc)
	}
}
