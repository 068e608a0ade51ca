// Command lease holds a keyed lease while a command runs, in the manner
// of flock(1), etcdctl lock and consul lock, and reports who holds keys.
// README.md in this directory walks through it, with the environment
// COMMAND gets and a table of what lease run does in each case.
//
// Usage:
//
//	lease run [--store URL] [--ttl D] [--no-wait | --timeout D] [--conflict-exit-code N] [--grace D] [--quiet] [--verbose] KEY -- COMMAND [ARGS...]
//	lease holder [--store URL] [--json] KEY
//	lease list [--store URL] [--json] [PREFIX]
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
//	76                     the lease was lost while COMMAND ran, or lease run renewed it too late
//	                       (stopped, starved); COMMAND was stopped
//	126, 127               COMMAND could not be started / was not found
//	128+N                  lease itself got signal N (SIGINT, SIGTERM, SIGHUP), while waiting for KEY
//	                       or while COMMAND ran (COMMAND's group was then stopped)
//
// lease holder and lease list exit 0 whether keys are held or not, 2 on
// usage errors and 69 when the store fails. Neither creates a store that
// does not exist.
//
// # Nothing COMMAND started outlives the lease
//
// The promise of lease run is that COMMAND's work ends before the lease can
// pass on, whatever happens to lease run itself. Three processes share
// the work:
//
//	lease run ── guard (lease _guard) ── COMMAND ── what COMMAND starts
//
// lease run holds the lease: it waits for KEY, renews it, releases it, and
// tells the guard what to do over a pipe (one byte per order: stop because
// the lease was lost, or forward signal N; or a byte and eight more: the
// lease's new deadline, after each renewal). It starts the guard only once
// the lease is held, and releases the lease only after the guard has
// exited, which the guard does only once COMMAND's whole tree is gone.
//
// The guard keeps the lease's deadline itself (a dead man's switch): the
// Held's (R8), when lease run sent its last successful renewal, plus the
// TTL, minus the safety margin (TTL/6), on the host's monotonic
// clock (CLOCK_MONOTONIC, which every process reads alike and no change of
// the wall clock moves). lease run sends it at start and after every
// renewal. When --grace before that deadline comes and no newer one has
// (lease run is stopped by SIGSTOP or a frozen cgroup, starved, or
// wedged), the guard stops COMMAND's tree as on loss, SIGTERM then SIGKILL
// at the deadline, and exits 76: the tree is gone before the lease can
// expire and pass on, whatever became of lease run.
//
// The guard starts COMMAND in a new process group and is its parent. On
// Linux it is the child subreaper of COMMAND's tree (PR_SET_CHILD_SUBREAPER):
// every process the tree orphans, even one that left the group (setsid, a
// double fork), becomes the guard's child, so the guard can see the whole
// tree in /proc, signal it, and reap it: no zombie or orphan is left. To
// stop the tree it sends SIGTERM (or the forwarded signal) to the group
// and, after --grace, SIGKILL to the group and to every descendant,
// repeating the sweep until it has no child left. It exits only then,
// with COMMAND's status. When COMMAND exits by itself but left processes
// running, the guard stops those the same way before it exits.
//
// When lease run dies, even by SIGKILL, the guard learns it at once: the
// pipe's write end closes (end of file; every system), and the kernel
// sends it a catchable parent-death signal (SIGUSR1, Linux). It then
// SIGKILLs the tree at once, without grace, reaps it, and exits. The guard
// has a process group of its own, so that a signal to lease run's group
// (a shell's job control, timeout(1)) does not kill it along with lease
// run. COMMAND has SIGKILL as its own parent-death signal, and lease run
// is a subreaper too: if the guard itself is killed, COMMAND dies with it
// and lease run kills the orphans that come to it, and leaves the lease
// unreleased, as a crash would.
//
// lease run does not rely on a guard that may itself be stopped (SIGSTOP,
// a debugger) or wedged: if the guard has not exited --grace after the
// last deadline lease run sent it, or, after a stop order or a forwarded
// signal, --grace (at least a second) after the guard's own SIGKILL was
// due, lease run SIGKILLs it. COMMAND dies with it (its parent-death
// signal) and its orphans come to lease run, which kills them; since
// --grace is shorter than the safety margin, this happens before the lease
// can expire. lease run then releases the lease only if it saw the whole
// tree gone, and otherwise leaves it to expire. It writes its orders
// without waiting, so a guard that stopped reading cannot stop it either.
//
// The lease is given up only after the tree is gone:
//
//   - A file: store's lease is a flock, held by an open file description
//     that lease run's store opened. lease run passes copies of those
//     descriptors to the guard (found in /proc/self/fd: the files open in
//     the store's directory), and a flock is released only when the last
//     copy closes (or on an explicit unlock). So when lease run dies, the
//     flock lives on in the guard until the guard has killed and reaped
//     the tree and exited: another lease run cannot get the key while any
//     process of the tree lives. COMMAND never gets these descriptors
//     (close-on-exec in the guard). When lease run releases the lease it
//     unlocks the flock itself, after the guard has exited.
//   - An expiring store's (sqlite:, mongodb://) lease runs out TTL after
//     its last renewal. When lease run dies, the guard's kill lands within
//     milliseconds, far within the TTL. When the lease is lost (a renewal
//     found it taken, or renewals kept failing until a safety margin of
//     TTL/6 before expiry), SIGKILL follows SIGTERM after --grace, which
//     must be shorter than that margin (TTL/12 by default). When lease run
//     is stopped or starved, the guard's own deadline does the same.
//
// What is not covered: lease run and its guard both killed at the same
// instant (SIGKILL to both pids, a cgroup kill, the OOM killer taking
// both): the kernel then kills COMMAND (its parent-death signal), but
// processes it started may survive. The guard stopped together with
// COMMAND (a frozen cgroup holding all three): COMMAND cannot run while
// frozen, but once thawed it runs for the moment the guard needs to act on
// its passed deadline. lease run and its guard both stopped (kill -STOP
// of both, or of every process named lease): nothing is left to act, and
// COMMAND may run on past the lease's expiry, beside the next holder. A
// host that sleeps (suspend): CLOCK_MONOTONIC does not count the sleep on
// Linux, so the guard acts late; lease run's next renewal finds the lease
// lost. COMMAND's writes should carry LEASE_EPOCH as a fencing token for
// these cases. On systems other than Linux there is no subreaper, no
// parent-death signal and no way to list descriptors: the guard still
// stops COMMAND's process group, on loss, on signals and when lease run
// dies, but processes that leave the group are out of its reach, killing
// a stopped guard does not reach COMMAND (lease run then leaves the lease
// to expire), and a file: store's flock ends with lease run itself.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/leasekit/lease/internal/redact"

	// The command serves every store URL of lease.Open: each driver
	// package registers its schemes when imported.
	_ "github.com/leasekit/lease/mongodb"
	_ "github.com/leasekit/lease/postgres"
	_ "github.com/leasekit/lease/sqlite"
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
  lease run [--store URL] [--ttl D] [--no-wait | --timeout D] [--conflict-exit-code N] [--grace D] [--quiet] [--verbose] KEY -- COMMAND [ARGS...]
  lease holder [--store URL] [--json] KEY
  lease list [--store URL] [--json] [PREFIX]

