// Command profilehost is the shape of a profile host: one store per node,
// one Hold per profile it serves, Confirm before a destructive step,
// Holders for an admin page, and ReleaseAll at shutdown so that other
// nodes take over at once.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/leasekit/lease"
	_ "github.com/leasekit/lease/sqlite" // the sqlite: URLs below
)

func main() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "profilehost")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// One store per node: every lease of the node is renewed by one loop,
	// in batches.
	node, err := lease.Open(ctx, "sqlite:"+filepath.Join(dir, "leases.db"), lease.WithOwner("node-a"))
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()

	// One Hold per profile served.
	profiles := map[string]*lease.Held{}
	for _, id := range []string{"profile:41", "profile:42", "profile:43"} {
		h, err := lease.Hold(ctx, node, id)
		if err != nil {
			log.Fatal(err)
		}
		if h.Grant().PreviousUnclean {
			fmt.Println("recovering", id) // the previous host died holding it
		}
		profiles[id] = h // serve the profile under h.Context()
	}

	// Before a destructive step, confirm the lease is held right now,
	// with a full TTL ahead.
	if g, err := profiles["profile:42"].Confirm(ctx); err == nil {
		fmt.Println("deprovisioning", g.Key, "at epoch", g.Epoch)
	}

	// An admin page: who holds what.
	for rec, err := range node.Holders(ctx, "profile:") {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(rec.Key, rec.Owner, rec.Epoch)
	}

	// Shutdown: hand every lease back in one batch; each Held's context ends.
	if err := node.ReleaseAll(ctx); err != nil {
		log.Print(err)
	}
	fmt.Println("released:", profiles["profile:41"].Context().Err() != nil)
}
