// Command fileonly uses only what package lease has built in: the local
// flock store, through NewLocalStore and Open("file:..."), and Hold.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/leasekit/lease"
)

func main() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fileonly-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	direct, err := lease.NewLocalStore(dir)
	if err != nil {
		panic(err)
	}
	defer direct.Close()
	s, err := lease.Open(ctx, "file:"+dir)
	if err != nil {
		panic(err)
	}
	defer s.Close()
	h, err := lease.Hold(ctx, s, "jobs/nightly")
	if err != nil {
		panic(err)
	}
	fmt.Println("held", h.Grant().Key, h.Grant().Epoch)
	if err := h.Release(ctx); err != nil {
		panic(err)
	}
}
