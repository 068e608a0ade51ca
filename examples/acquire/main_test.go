package main

import (
	"os"
	"path/filepath"
)

// Two runs on one store: each is a new holder and gets the next epoch;
// the first released cleanly, so the second has nothing to recover.
func Example() {
	dir, err := os.MkdirTemp("", "lease-acquire-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	os.Setenv("LEASE_STORE", "sqlite:"+filepath.Join(dir, "leases.db"))
	main()
	main()
	// Output:
	// serving profile:42 at epoch 1
	// serving profile:42 at epoch 2
}
