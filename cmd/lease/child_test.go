package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// The tests run COMMAND as this test binary re-executed with
// LEASE_TEST_ROLE naming what it should do; see TestMain.

// extraRoles are roles defined where they are used (by test files for
// one system).
var extraRoles = map[string]func() int{}

// childRole plays one COMMAND role and returns its exit status.
func childRole(role string) int {
	switch role {
	case "hold":
		return roleHold()
	case "env":
		for _, k := range []string{"LEASE_KEY", "LEASE_EPOCH", "LEASE_OWNER", "LEASE_EXPIRES", "LEASE_PREVIOUS_UNCLEAN"} {
			v, ok := os.LookupEnv(k)
			if !ok {
				v = "<unset>"
			}
			fmt.Printf("%s=%s\n", k, v)
		}
		return 0
	case "trap": // report SIGTERM and exit 3
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		fmt.Println("ready")
		fmt.Printf("got %v\n", <-c)
		return 3
	case "stubborn": // ignore SIGTERM: only SIGKILL ends it
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		time.Sleep(time.Hour)
		return 0
	case "kill-self":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Hour)
	}
	if r, ok := extraRoles[role]; ok {
		return r()
	}
	if code, err := strconv.Atoi(role); err == nil {
		return code // exit with this status
	}
	fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
	return 100
}

// roleHold marks the critical section with an exclusive file (if
// LEASE_TEST_MARKER names one), prints "in OWNER EPOCH UNCLEAN", and stays
// in until stdin closes: a second COMMAND inside at the same time finds the
// marker and prints "overlap".
func roleHold() int {
	marker := os.Getenv("LEASE_TEST_MARKER")
	if marker != "" {
		f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Println("overlap", err)
			return 3
		}
		f.Close()
	}
	fmt.Println("in", os.Getenv("LEASE_OWNER"), os.Getenv("LEASE_EPOCH"), os.Getenv("LEASE_PREVIOUS_UNCLEAN"))
	_, _ = io.Copy(io.Discard, os.Stdin)
	if marker != "" {
		os.Remove(marker)
	}
	fmt.Println("out")
	return 0
}
