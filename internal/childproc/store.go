package childproc

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/testclock"
)

// A store child is the test binary run again as the test StoreTest, told
// its store by the environment (StoreEnvURL, StoreEnvOwner). It opens the
// store with lease.Open (an SQLite file, a flock directory, a server),
// reads commands on stdin and answers each with one "RESULT ..." line on
// stdout:
//
//	acquire <unix ms>   set the child's clock, Acquire(StoreKey)
//	                    → "RESULT ok <epoch> <previous unclean>"
//	                    | "RESULT held <owner> <epoch>" | "RESULT err <text>"
//	release             release the last grant → "RESULT released" | "RESULT err <text>"
//
// Stdin reaching EOF closes the store and ends the child. The child's side
// is package storechild: it imports lease, and this package does not, so
// that the package lease's own tests can start children too.
const (
	StoreTest     = "TestStoreChild" // the child's test, in every binary that uses StartStore
	StoreEnvURL   = "LEASE_TEST_CHILD_STORE"
	StoreEnvOwner = "LEASE_TEST_CHILD_OWNER"
	StoreKey      = "shared/job"
	StoreTTL      = 10 * time.Second // the TTL of the child's store
)

// StartStore runs the test binary as a store child on the store at url,
// and waits until it has opened the store.
func StartStore(t testing.TB, url, owner string) *Child {
	t.Helper()
	return Start(t, StoreTest, owner, StoreEnvURL+"="+url, StoreEnvOwner+"="+owner)
}

// StoreRace: 8 store children on url race for StoreKey over 6 rounds
// (R5). Exactly one wins each round; every loser's ErrHeld names the
// winner; epochs go 1, 2, 3, ... (R2). Odd rounds end with the winner
// releasing; even rounds end with the winner holding on, and the next
// round runs past its expiry, so that the next winner takes over (R4f,
// PreviousUnclean) unless it is the same process (R4d). A store without
// expiry (expires false: the local store) ends every round in a release.
func StoreRace(t testing.TB, url string, expires bool) {
	const procs, rounds = 8, 6
	children := make([]*Child, procs)
	for i := range children {
		children[i] = StartStore(t, url, fmt.Sprintf("proc-%d", i))
	}
	t0 := testclock.Start
	var prevWinner *Child
	prevReleased := true
	for round := 1; round <= rounds; round++ {
		now := t0.Add(time.Duration(round) * 2 * StoreTTL) // past the previous round's expiry
		// Every child is blocked reading stdin: this line is the barrier.
		for _, c := range children {
			c.Send(t, fmt.Sprintf("acquire %d", now.UnixMilli()))
		}
		var winner *Child
		var epoch uint64
		var unclean bool
		held := map[string]string{}
		for _, c := range children {
			line := c.Recv(t)
			f := strings.Fields(line)
			switch {
			case len(f) == 3 && f[0] == "ok":
				if winner != nil {
					t.Fatalf("round %d: both %s and %s won", round, winner.Name, c.Name)
				}
				winner, unclean = c, f[2] == "true"
				epoch, _ = strconv.ParseUint(f[1], 10, 64)
			case len(f) == 3 && f[0] == "held":
				held[c.Name] = f[1] + " " + f[2]
			default:
				t.Fatalf("round %d: child %s: %s", round, c.Name, line)
			}
		}
		if winner == nil {
			t.Fatalf("round %d: no winner; losers saw %v", round, held)
		}
		if epoch != uint64(round) {
			t.Fatalf("round %d: %s won epoch %d; want %d", round, winner.Name, epoch, round)
		}
		for loser, named := range held {
			if want := fmt.Sprintf("%s %d", winner.Name, epoch); named != want {
				t.Fatalf("round %d: %s was told %q holds; want %q", round, loser, named, want)
			}
		}
		if wantUnclean := !prevReleased && winner != prevWinner; unclean != wantUnclean {
			t.Fatalf("round %d: %s's PreviousUnclean = %v; want %v", round, winner.Name, unclean, wantUnclean)
		}
		prevWinner, prevReleased = winner, round%2 == 1 || !expires
		if prevReleased {
			winner.Send(t, "release")
			if got := winner.Recv(t); got != "released" {
				t.Fatalf("round %d: release: %s", round, got)
			}
		}
	}
	StopAll(t, children)
}
