// Command quickstart shows leases at work on the embedded default store,
// an SQLite file: two hosts contend for a profile, one crashes, and the
// other takes over and is told to recover.
//
//	go run ./examples/quickstart
//
// Each host opens the file through a driver of its own, as two processes
// would. The hosts share a clock that the program moves, so the demo need
// not wait for the lease to expire.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/sqlite"
)

func main() {
	dir, err := os.MkdirTemp("", "lease-quickstart-")
	must(err)
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "leases.db")

	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	clock := func() time.Time { return now }
	open := func(owner string) *lease.DocumentStore {
		driver, err := sqlite.Open(file)
		must(err)
		s, err := lease.NewDocumentStore(driver, lease.WithOwner(owner), lease.WithClock(clock), lease.WithTTL(15*time.Second))
		must(err)
		return s
	}
	a, b := open("host-a"), open("host-b")
	defer b.Close()

	g, err := a.Acquire(ctx, "profile:42")
	must(err)
	fmt.Printf("host-a acquired %s: epoch %d, expires in %v\n", g.Key, g.Epoch, g.ExpiresAt.Sub(now))

	_, err = b.Acquire(ctx, "profile:42")
	var held *lease.HeldError
	if errors.As(err, &held) {
		fmt.Printf("host-b refused: held by %s (epoch %d) for another %v\n", held.Owner, held.Epoch, held.ExpiresAt.Sub(now))
	}

	now = now.Add(5 * time.Second)
	g, err = a.Renew(ctx, g)
	must(err)
	fmt.Printf("host-a renewed: still epoch %d\n", g.Epoch)

	a.Close() // host-a crashes without releasing
	fmt.Println("host-a crashed")

	now = now.Add(15 * time.Second)
	g2, err := b.Acquire(ctx, "profile:42")
	must(err)
	fmt.Printf("host-b acquired after expiry: epoch %d, previous unclean: %v (run crash recovery)\n", g2.Epoch, g2.PreviousUnclean)

	restarted := open("host-a")
	defer restarted.Close()
	_, err = restarted.Renew(ctx, g)
	fmt.Printf("host-a, restarted, tries its old grant: lost: %v\n", errors.Is(err, lease.ErrLost))
	must(b.Release(ctx, g2))
	fmt.Println("host-b released; the next holder will get epoch", g2.Epoch+1)
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
