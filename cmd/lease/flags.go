package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// newFlags returns a flag set that reports errors instead of printing usage.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseKey parses flags on both sides of KEY and returns KEY and what
// follows it (after "--", if given). Flags may come before or after KEY.
func parseKey(fs *flag.FlagSet, args []string) (key string, rest []string, err error) {
	if err := fs.Parse(args); err != nil {
		return "", nil, flagErr(fs, err)
	}
	if fs.NArg() == 0 {
		return "", nil, usagef("%s: missing KEY (lease help)", fs.Name())
	}
	key = fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return "", nil, flagErr(fs, err)
	}
	return key, fs.Args(), nil
}

func flagErr(fs *flag.FlagSet, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return flag.ErrHelp
	}
	return usagef("%s: %v (lease help)", fs.Name(), err)
}

// usageError is a mistake in the command line: exit status 2.
type usageError string

func (e usageError) Error() string { return string(e) }

func usagef(format string, args ...any) error { return usageError(fmt.Sprintf(format, args...)) }

// exitFor returns the status for a parse error, printing it (or, for -h,
// the usage text).
func exitFor(err error, stdout, stderr io.Writer) int {
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	return fail(stderr, exitUsage, "%v", err)
}
