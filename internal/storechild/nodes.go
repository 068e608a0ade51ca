package storechild

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/childproc"
)

// A node child is the test binary run again as childproc.StoreTest with
// NodeEnvURL set: a profile host that starts HoldEach over NodeKeys keys
// on the store at that URL, with the real clock, and keeps a journal of
// what it held (NodeEnvJournal). It reads commands on stdin and answers
// each with one "RESULT ..." line:
//
//	start       start HoldEach over every key → "RESULT started"
//	count       → "RESULT count <live Helds> <Helds lost>"
//	releaseall  stop working on every Held, then ReleaseAll
//	            → "RESULT released <keys>" | "RESULT err <text>"
//
// Stdin reaching EOF stops the HoldEach and closes the store.
//
// The journal is the independent record of who held what: one line per
// event, "start|end|lost KEY EPOCH OWNER UNIXNANO", written in order under
// one lock, so a process's lines are in its own order and their times never
// go back. "start" is written once the Held is yielded (before any work on
// the key could begin), "end" before ReleaseAll is called (after the work
// stopped), "lost" when a Held's Context ends by anything else.
const (
	NodeEnvURL     = "LEASE_TEST_NODE_STORE"
	NodeEnvJournal = "LEASE_TEST_NODE_JOURNAL"
	NodeKeys       = 2000
	NodeTTL        = 15 * time.Second // long enough for a loaded 2-core machine under -race
)

// NodeKey is the i-th key the nodes hold.
func NodeKey(i int) string { return fmt.Sprintf("profile/%05d", i) }

// node is a node child's state.
type node struct {
	s       lease.Store
	owner   string
	journal *os.File

	mu        sync.Mutex // guards the fields below and the journal's order
	live      map[string]*lease.Held
	lost      int
	releasing bool // ReleaseAll is ending this node's Helds: not a loss
}

func runNode(url, owner, journal string, in io.Reader, out io.Writer) error {
	s, err := lease.Open(context.Background(), url, lease.WithOwner(owner), lease.WithTTL(NodeTTL))
	if err != nil {
		fmt.Fprintf(out, "RESULT err %v\n", err)
		return err
	}
	f, err := os.Create(journal)
	if err != nil {
		s.Close()
		return err
	}
	defer f.Close()
	n := &node{s: s, owner: owner, journal: f, live: map[string]*lease.Held{}}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	defer func() {
		stop()
		<-done
		n.mu.Lock()
		n.releasing = true // closing ends every Held: not a loss
		n.mu.Unlock()
		s.Close()
	}()
	fmt.Fprintln(out, "RESULT ready")
	started := false
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch sc.Text() {
		case "start":
			if !started {
				started = true
				go func() { defer close(done); n.holdAll(ctx) }()
			}
			fmt.Fprintln(out, "RESULT started")
		case "count":
			n.mu.Lock()
			fmt.Fprintf(out, "RESULT count %d %d\n", len(n.live), n.lost)
			n.mu.Unlock()
		case "releaseall":
			keys, err := n.releaseAll()
			if err != nil {
				fmt.Fprintf(out, "RESULT err %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
				continue
			}
			fmt.Fprintf(out, "RESULT released %d\n", keys)
		default:
			return fmt.Errorf("unknown command %q", sc.Text())
		}
	}
	if !started {
		close(done)
	}
	return sc.Err()
}

// holdAll holds every key through one HoldEach until ctx ends.
func (n *node) holdAll(ctx context.Context) {
	keys := make([]string, NodeKeys)
	for i := range keys {
		keys[i] = NodeKey(i)
	}
	for r := range lease.HoldEach(ctx, n.s, keys) {
		if r.Err != nil {
			if ctx.Err() == nil {
				n.note("error", r.Key, 0, r.Err.Error())
			}
			continue
		}
		n.held(r.Held)
	}
}

// held journals a new Held and watches its Context.
func (n *node) held(h *lease.Held) {
	g := h.Grant()
	n.mu.Lock()
	n.live[g.Key] = h
	n.writeLocked("start", g.Key, g.Epoch, "")
	n.mu.Unlock()
	context.AfterFunc(h.Context(), func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.releasing || n.live[g.Key] != h {
			return
		}
		delete(n.live, g.Key)
		n.lost++
		n.writeLocked("lost", g.Key, g.Epoch, oneLine(context.Cause(h.Context())))
	})
}

