// Command lease holds a keyed lease while a command runs, in the manner
// of flock(1), etcdctl lock and consul lock, and reports who holds a key.
//
// Usage:
//
//	lease run [--store URL] [--ttl D] [--no-wait | --timeout D] [--conflict-exit-code N] [--grace D] KEY -- COMMAND [ARGS...]
//	lease holder [--store URL] [--json] KEY
//
// The store URL comes from --store, else $LEASE_STORE, else
// "sqlite:lease.db" in the current directory.
//
// Exit statuses of lease run:
//
//	COMMAND's own status   COMMAND ran and exited (128+N if a signal N ended it)
//	2                      usage error, invalid key or unknown store scheme
//	69                     the store could not be opened or failed
//	75                     KEY is held and --no-wait was given or --timeout ran out (--conflict-exit-code sets it)
//	76                     the lease was lost while COMMAND ran; COMMAND was stopped
//	126, 127               COMMAND could not be started / was not found
//	128+N                  lease itself was ended by signal N while waiting for KEY
//
// lease holder exits 0 whether KEY is held or free, 2 on usage errors and
// 69 when the store fails.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit statuses; see the package doc.
const (
	exitUsage    = 2
	exitStore    = 69 // EX_UNAVAILABLE
	exitConflict = 75 // EX_TEMPFAIL: try again later
	exitLost     = 76
	exitNoExec   = 126
	exitNotFound = 127
)

// defaultStore is used when neither --store nor LEASE_STORE is set, so that
// "lease run KEY -- COMMAND" works on a fresh checkout.
const defaultStore = "sqlite:lease.db"

const usage = `usage:
  lease run [--store URL] [--ttl D] [--no-wait | --timeout D] [--conflict-exit-code N] [--grace D] KEY -- COMMAND [ARGS...]
  lease holder [--store URL] [--json] KEY

Store URLs: sqlite:PATH, mongodb://HOST/DB?collection=C, postgres://HOST/DB?table=T, file:DIR, memory:
(default: $LEASE_STORE, else sqlite:lease.db)

lease run holds KEY while COMMAND runs and passes it LEASE_KEY, LEASE_EPOCH,
LEASE_OWNER, LEASE_EXPIRES and LEASE_PREVIOUS_UNCLEAN. It exits with
COMMAND's status, 75 if KEY is held (--no-wait, --timeout), 76 if the lease
was lost (COMMAND is then sent SIGTERM, and SIGKILL after --grace), 69 if the
store fails, 2 on usage errors.
`

func main() {
	os.Exit(mainArgs(os.Args[1:], os.Stdout, os.Stderr))
}

// mainArgs runs one subcommand and returns the exit status.
func mainArgs(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return fail(stderr, exitUsage, "missing subcommand: want run or holder (lease help)")
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stdout, stderr)
	case "holder":
		return cmdHolder(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	return fail(stderr, exitUsage, "unknown subcommand %q: want run or holder (lease help)", args[0])
}

// fail prints a one-line message and returns code.
func fail(stderr io.Writer, code int, format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	msg = strings.ReplaceAll(strings.TrimSpace(msg), "\n", "; ")
	if !strings.HasPrefix(msg, "lease: ") {
		msg = "lease: " + msg
	}
	fmt.Fprintln(stderr, msg)
	return code
}

// warn prints a one-line message.
func warn(stderr io.Writer, format string, args ...any) { fail(stderr, 0, format, args...) }

// storeURL picks the store: the flag, else $LEASE_STORE, else the default.
func storeURL(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if env := os.Getenv("LEASE_STORE"); env != "" {
		return env
	}
	return defaultStore
}

// checkScheme refuses a store URL that lease.Open cannot understand, so
// that it is reported as a usage error rather than a store failure.
func checkScheme(url string) error {
	scheme, _, ok := strings.Cut(url, ":")
	if !ok {
		return fmt.Errorf("store URL %q has no scheme; want sqlite:, mongodb://, postgres://, file: or memory:", url)
	}
	switch scheme {
	case "sqlite", "mongodb", "mongodb+srv", "postgres", "postgresql", "file", "memory":
		return nil
	}
	return fmt.Errorf("unknown store scheme %q in %q; want sqlite:, mongodb://, postgres://, file: or memory:", scheme, url)
}
