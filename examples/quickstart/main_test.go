package main

// The README shows this output: the example runs on a clock of its own,
// so it prints the same every time.
func Example() {
	main()
	// Output:
	// host-a acquired profile:42: epoch 1, expires in 15s
	// host-b refused: held by host-a (epoch 1) for another 15s
	// host-a renewed: still epoch 1
	// host-a crashed
	// host-b acquired after expiry: epoch 2, previous unclean: true (run crash recovery)
	// host-a, restarted, tries its old grant: lost: true
	// host-b released; the next holder will get epoch 3
}
