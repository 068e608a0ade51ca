package lease

import (
	"slices"
	"strings"
	"time"
)

// round is a set of Helds of one store that share their next renewal and
// their deadline: the Helds that one call renewed or acquired together,
// whose grants expire at one time. The keeper schedules rounds rather
// than Helds, so that keeping N keys costs a schedule entry per call, not
// per key, and moving a Held to its next round is an append.
//
// A round is in the keeper's dues while it has members not yet taken for
// renewal, and in its deadlines while it has members at all. A member
// taken for renewal stays in its round, bound by its deadline, until its
// renewal's answer moves it to a round of its own or ends it.
type round struct {
	due      time.Time     // its members' next renewal, on the monotonic clock
	deadline time.Time     // when its members must stop working, monotonic
	renew    time.Duration // its members' renewal interval
	members  []*Held       // nil where a Held left
	live     int           // members that are not nil
	taken    int           // members[:taken] have been taken for renewal
	unsorted bool          // members are not in key order
	lastKey  string        // the key of the member that joined last

	dueMark, expiryMark uint64 // marks of k.dues and k.deadlines (schedule)
}

// joinLocked moves h to the round of due and deadline: the round the
// keeper made last when it matches and none of it was taken yet, else a
// new one, sized for k.roundSize Helds. Helds answered by one call are
// scheduled one after the other with equal times, so they make one round.
func (k *keeper) joinLocked(h *Held, due, deadline time.Time) {
	k.leaveLocked(h)
	r := k.lastRound
	if r == nil || r.live == 0 || r.taken > 0 || r.renew != h.renew || !r.due.Equal(due) || !r.deadline.Equal(deadline) {
		r = &round{due: due, deadline: deadline, renew: h.renew, members: make([]*Held, 0, max(k.roundSize, 1))}
		k.lastRound = r
		k.dues.Set(r)
		k.deadlines.Set(r)
	}
	if len(r.members) > 0 && h.key < r.lastKey {
		r.unsorted = true
	}
	r.lastKey = h.key
	h.round, h.slot = r, len(r.members)
	r.members = append(r.members, h)
	r.live++
}

// leaveLocked takes h out of its round; a round left empty leaves the
// schedules.
func (k *keeper) leaveLocked(h *Held) {
	r := h.round
	if r == nil {
		return
	}
	r.members[h.slot], h.round = nil, nil
	if r.live--; r.live == 0 {
		k.dues.Remove(r)
		k.deadlines.Remove(r)
		r.members = nil
		if k.lastRound == r {
			k.lastRound = nil
		}
	}
}

// takeLocked appends to batch, up to limit, the members of r not yet
// taken and not already being renewed (a Confirm moved them here while a
// renewal was in flight), and marks them renewing. Once every member is
// taken, r leaves the dues.
func (k *keeper) takeLocked(r *round, batch []*Held, limit int) []*Held {
	for r.taken < len(r.members) && len(batch) < limit {
		h := r.members[r.taken]
		r.taken++
		if h != nil && !h.renewing {
			h.renewing = true
			batch = append(batch, h)
		}
	}
	if r.taken == len(r.members) {
		k.dues.Remove(r)
	}
	return batch
}

// deadlineLocked is when h must stop working; zero when it is in no round
// (its grant never expires, or it ended).
func (h *Held) deadlineLocked() time.Time {
	if h.round == nil {
		return time.Time{}
	}
	return h.round.deadline
}

// keyRun is the Helds of wave[start:end], taken from one round.
type keyRun struct {
	start, end int
	unsorted   bool
}

// inKeyOrder returns wave in key order. Its runs, taken each from one
// round, are mostly in key order already and cover ranges of keys that do
// not overlap (rounds made by calls that were in key order): ordering the
// runs by their first keys is then enough. Otherwise it sorts the wave.
func (k *keeper) inKeyOrder(wave []*Held, runs []keyRun) []*Held {
	if len(runs) <= 1 {
		if len(runs) == 1 && runs[0].unsorted {
			slices.SortFunc(wave, byKey)
		}
		return wave
	}
	sortable := true
	for _, r := range runs {
		sortable = sortable && !r.unsorted
	}
	if sortable {
		for i := 1; i < len(runs); i++ { // by first key; a wave has a few runs
			for j := i; j > 0 && wave[runs[j].start].key < wave[runs[j-1].start].key; j-- {
				runs[j], runs[j-1] = runs[j-1], runs[j]
			}
		}
		for i := 1; i < len(runs) && sortable; i++ {
			sortable = wave[runs[i-1].end-1].key < wave[runs[i].start].key
		}
	}
	if !sortable {
		slices.SortFunc(wave, byKey)
		return wave
	}
	ordered := k.ordered[:0]
	for _, r := range runs {
		ordered = append(ordered, wave[r.start:r.end]...)
	}
	clear(wave)
	k.ordered = wave[:0] // the arrays swap: each turn fills the other
	return ordered
}

// byKey orders Helds by key.
func byKey(a, b *Held) int { return strings.Compare(a.key, b.key) }
