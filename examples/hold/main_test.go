package main

import "os"

// Two runs on one store, one after the other: each is a new holder and
// gets the next epoch; the first released, so the second has nothing to
// recover.
func Example() {
	dir, err := os.MkdirTemp("", "lease-hold-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	os.Setenv("TMPDIR", dir) // os.TempDir: the program's store goes here
	main()
	main()
	// Output:
	// working at epoch 1
	// working at epoch 2
}
