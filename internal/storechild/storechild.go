// Package storechild is the child's side of childproc's store protocol:
// a child process that opens a store with lease.Open and acquires and
// releases one key on command.
package storechild

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/childproc"
	"github.com/leasekit/lease/internal/testclock"
)

// Serve is the body of the store child's test (childproc.StoreTest): in a
// child it serves the protocol of childproc on the store its environment
// names, or runs a node (NodesRace) if its environment says so; run
// directly it does nothing.
//
//	func TestStoreChild(t *testing.T) { storechild.Serve(t) }
func Serve(t *testing.T) {
	if url := os.Getenv(NodeEnvURL); url != "" {
		if err := runNode(url, os.Getenv(childproc.StoreEnvOwner), os.Getenv(NodeEnvJournal), os.Stdin, os.Stdout); err != nil {
			t.Fatal(err)
		}
		return
	}
	url := os.Getenv(childproc.StoreEnvURL)
	if url == "" {
		return // not a child: the parents are the tests that call childproc.StartStore
	}
	if err := runStoreChild(url, os.Getenv(childproc.StoreEnvOwner), os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

func runStoreChild(url, owner string, in io.Reader, out io.Writer) error {
	clock := testclock.New()
	s, err := lease.Open(context.Background(), url, lease.WithOwner(owner), lease.WithClock(clock.Now), lease.WithTTL(childproc.StoreTTL))
	if err != nil {
		fmt.Fprintf(out, "RESULT err %v\n", err)
		return err
	}
	defer s.Close()
	fmt.Fprintln(out, "RESULT ready")
	var last lease.Grant
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "acquire":
			if arg != "" {
				ms, err := strconv.ParseInt(arg, 10, 64)
				if err != nil {
					return err
				}
				clock.Set(time.UnixMilli(ms).UTC())
			}
			g, err := s.Acquire(context.Background(), childproc.StoreKey)
			var held *lease.HeldError
			switch {
			case err == nil:
				last = g
				fmt.Fprintf(out, "RESULT ok %d %v\n", g.Epoch, g.PreviousUnclean)
			case errors.As(err, &held):
				fmt.Fprintf(out, "RESULT held %s %d\n", held.Owner, held.Epoch)
			default:
				fmt.Fprintf(out, "RESULT err %v\n", err)
			}
		case "release":
			if err := s.Release(context.Background(), last); err != nil {
				fmt.Fprintf(out, "RESULT err %v\n", err)
			} else {
				fmt.Fprintln(out, "RESULT released")
			}
		default:
			return fmt.Errorf("unknown command %q", sc.Text())
		}
	}
	return sc.Err()
}
