package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/leasekit/lease"
)

// runFlags are lease run's options.
type runFlags struct {
	store    string
	ttl      time.Duration
	noWait   bool
	timeout  time.Duration
	conflict int
	grace    time.Duration
	quiet    bool
	verbose  bool
}

// cmdRun is "lease run": hold KEY while COMMAND runs.
func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("run")
	var f runFlags
	fs.StringVar(&f.store, "store", "", "store URL")
	fs.DurationVar(&f.ttl, "ttl", lease.DefaultTTL, "lease TTL; renewed every third of it")
	fs.BoolVar(&f.noWait, "no-wait", false, "fail at once if KEY is held")
	fs.DurationVar(&f.timeout, "timeout", 0, "give up waiting for KEY after this long")
	fs.IntVar(&f.conflict, "conflict-exit-code", exitConflict, "exit status when KEY is held")
	fs.DurationVar(&f.grace, "grace", 0, "after loss or a signal, SIGKILL this long after the stop signal (default TTL/12)")
	fs.BoolVar(&f.quiet, "quiet", false, "do not say whom lease waits for")
	fs.BoolVar(&f.verbose, "verbose", os.Getenv("LEASE_LOG") == "debug", "print every lease event on stderr (also LEASE_LOG=debug)")
	key, argv, err := parseKey(fs, args)
	url := storeURL(f.store)
	if err == nil {
		err = f.check(key, argv, url)
	}
	if err != nil {
		return exitFor(err, stdout, stderr)
	}
	exe, err := os.Executable()
	if err != nil {
		return fail(stderr, exitNoExec, "cannot find this program to start its guard: %v", err)
	}

	// Until the wait for KEY starts, signals have their default effect:
	// nothing is held yet.
	opts := []lease.Option{lease.WithTTL(f.ttl)}
	if f.verbose {
		opts = append(opts, lease.WithObserver(verboseObserver(stderr)))
	}
	s, err := lease.Open(context.Background(), url, opts...)
	if err != nil {
		return fail(stderr, exitStore, "%v", err)
	}
	defer s.Close()
	// From now on signals stop the wait for KEY, and are forwarded to
	// COMMAND once it runs.
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)
	h, code := f.hold(s, key, sigc, stderr)
	if h == nil {
		return code
	}
	sv := supervisor{
		stdin: os.Stdin, stdout: os.Stdout, stderr: stderr, sigc: sigc, grace: f.grace,
		renewCheck: max(f.ttl/12, time.Millisecond), guard: []string{exe, guardCmd}, lockDir: lockDirOf(url), subreaper: true,
	}
	return sv.run(h, argv)
}

// minTTL is the shortest TTL the stores accept (records keep milliseconds).
const minTTL = time.Millisecond

// check validates the command line beyond what the flag package does,
// before any store is opened: every mistake is a usage error, never a
// store failure.
func (f *runFlags) check(key string, argv []string, url string) error {
	switch {
	case len(argv) == 0:
		return usagef("run: missing COMMAND after KEY (lease help)")
	case f.noWait && f.timeout > 0:
		return usagef("run: --no-wait and --timeout exclude each other")
	case f.timeout < 0:
		return usagef("run: --timeout %v is negative", f.timeout)
	case f.ttl < minTTL:
		return usagef("run: --ttl %v is below the %v minimum", f.ttl, minTTL)
	case f.grace < 0:
		return usagef("run: --grace %v is negative", f.grace)
	case f.conflict < 0 || f.conflict > 255:
		return usagef("run: --conflict-exit-code %d is not in 0..255", f.conflict)
	}
	if err := lease.ValidateKey(key); err != nil {
		return usagef("%v", err)
	}
	if err := checkScheme(url); err != nil {
		return usagef("%v", err)
	}
	if !canSupervise {
		return usagef("run: supervising COMMAND needs a Unix system")
	}
	// Renewals that keep failing end the lease a safety margin (TTL/6)
	// before it expires; COMMAND must be gone by then.
	switch {
	case lockDirOf(url) != "": // file: grants never expire
	case f.grace >= f.margin():
		return usagef("run: --grace %v is not shorter than the safety margin (a sixth of --ttl %v): COMMAND could outlive the lease; raise --ttl", f.grace, f.ttl)
	}
	if f.grace == 0 {
		f.grace = f.ttl / 12 // half the safety margin
	}
	return nil
}