// releaseAll stops the work on every live Held (journals its end), then
// releases them all with one ReleaseAll.
func (n *node) releaseAll() (int, error) {
	n.mu.Lock()
	n.releasing = true
	keys := len(n.live)
	for key, h := range n.live {
		n.writeLocked("end", key, h.Grant().Epoch, "")
		delete(n.live, key)
	}
	n.mu.Unlock()
	return keys, n.s.ReleaseAll(context.Background())
}

func (n *node) note(event, key string, epoch uint64, detail string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.writeLocked(event, key, epoch, detail)
}

// writeLocked appends one journal line; the time is taken under n.mu, so
// that the node's lines are in the order of their times.
func (n *node) writeLocked(event, key string, epoch uint64, detail string) {
	line := fmt.Sprintf("%s %s %d %s %d", event, key, epoch, n.owner, time.Now().UnixNano())
	if detail != "" {
		line += " " + detail
	}
	fmt.Fprintln(n.journal, line)
}

func oneLine(err error) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}

// NodesRace: two nodes (real processes, each its own store on url) start
// HoldEach over the same NodeKeys keys at the same instant. Every key
// ends with exactly one holder, the one its journal names, no Held is
// lost, and no two holders of a key overlap in the journals. Then one
// node releases every key with ReleaseAll, and the other node's waiting
// HoldEach takes each of them, with the next epoch (R5, R12, R13, R16).
func NodesRace(t *testing.T, url string) {
	dir := t.TempDir()
	nodes := []*childproc.Child{startNode(t, url, "node-a", dir), startNode(t, url, "node-b", dir)}
	// Both nodes are blocked reading stdin: this line is the barrier.
	for _, c := range nodes {
		c.Send(t, "start")
	}
	for _, c := range nodes {
		if got := c.Recv(t); got != "started" {
			t.Fatalf("%s: %s", c.Name, got)
		}
	}
	counts := waitHeld(t, dir, nodes, NodeKeys)
	checkStore(t, url, dir, nodes)
	if counts[0] == 0 || counts[1] == 0 {
		t.Logf("one node took every key at start-up (%d, %d): the hand-over still runs", counts[0], counts[1])
	}

	from, to := nodes[0], nodes[1]
	from.Send(t, "releaseall")
	if got := from.Recv(t); got != fmt.Sprintf("released %d", counts[0]) {
		t.Fatalf("%s: %s; want released %d", from.Name, got, counts[0])
	}
	waitHeld(t, dir, []*childproc.Child{to}, NodeKeys)
	checkStore(t, url, dir, nodes)
	childproc.StopAll(t, nodes)
	checkJournals(t, dir, nodes, counts[0])
}

func startNode(t *testing.T, url, owner, dir string) *childproc.Child {
	t.Helper()
	return childproc.Start(t, childproc.StoreTest, owner, NodeEnvURL+"="+url,
		childproc.StoreEnvOwner+"="+owner, NodeEnvJournal+"="+journalPath(dir, owner))
}

func journalPath(dir, owner string) string { return filepath.Join(dir, owner+".journal") }

// waitHeld asks the nodes for their counts until they hold want keys
// between them, and fails the test if any node lost a Held. It polls the
// nodes' state, not the time: the guard only bounds a hung node.
func waitHeld(t *testing.T, dir string, nodes []*childproc.Child, want int) []int {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		counts, total := make([]int, len(nodes)), 0
		for i, c := range nodes {
			c.Send(t, "count")
			var live, lost int
			if _, err := fmt.Sscanf(c.Recv(t), "count %d %d", &live, &lost); err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			if lost != 0 {
				t.Fatalf("%s lost %d Helds:\n%s", c.Name, lost, lossLines(t, dir, c.Name))
			}
			counts[i], total = live, total+live
		}
		if total == want {
			return counts
		}
		if total > want {
			t.Fatalf("the nodes hold %v keys between them; want %d", counts, want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the nodes hold %v keys between them after 2 minutes; want %d", counts, want)
		}
		time.Sleep(20 * time.Millisecond) // polling the nodes' counts, not waiting for time to pass
	}
}

// lossLines are the first lines of a node's journal that tell of a loss,
// each with the time since the node's first start.
func lossLines(t *testing.T, dir, owner string) string {
	var b strings.Builder
	var first int64
	shown := 0
	for _, e := range readJournal(t, journalPath(dir, owner)) {
		if first == 0 {
			first = e.at
		}
		if e.event != "start" && e.event != "end" && shown < 10 {
			fmt.Fprintf(&b, "+%v %s %s epoch %d: %s\n", time.Duration(e.at-first), e.event, e.key, e.epoch, e.detail)
			shown++
		}
	}
	return b.String()
}

