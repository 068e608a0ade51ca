// Package fencechild runs the SQL drivers' cross-process Fence test: each
// child process takes keys with a short TTL that it never renews and
// writes rows for them in fenced transactions while other children take
// the keys over; the parent then checks every row against the lease
// table's history (each driver's test does that check in its own SQL).
package fencechild

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/childproc"
)

// The child's environment: the store's URL, the owner, and how far its
// store's clock runs ahead of the host's.
const (
	EnvURL   = "LEASE_TEST_FENCE_URL"
	EnvOwner = "LEASE_TEST_FENCE_OWNER"
	EnvSkew  = "LEASE_TEST_FENCE_SKEW"
)

const (
	Procs      = 8
	iterations = 150                   // each child's attempts: an acquire or a fenced write
	TTL        = 50 * time.Millisecond // short, and never renewed: grants pass on while their holders write
	skewStep   = 5 * time.Millisecond  // child i's store clock runs i steps ahead
)

// Keys are the keys the children take.
var Keys = []string{"fenced/a", "fenced/b"}

// Write runs one fenced transaction writing a row for g. It returns an
// error matching lease.ErrLost when Fence refused g, and one matching
// lease.ErrStorage for a failure worth another attempt (a busy file).
type Write func(ctx context.Context, g lease.Grant) error

// Serve is the body of the child's test: in a child (its environment
// names a store) it opens the store, builds its writer with open, and
// runs; run directly it does nothing.
func Serve(t *testing.T, open func(url string) (Write, func(), error)) {
	url := os.Getenv(EnvURL)
	if url == "" {
		return
	}
	skew, err := time.ParseDuration(os.Getenv(EnvSkew))
	if err == nil {
		err = serve(url, os.Getenv(EnvOwner), skew, open, os.Stdin, os.Stdout)
	}
	if err != nil {
		fmt.Printf("RESULT err %v\n", err)
		t.Fatal(err)
	}
}

// serve answers "ready", waits for "go", then over its iterations takes a
// key when it holds none (never renewing it) and writes for it until the
// write says the grant is lost. It answers "done <commits> <losses>" and
// waits for its stdin to close.
func serve(url, owner string, skew time.Duration, open func(string) (Write, func(), error), in io.Reader, out io.Writer) error {
	ctx := context.Background()
	ahead := func() time.Time { return time.Now().Add(skew) }
	s, err := lease.Open(ctx, url, lease.WithOwner(owner), lease.WithTTL(TTL), lease.WithClock(ahead))
	if err != nil {
		return err
	}
	defer s.Close()
	write, closeWrite, err := open(url)
	if err != nil {
		return err
	}
	defer closeWrite()
	sc := bufio.NewScanner(in)
	fmt.Fprintln(out, "RESULT ready")
	if !sc.Scan() || sc.Text() != "go" {
		return fmt.Errorf("want go, got %q", sc.Text())
	}
	var g lease.Grant
	held := false
	commits, losses := 0, 0
	for i := range iterations {
		if !held {
			g, err = s.Acquire(ctx, Keys[i%len(Keys)])
			if errors.Is(err, lease.ErrHeld) || errors.Is(err, lease.ErrStorage) {
				continue
			}
			if err != nil {
				return err
			}
			held = true
		}
		switch err := write(ctx, g); {
		case errors.Is(err, lease.ErrLost):
			losses++
			held = false
		case errors.Is(err, lease.ErrStorage):
		case err != nil:
			return err
		default:
			commits++
		}
	}
	fmt.Fprintf(out, "RESULT done %d %d\n", commits, losses)
	for sc.Scan() {
	}
	return nil
}

// Run starts Procs children of the test named test on the store at url,
// their store clocks apart, lets them write at once, and returns the
// commits and the losses they report.
func Run(t *testing.T, test, url string) (commits, losses int) {
	t.Helper()
	children := make([]*childproc.Child, Procs)
	for i := range children {
		owner := fmt.Sprintf("proc-%d", i)
		children[i] = childproc.Start(t, test, owner, EnvURL+"="+url, EnvOwner+"="+owner,
			fmt.Sprintf("%s=%s", EnvSkew, time.Duration(i)*skewStep))
	}
	for _, c := range children {
		c.Send(t, "go")
	}
	for _, c := range children {
		var n, m int
		if _, err := fmt.Sscanf(c.Recv(t), "done %d %d", &n, &m); err != nil {
			t.Fatalf("child %s: %v\nstderr: %s", c.Name, err, c.Stderr())
		}
		commits, losses = commits+n, losses+m
	}
	childproc.StopAll(t, children)
	return commits, losses
}

// Check fails the test unless the rows written match the commits
// reported, at least two owners wrote, a takeover and a loss happened,
// and bad (the rows the driver's check found committed by a non-holder)
// is empty.
func Check(t *testing.T, commits, losses, written, writers, takeovers int, bad []string) {
	t.Helper()
	t.Logf("%d fenced commits by %d owners, %d losses, %d takeovers", written, writers, losses, takeovers)
	if written != commits || writers < 2 || takeovers < 1 || losses < 1 {
		t.Fatalf("%d rows written, %d commits reported, %d writers, %d takeovers, %d losses: "+
			"want every commit written, and at least 2 writers, a takeover and a loss", written, commits, writers, takeovers, losses)
	}
	if len(bad) > 0 {
		t.Fatalf("%d of %d fenced writes committed by a non-holder:\n%s", len(bad), written, strings.Join(bad, "\n"))
	}
}
