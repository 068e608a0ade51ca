//go:build unix

package sqlite

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/testkit"
)

// The profile-host tests: a real process holds a few hundred keys through
// Hold on one SQLite file, with the real clock; this process waits for all
// of them through Hold, and takes them over when the holder releases them
// all (R13) or is SIGKILLed (R4f), in a few batched round trips (R12).

const (
	manyChildEnv  = "LEASE_TEST_MANY_CHILD" // the SQLite file the child holds keys in
	manyTTLEnv    = "LEASE_TEST_MANY_TTL"   // the child's TTL
	manyKeys      = 300
	manyTTL       = time.Second // real time: Hold times renewals on the real clock
	manyReleaseIn = "releaseall"
)

// maxTakeoverTrips bounds the driver calls of a node taking manyKeys keys
// from another: its batched polls while the keys are held, a read and a
// write per look once they are free, and the renewals of the keys it took
// first while it takes the others (renewed every third of a second; a
// loaded machine stretches the takeover over several). Without batching
// it would be manyKeys calls or more.
const maxTakeoverTrips = 40

func manyKey(i int) string { return fmt.Sprintf("profile:%04d", i) }

// TestManyChild is the child's entry point: it holds manyKeys keys
// through Hold, says "held", and on "releaseall" releases them all in
// one call and says "released". Run directly it does nothing.
func TestManyChild(t *testing.T) {
	path := os.Getenv(manyChildEnv)
	if path == "" {
		return
	}
	ttl, err := time.ParseDuration(os.Getenv(manyTTLEnv))
	if err != nil {
		t.Fatal(err)
	}
	s, err := lease.Open(ctxBG, "sqlite:"+path, lease.WithOwner("node-a"), lease.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range manyKeys {
		if _, err := lease.Hold(ctxBG, s, manyKey(i), lease.FailIfHeld()); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("held")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == manyReleaseIn {
			if err := s.ReleaseAll(ctxBG); err != nil {
				t.Fatal(err)
			}
			fmt.Println("released")
		}
	}
}

// manyChild starts the child on path, its keys held with ttl, and waits
// until it holds them.
func manyChild(t *testing.T, path string, ttl time.Duration) (cmd *exec.Cmd, say func(string), lines *bufio.Scanner) {
	t.Helper()
	cmd = exec.Command(os.Args[0], "-test.run=^TestManyChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), manyChildEnv+"="+path, manyTTLEnv+"="+ttl.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines = bufio.NewScanner(stdout)
	waitLine(t, lines, "held")
	return cmd, func(s string) { fmt.Fprintln(stdin, s) }, lines
}

func waitLine(t *testing.T, lines *bufio.Scanner, want string) {
	t.Helper()
	for lines.Scan() {
		if strings.TrimSpace(lines.Text()) == want {
			return
		}
	}
	t.Fatalf("the child ended before saying %q", want)
}

// waitAll starts one Hold per key on s, all waiting while the child holds
// them, and returns a function that collects their grants. The Holds wait
// as long as the test may run (testkit.Patient), not a fixed time: on a
// loaded machine the takeover of every key can take long.
func waitAll(t *testing.T, s lease.Store) func() []lease.Grant {
	ctx := testkit.Patient(t)
	grants := make([]lease.Grant, manyKeys)
	var wg sync.WaitGroup
	for i := range manyKeys {
		wg.Go(func() {
			h, err := lease.Hold(ctx, s, manyKey(i))
			if err != nil {
				t.Errorf("Hold(%s) = %v", manyKey(i), err)
				return
			}
			grants[i] = h.Grant()
		})
	}
	return func() []lease.Grant { wg.Wait(); return grants }
}

// waitersBlocked waits until every Hold has looked once and found its key
// held, and has taken the key's place (R25): the store has read every key
// and written a place record for each, and a session for them.
func waitersBlocked(t *testing.T, c *testkit.TripCounter) {
	t.Helper()
	testkit.WaitFor(t, fmt.Sprintf("all %d Holds to look at their keys", manyKeys), func() bool { return c.KeysRead() == manyKeys })
	testkit.WaitFor(t, fmt.Sprintf("all %d Holds to take their places", manyKeys), func() bool { return c.Peek().Writes >= manyKeys+1 })
}

// manyStore opens node-b's store on path, counting its round trips.
func manyStore(t *testing.T, path string) (*lease.DocumentStore, *testkit.TripCounter) {
	c := &testkit.TripCounter{Driver: openSQLiteAt(t, path)}
	s, err := lease.NewDocumentStore(c, lease.WithOwner("node-b"), lease.WithTTL(manyTTL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, c
}

// TestManyReleaseAllAcrossProcesses: R13, R12. A node that releases its
// few hundred keys with one ReleaseAll hands every one of them, clean, to
// the node waiting for them, which takes them in a few batched round trips.
// The child's keys must not expire before its ReleaseAll, however loaded
// the machine: it holds them with a TTL of a minute.
func TestManyReleaseAllAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	_, say, lines := manyChild(t, path, time.Minute)
	s, c := manyStore(t, path)
	collect := waitAll(t, s)
	waitersBlocked(t, c)
	c.Take()
	say(manyReleaseIn)
	waitLine(t, lines, "released")
	grants := collect()
	if trips := c.Take().Trips; trips > maxTakeoverTrips {
		t.Errorf("taking %d released keys cost %d round trips; want a few batches", manyKeys, trips)
	}
	for _, g := range grants {
		if g.Epoch != 2 || g.PreviousUnclean || g.Owner != "node-b" {
			t.Errorf("took %+v; want node-b, epoch 2, not PreviousUnclean", g)
		}
	}
	if err := s.ReleaseAll(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestManyTakeoverAfterKill: R4f, R12. When the node holding a few
// hundred keys is SIGKILLed, the waiting node takes every key after its
// expiry, each PreviousUnclean, in a few batched round trips.
func TestManyTakeoverAfterKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	cmd, _, _ := manyChild(t, path, manyTTL)
	s, c := manyStore(t, path)
	collect := waitAll(t, s)
	waitersBlocked(t, c)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	c.Take()
	grants := collect()
	if trips := c.Take().Trips; trips > maxTakeoverTrips {
		t.Errorf("taking over %d keys of a dead node cost %d round trips; want a few batches", manyKeys, trips)
	}
	for _, g := range grants {
		if g.Epoch != 2 || !g.PreviousUnclean || g.Owner != "node-b" {
			t.Errorf("took %+v; want node-b, epoch 2, PreviousUnclean", g)
		}
	}
	if err := s.ReleaseAll(t.Context()); err != nil {
		t.Fatal(err)
	}
}
