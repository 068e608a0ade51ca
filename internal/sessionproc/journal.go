//go:build unix && !aix

package sessionproc

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The journal is the independent record of who held what: one file that
// every node appends to (O_APPEND), one line per event,
//
//	MONO EVENT OWNER KEY EPOCH
//
// MONO being CLOCK_MONOTONIC in nanoseconds when the event happened, one
// clock for both processes. The events:
//
//	take  the node is about to send the write that takes KEY at EPOCH
//	      (before its driver call: it holds the key no earlier)
//	got   its Hold yielded the Held of KEY
//	end   its Held of KEY is over: released (written after ReleaseAll
//	      returned: it holds the key no later)
//	lost  its Held of KEY ended otherwise (its Context ended)
//	kill  the node was SIGKILLed (KEY "-"; written once the process is
//	      gone: it held nothing later)
//
// A write of several lines is one write(2) of one buffer, which O_APPEND
// keeps whole.

// Journal events.
const (
	evTake = "take"
	evGot  = "got"
	evEnd  = "end"
	evLost = "lost"
	evKill = "kill"
	noKey  = "-" // the key of a line about a whole node
)

// journal is a node's handle on the shared journal.
type journal struct{ f *os.File }

func openJournal(path string) (*journal, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &journal{f: f}, nil
}

func (j *journal) Close() error { return j.f.Close() }

// keyEpoch is a key at an epoch, the subject of a journal line.
type keyEpoch struct {
	key   string
	epoch uint64
}

// write appends one line per subject, all with one time read now.
func (j *journal) write(event, owner string, subjects ...keyEpoch) error {
	return j.writeAt(monoNow(), event, owner, subjects...)
}

// writeAt appends one line per subject at mono, in one write.
func (j *journal) writeAt(mono int64, event, owner string, subjects ...keyEpoch) error {
	var b strings.Builder
	for _, s := range subjects {
		fmt.Fprintf(&b, "%d %s %s %s %d\n", mono, event, owner, s.key, s.epoch)
	}
	_, err := j.f.WriteString(b.String())
	return err
}

// event is one journal line.
type event struct {
	mono        int64
	what, owner string
	key         string
	epoch       uint64
}

func readJournal(t testing.TB, path string) []event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var es []event
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		var e event
		var err1, err2 error
		if len(f) == 5 {
			e = event{what: f[1], owner: f[2], key: f[3]}
			e.mono, err1 = strconv.ParseInt(f[0], 10, 64)
			e.epoch, err2 = strconv.ParseUint(f[4], 10, 64)
		}
		if len(f) != 5 || err1 != nil || err2 != nil {
			t.Fatalf("%s: a torn or bad line %q", path, line)
		}
		es = append(es, e)
	}
	return es
}

// holding is one node's holding of a key at an epoch, from the journal:
// from the sending of the write that took it (take) to its end (end,
// lost, or the node's kill). A zero end: not over.
type holding struct {
	owner      string
	epoch      uint64
	take, got  int64
	end        int64
	endedBy    string
	takeWrites int
}

// holdings reads the journal into each key's holdings, in the order they
// began, failing the test on a line that makes no sense: a Held yielded
// or ended without its write, a key ended twice, an event of a killed
// node after its kill.
func holdings(t testing.TB, es []event) map[string][]*holding {
	t.Helper()
	type id struct {
		key, owner string
		epoch      uint64
	}
	byID := map[id]*holding{}
	killed := map[string]int64{}
	for _, e := range es {
		if e.what == evKill {
			killed[e.owner] = e.mono
		}
	}
	for _, e := range es {
		if k, ok := killed[e.owner]; ok && e.what != evKill && e.mono > k {
			t.Errorf("journal: %s %s %s epoch %d after %s was killed", e.owner, e.what, e.key, e.epoch, e.owner)
		}
		h := byID[id{e.key, e.owner, e.epoch}]
		switch e.what {
		case evKill:
			continue
		case evTake:
			if h == nil {
				h = &holding{owner: e.owner, epoch: e.epoch, take: e.mono}
				byID[id{e.key, e.owner, e.epoch}] = h
			}
			h.take = min(h.take, e.mono)
			h.takeWrites++
			continue
		}
		switch {
		case h == nil:
			t.Errorf("journal: %s %s %s epoch %d, which it sent no write for", e.owner, e.what, e.key, e.epoch)
		case e.what == evGot && h.got == 0:
			h.got = e.mono
		case (e.what == evEnd || e.what == evLost) && h.end == 0:
			h.end, h.endedBy = e.mono, e.what
		default:
			t.Errorf("journal: %s %s %s epoch %d twice", e.owner, e.what, e.key, e.epoch)
		}
	}
	out := map[string][]*holding{}
	for i, h := range byID {
		if h.got == 0 {
			continue // a write that did not take the key (no Held): no holding
		}
		if h.end == 0 {
			if k, ok := killed[h.owner]; ok {
				h.end, h.endedBy = k, evKill
			}
		}
		out[i.key] = append(out[i.key], h)
	}
	for _, hs := range out {
		sort.Slice(hs, func(i, j int) bool { return hs[i].take < hs[j].take })
	}
	return out
}

// overlap says how two holdings of a key overlap, if they do: each must
// end before the next one's write was sent, and epochs rise.
func overlap(key string, hs []*holding) error {
	for i := 1; i < len(hs); i++ {
		prev, next := hs[i-1], hs[i]
		if prev.end == 0 || prev.end > next.take {
			return fmt.Errorf("%s: %s held it (epoch %d) from %d to %d (%s); %s took it (epoch %d) at %d: two live holders",
				key, prev.owner, prev.epoch, prev.take, prev.end, prev.endedBy, next.owner, next.epoch, next.take)
		}
		if next.epoch <= prev.epoch {
			return fmt.Errorf("%s: epoch %d of %s after epoch %d of %s", key, next.epoch, next.owner, prev.epoch, prev.owner)
		}
	}
	return nil
}
