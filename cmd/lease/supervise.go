package main

import (
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leasekit/lease"
)

// holding is what the supervisor needs of a *lease.Held.
type holding interface {
	Grant() lease.Grant
	Deadline() time.Time
	Context() context.Context
	Release(ctx context.Context) error
}

// supervisor runs COMMAND, through a guard process, while a lease is held,
// and has it stopped if the lease is lost or lease run is signalled.
type supervisor struct {
	stdin          io.Reader // an *os.File, so COMMAND reads it directly
	stdout, stderr io.Writer
	sigc           <-chan os.Signal // forwarded to COMMAND's group
	grace          time.Duration    // stop signal to SIGKILL
	// renewCheck is how often lease run looks for a renewed grant to tell
	// the guard its new deadline; 0: a second.
	renewCheck time.Duration
	guard      []string // how to start the guard: this binary and guardCmd
	lockDir    string   // the file: store's directory, whose lock files the guard keeps open; "" for other stores
	// subreaper: lease run becomes the child subreaper of the guard's
	// tree, so that it can kill what is left if the guard is killed. Off
	// in tests that run the supervisor inside the test binary.
	subreaper bool
}

// leaseEnv describes the grant to COMMAND, so that it can fence its writes
// with the epoch and run crash recovery when the previous holder died.
func leaseEnv(g lease.Grant) []string {
	expires := ""
	if !g.ExpiresAt.IsZero() {
		expires = g.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	return []string{
		"LEASE_KEY=" + g.Key,
		"LEASE_EPOCH=" + strconv.FormatUint(g.Epoch, 10),
		"LEASE_OWNER=" + g.Owner,
		"LEASE_EXPIRES=" + expires,
		"LEASE_PREVIOUS_UNCLEAN=" + strconv.FormatBool(g.PreviousUnclean),
	}
}

// deadline returns the lease's deadline on the host's monotonic clock
// (monoNow): the Held's own (R8), when it gives the lease up if renewals
// fail. 0: none (the grant never expires, or this system has no shared
// monotonic clock).
func (sv supervisor) deadline(h holding) int64 {
	d := h.Deadline()
	if d.IsZero() || !hasMonoClock {
		return 0
	}
	now := monoNow()
	if now == 0 {
		return 0
	}
	// d carries this process's monotonic reading: the time left reads no
	// wall clock, so no step of it moves the guard's deadline.
	return max(now+int64(time.Until(d)), 1)
}

// closeAll closes files, ignoring errors: they are copies.
func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// guardCmd is the hidden subcommand lease run starts its guard with.
const guardCmd = "_guard"

// lockDirOf returns the directory of a file: store URL, or "" for any
// other store, the way lease.Open reads it.
func lockDirOf(url string) string {
	dir, ok := strings.CutPrefix(url, "file:")
	if !ok {
		return ""
	}
	if rest, ok := strings.CutPrefix(dir, "//"); ok {
		dir = rest
	}
	return dir
}
