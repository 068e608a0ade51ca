//go:build unix && !aix

// Package sessionproc holds the real-process tests of sessions (issue 28,
// R18–R24) that each driver package runs on its own backend:
//
//   - KillTakeover: a node (a child process) holds 10,000 keys in one
//     session and is SIGKILLed; this process, a second node waiting on
//     every key with HoldEach, takes them all after the session's expiry
//     by the store's clock, each with epoch + 1 and PreviousUnclean, with
//     one kill write (R21); a journal both nodes append to shows no two
//     live holders of a key at any time.
//   - RenewKillRace: two processes write the same session record at the
//     same version at nearly the same instant, one as its holder's renewal
//     and one as a taker's kill; exactly one wins, every round (R21, R24).
//
// The children are the test binary run again as ChildTest, told their role
// by EnvRole and speaking childproc's protocol. Each driver package that
// runs these tests has the child's entry point:
//
//	func TestSessionChild(t *testing.T) { sessionproc.Serve(t, openURL) }
//
// The package builds where CLOCK_MONOTONIC is one clock for every process
// of the host (golang.org/x/sys), which the journal's times need.
package sessionproc

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"golang.org/x/sys/unix"
)

// The child's test and its environment.
const (
	ChildTest = "TestSessionChild"           // the children's test in every binary that runs these tests
	EnvRole   = "LEASE_TEST_SESSION_ROLE"    // roleHold or roleRace; unset: not a child
	EnvURL    = "LEASE_TEST_SESSION_URL"     // the backend, for the child's Open
	EnvLog    = "LEASE_TEST_SESSION_JOURNAL" // the holder's journal
	EnvOwner  = "LEASE_TEST_SESSION_OWNER"   // the holder's owner
	EnvTTL    = "LEASE_TEST_SESSION_TTL"     // the holder's TTL
	EnvKeys   = "LEASE_TEST_SESSION_KEYS"    // how many keys the holder holds

	roleHold = "holder" // KillTakeover's first node
	roleRace = "racer"  // one of RenewKillRace's two writers
)

// Backend is one backend as the tests see it.
type Backend struct {
	// URL names the backend, to Open in this process and in the children.
	URL string
	// Open opens a driver on URL: the driver package's own opener, the one
	// lease.Open calls.
	Open lease.DriverOpener
	// Now reads the clock the backend's stores judge expiry by (R8): the
	// host's (HostClock) for SQLite, the server's for PostgreSQL.
	Now func(ctx context.Context) (time.Time, error)
	// Keys is how many keys KillTakeover's first node holds; 0:
	// DefaultKeys.
	Keys int
}

// HostClock is the clock of a store that judges by its host (SQLite): its
// wall clock, as the store reads it (without the monotonic reading, which
// no stored expiry has).
func HostClock(context.Context) (time.Time, error) { return time.Now().Round(0), nil }

// Serve is the body of the children's test (ChildTest): in a child it plays
// the role its environment names, on a driver that open opens; run directly
// it does nothing.
func Serve(t *testing.T, open lease.DriverOpener) {
	var err error
	switch role := os.Getenv(EnvRole); role {
	case "":
		return // not a child: the parents are KillTakeover and RenewKillRace
	case roleHold:
		var ttl time.Duration
		var keys int
		if ttl, err = time.ParseDuration(os.Getenv(EnvTTL)); err == nil {
			keys, err = strconv.Atoi(os.Getenv(EnvKeys))
		}
		if err == nil {
			err = serveHolder(open, os.Getenv(EnvURL), os.Getenv(EnvOwner), os.Getenv(EnvLog), keys, ttl, os.Stdin, os.Stdout)
		}
	case roleRace:
		err = serveRacer(open, os.Getenv(EnvURL), os.Stdin, os.Stdout)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// monoNow reads CLOCK_MONOTONIC in nanoseconds: unlike time.Now's
// monotonic reading, which counts from this process's start, it is one
// clock for every process of the host, and no step of the wall clock
// moves it, so the journal's lines of two nodes compare.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("sessionproc: CLOCK_MONOTONIC: %v", err)) // every system this package builds for has it
	}
	return ts.Nano()
}