// margin is the Held's safety margin: it gives the lease up at its expiry
// minus this when renewals keep failing, and the guard stops COMMAND by
// then on its own when lease run sends no renewal (see the package doc).
func (f *runFlags) margin() time.Duration { return f.ttl / 6 }

// hold waits for KEY as the flags say. On failure it returns a nil Held
// and the exit status, having printed why.
func (f *runFlags) hold(s lease.Store, key string, sigc <-chan os.Signal, stderr io.Writer) (*lease.Held, int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if f.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	opts := []lease.HoldOption{lease.SafetyMargin(f.margin())}
	if f.noWait {
		opts = append(opts, lease.FailIfHeld())
	}

	var got os.Signal
	stop, watched, told := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case got = <-sigc:
			cancel()
		case <-stop:
		}
	}()
	if f.quiet || f.noWait {
		close(told)
	} else {
		go func() {
			defer close(told)
			sayWhyWaiting(ctx, s, key, stderr, stop)
		}()
	}
	h, err := lease.Hold(ctx, s, key, opts...)
	close(stop)
	<-watched
	<-told

	if got != nil { // interrupted: leave as the signal would have left us
		if h != nil {
			_ = h.Release(context.Background())
		}
		return nil, 128 + signum(got)
	}
	var held *lease.HeldError
	switch {
	case err == nil:
		return h, 0
	case errors.As(err, &held) && f.timeout > 0:
		return nil, fail(stderr, f.conflict, "gave up after --timeout %v: %s", f.timeout, strings.TrimPrefix(held.Error(), "lease: "))
	case errors.As(err, &held):
		return nil, fail(stderr, f.conflict, "%v", held)
	case errors.Is(err, lease.ErrHeld):
		return nil, fail(stderr, f.conflict, "%v", err)
	case errors.Is(err, lease.ErrInvalidKey):
		return nil, fail(stderr, exitUsage, "%v", err)
	}
	return nil, fail(stderr, exitStore, "%v", err)
}

// signum returns sig's number, for the 128+N exit convention.
func signum(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 0
}

// How lease run says whom it waits for: a first line once it has waited
// waitNoticeAfter (a wait shorter than that goes unmentioned), then a look
// at the holder every waitNoticeEvery, and a line whenever it changed.
const (
	waitNoticeAfter = time.Second
	waitNoticeEvery = time.Second
)

// sayWhyWaiting writes a line on stderr naming KEY's holder, its epoch and
// when its grant runs out, once the wait has lasted waitNoticeAfter and
// again each time the holder changes, until stop closes or ctx ends. It
// costs one read of KEY every waitNoticeEvery while lease run waits.
func sayWhyWaiting(ctx context.Context, s lease.Store, key string, stderr io.Writer, stop <-chan struct{}) {
	t := time.NewTimer(waitNoticeAfter)
	defer t.Stop()
	var told lease.Record
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rec, err := s.Holder(ctx, key)
		select {
		case <-stop: // got KEY meanwhile: the line would be stale
			return
		default:
		}
		if err == nil && (rec.Owner != told.Owner || rec.Epoch != told.Epoch) {
			told = rec
			warn(stderr, "%s", waitingLine(rec, time.Now()))
		}
		t.Reset(waitNoticeEvery)
	}
}

// waitingLine says whom lease run waits for, as of now.
func waitingLine(rec lease.Record, now time.Time) string {
	if rec.ExpiresAt.IsZero() {
		return fmt.Sprintf("waiting for %s: held by %s (epoch %d) until it is released or its process ends",
			rec.Key, rec.Owner, rec.Epoch)
	}
	return fmt.Sprintf("waiting for %s: held by %s (epoch %d) until %s (in %v)",
		rec.Key, rec.Owner, rec.Epoch, rec.ExpiresAt.UTC().Format(time.RFC3339Nano), rec.ExpiresAt.Sub(now).Round(100*time.Millisecond))
}

// verboseObserver prints every lease event as one slog text line on w
// (--verbose, LEASE_LOG=debug).
func verboseObserver(w io.Writer) lease.Observer {
	return lease.NewSlogObserver(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})))
}