Store URLs: sqlite:PATH, mongodb://HOST/DB?collection=C, postgres://HOST/DB?table=T, file:DIR, memory:
(default: $LEASE_STORE, else sqlite:lease.db)

lease run holds KEY while COMMAND runs and passes it LEASE_KEY, LEASE_EPOCH,
LEASE_OWNER, LEASE_EXPIRES and LEASE_PREVIOUS_UNCLEAN. While it waits for
KEY it says on stderr, after a second and whenever the holder changes,
whom it waits for (--quiet: never); --verbose (or LEASE_LOG=debug) prints
every lease event (acquired, renewed, lost, released, storage calls) as a
log line on stderr. It exits with
COMMAND's status, 75 if KEY is held (--no-wait, --timeout), 76 if the lease
was lost (COMMAND's group is then sent SIGTERM, and SIGKILL after --grace),
128+N after signal N (forwarded to COMMAND's group, SIGKILL after --grace),
69 if the store fails, 2 on usage errors. COMMAND and everything it started
are gone before the lease is released, and are killed if lease dies.

lease holder says who holds KEY (and its session, if any), or what its last
holder left.
lease list prints KEY OWNER EPOCH EXPIRES for every held key under PREFIX.
`

func main() {
	os.Exit(mainArgs(os.Args[1:], os.Stdout, os.Stderr))
}

// mainArgs runs one subcommand and returns the exit status.
func mainArgs(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return fail(stderr, exitUsage, "missing subcommand: want run, holder or list (lease help)")
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stdout, stderr)
	case "holder":
		return cmdHolder(args[1:], stdout, stderr)
	case "list":
		return cmdList(args[1:], stdout, stderr)
	case guardCmd:
		return cmdGuard(args[1:], stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	return fail(stderr, exitUsage, "unknown subcommand %q: want run, holder or list (lease help)", args[0])
}

// fail prints a one-line message with one "lease: " prefix and returns
// code. Library errors wrap one another, each with its own prefix, and
// joined errors span lines: both are folded here.
func fail(stderr io.Writer, code int, format string, args ...any) int {
	fmt.Fprintln(stderr, oneLine(fmt.Sprintf(format, args...)))
	return code
}

// oneLine makes msg one line that says "lease: " once, at the start.
func oneLine(msg string) string {
	msg = strings.ReplaceAll(strings.TrimSpace(msg), "\n", "; ")
	msg = strings.TrimPrefix(msg, "lease: ")
	for _, sep := range []string{": ", "; ", "(", " "} {
		msg = strings.ReplaceAll(msg, sep+"lease: ", sep)
	}
	return "lease: " + msg
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
// that it is reported as a usage error rather than a store failure. Like
// lease.Open's, its errors show no more of url than a scheme that cannot
// hold a password (see internal/redact).
func checkScheme(url string) error {
	scheme, _, ok := strings.Cut(url, ":")
	if !ok {
		return errors.New("store URL has no scheme (no \":\"); want sqlite:, mongodb://, postgres://, file: or memory: (see lease.Open)")
	}
	switch scheme {
	case "sqlite", "mongodb", "mongodb+srv", "postgres", "postgresql", "file", "memory":
		return nil
	}
	return errors.New(redact.UnknownScheme(url) + "; want sqlite:, mongodb://, postgres://, file: or memory: (see lease.Open)")
}