// checkStore: every key has exactly one live holder in the store, one of
// the nodes, at the epoch of that node's newest journal start of the key.
func checkStore(t *testing.T, url, dir string, nodes []*childproc.Child) {
	t.Helper()
	s, err := lease.Open(context.Background(), url, lease.WithOwner("auditor"), lease.WithTTL(NodeTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	newest := map[string]entry{}
	for _, c := range nodes {
		for _, e := range readJournal(t, journalPath(dir, c.Name)) {
			if e.event == "start" && e.epoch > newest[e.key].epoch {
				newest[e.key] = e
			}
		}
	}
	seen := 0
	for rec, err := range s.Holders(context.Background(), "profile/") {
		if err != nil {
			t.Fatal(err)
		}
		seen++
		if j := newest[rec.Key]; j.owner != rec.Owner || j.epoch != rec.Epoch {
			t.Errorf("%s: the store names %s at epoch %d; the journals' newest holder is %q at epoch %d",
				rec.Key, rec.Owner, rec.Epoch, j.owner, j.epoch)
		}
	}
	if seen != NodeKeys {
		t.Fatalf("the store has %d live holders of %d keys", seen, NodeKeys)
	}
}

// entry is one journal line.
type entry struct {
	event, key, owner string
	epoch             uint64
	at                int64 // unix nanoseconds
	detail            string
}

func readJournal(t *testing.T, path string) []entry {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var es []entry
	var last int64
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSuffix(line, "\n"), " ", 6)
		if len(f) < 5 {
			t.Fatalf("%s: bad line %q", path, line)
		}
		e := entry{event: f[0], key: f[1], owner: f[3]}
		e.epoch, _ = strconv.ParseUint(f[2], 10, 64)
		e.at, _ = strconv.ParseInt(f[4], 10, 64)
		if len(f) == 6 {
			e.detail = f[5]
		}
		if e.at < last {
			t.Fatalf("%s: time goes back at %q", path, line)
		}
		last = e.at
		es = append(es, e)
	}
	return es
}

// span is one holding of a key in the journals: from its start to its
// end (0: still held when the node stopped).
type span struct {
	owner      string
	epoch      uint64
	start, end int64
}

// checkJournals: no error or loss was journaled; every key was held by
// the first node until it released all, released = how many it held; the
// holdings of each key never overlap, and their epochs rise in time order.
func checkJournals(t *testing.T, dir string, nodes []*childproc.Child, released int) {
	t.Helper()
	spans := map[string][]span{}
	ends := 0
	for _, c := range nodes {
		open := map[string]int{} // key → index of its open span
		for _, e := range readJournal(t, journalPath(dir, c.Name)) {
			switch e.event {
			case "start":
				spans[e.key] = append(spans[e.key], span{owner: e.owner, epoch: e.epoch, start: e.at})
				open[e.key] = len(spans[e.key]) - 1
			case "end":
				i, ok := open[e.key]
				if !ok || spans[e.key][i].epoch != e.epoch {
					t.Fatalf("%s: end of %s at epoch %d it did not start", c.Name, e.key, e.epoch)
				}
				spans[e.key][i].end = e.at
				delete(open, e.key)
				ends++
			default:
				t.Errorf("%s: %s %s epoch %d: %s", c.Name, e.event, e.key, e.epoch, e.detail)
			}
		}
	}
	if ends != released {
		t.Errorf("the journals end %d holdings; the releasing node released %d", ends, released)
	}
	for key, ss := range spans {
		sort.Slice(ss, func(i, j int) bool { return ss[i].start < ss[j].start })
		for i := 1; i < len(ss); i++ {
			prev, next := ss[i-1], ss[i]
			if prev.end == 0 || prev.end > next.start {
				t.Errorf("%s: %s (epoch %d) held it from %d to %d, %s (epoch %d) from %d: two live holders",
					key, prev.owner, prev.epoch, prev.start, prev.end, next.owner, next.epoch, next.start)
			}
			if next.epoch <= prev.epoch {
				t.Errorf("%s: epoch %d of %s after epoch %d of %s", key, next.epoch, next.owner, prev.epoch, prev.owner)
			}
		}
		if last := ss[len(ss)-1]; last.end != 0 || last.owner != nodes[1].Name {
			t.Errorf("%s: its last holding is %+v; want %s holding it to the end", key, last, nodes[1].Name)
		}
	}
	if len(spans) != NodeKeys {
		t.Errorf("the journals hold %d keys; want %d", len(spans), NodeKeys)
	}
}
