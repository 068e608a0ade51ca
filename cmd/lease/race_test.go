//go:build race

package main

// raceEnabled: the e2e tests build the binary with -race too, so that the
// build reuses the test's compiled packages and the binary is checked.
const raceEnabled = true
