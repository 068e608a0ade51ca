package leasetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasekit/lease"
)

// ErrInjected is the error the fault wrappers return for a failure they made.
var ErrInjected = errors.New("leasetest: injected fault")

// Fault is how FaultDriver fails the next Put.
type Fault int

const (
	// NoFault lets the next Put through.
	NoFault Fault = iota
	// FailBeforeApply fails the next Put without writing: the old state stands.
	FailBeforeApply
	// FailAfterApply writes the next Put, then reports ErrInjected, as a
	// reply lost after the commit: the store cannot tell what happened (R9).
	FailAfterApply
	// FailAfterApplyAndReread is FailAfterApply, and the Get that follows
	// it (the store's re-read) fails too, so the outcome stays unknown.
	FailAfterApplyAndReread
)

// FaultDriver wraps a Driver to count its calls and to fail chosen ones.
// It states the capabilities of the driver it wraps but Sessions, and
// hides its optional interfaces (batches, lists, sessions), so every call
// is a Get or a Put: a store over it keeps every key per key.
type FaultDriver struct {
	lease.Driver
	mu         sync.Mutex // guards the fields below
	gets, puts int
	putFault   Fault
	failGets   int // fail this many following Gets
}

// NewFaultDriver wraps d.
func NewFaultDriver(d lease.Driver) *FaultDriver { return &FaultDriver{Driver: d} }

// FailNextPut makes the next Put fail as fault says.
func (f *FaultDriver) FailNextPut(fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.putFault = fault
}

// FailGets makes the next n Gets fail with ErrInjected.
func (f *FaultDriver) FailGets(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failGets = n
}

// Calls returns how many Gets and Puts reached the wrapper: the store's
// storage round trips.
func (f *FaultDriver) Calls() (gets, puts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets, f.puts
}

// Capabilities states what the wrapped driver states, but Sessions.
func (f *FaultDriver) Capabilities() lease.Capabilities { return withoutSessions(f.Driver) }

// withoutSessions is what d states, but Sessions: a wrapper that does not
// forward the session methods must not claim them (R24).
func withoutSessions(d lease.Driver) lease.Capabilities {
	caps := lease.DriverCapabilities(d)
	caps.Sessions = false
	return caps
}

// Get reads through the wrapped driver unless a failure is due.
func (f *FaultDriver) Get(ctx context.Context, key string) (lease.Record, uint64, error) {
	f.mu.Lock()
	f.gets++
	fail := f.failGets > 0
	if fail {
		f.failGets--
	}
	f.mu.Unlock()
	if fail {
		return lease.Record{}, 0, ErrInjected
	}
	return f.Driver.Get(ctx, key)
}

// Put writes through the wrapped driver, failing as FailNextPut said.
func (f *FaultDriver) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	f.mu.Lock()
	f.puts++
	fault := f.putFault
	f.putFault = NoFault
	f.mu.Unlock()
	if fault == FailBeforeApply {
		return 0, ErrInjected
	}
	v, err := f.Driver.Put(ctx, rec, pre)
	if err != nil || fault == NoFault {
		return v, err
	}
	if fault == FailAfterApplyAndReread {
		f.FailGets(1)
	}
	return 0, ErrInjected
}

// Slow returns d with every Get and Put delayed by delay, as behind a
// distant server; a call whose ctx ends while it waits fails with the
// ctx's error and reaches nothing. It widens every race window. Like
// FaultDriver it states d's capabilities but Sessions, and hides d's
// optional interfaces.
func Slow(d lease.Driver, delay time.Duration) lease.Driver {
	return &slowDriver{Driver: d, delay: delay}
}

type slowDriver struct {
	lease.Driver
	delay time.Duration
}

func (s *slowDriver) Capabilities() lease.Capabilities { return withoutSessions(s.Driver) }

func (s *slowDriver) wait(ctx context.Context) error {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *slowDriver) Get(ctx context.Context, key string) (lease.Record, uint64, error) {
	if err := s.wait(ctx); err != nil {
		return lease.Record{}, 0, err
	}
	return s.Driver.Get(ctx, key)
}

func (s *slowDriver) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	if err := s.wait(ctx); err != nil {
		return 0, err
	}
	return s.Driver.Put(ctx, rec, pre)
}

// GarbageGets returns d with every Get answering rec, whatever the key (as
// a backend holding a record no store could have written), or, with rec
// nil, an error matching ErrCorrupt (as a driver that cannot parse what it
// read). Puts reach d. It states d's capabilities but Sessions, and hides
// d's optional interfaces.
func GarbageGets(d lease.Driver, rec *lease.Record) lease.Driver {
	return &garbageDriver{Driver: d, rec: rec}
}

type garbageDriver struct {
	lease.Driver
	rec *lease.Record
}

func (g *garbageDriver) Capabilities() lease.Capabilities { return withoutSessions(g.Driver) }

func (g *garbageDriver) Get(context.Context, string) (lease.Record, uint64, error) {
	if g.rec == nil {
		return lease.Record{}, 0, fmt.Errorf("leasetest: epoch is a string: %w", lease.ErrCorrupt)
	}
	return *g.rec, 1, nil
}
