// Command mongoonly uses the MongoDB driver only.
package main

import (
	"context"
	"os"

	"github.com/leasekit/lease"
	_ "github.com/leasekit/lease/mongodb"
)

func main() {
	s, err := lease.Open(context.Background(), os.Getenv("MONGODB_URI"))
	if err != nil {
		panic(err)
	}
	s.Close()
}
