package lease

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// Precondition guards a Driver.Put: the write happens only if it holds.
// Exactly one of the two forms is used: Absent, or a Version from Get or Put.
type Precondition struct {
	Absent  bool   // no record may exist for the key
	Version uint64 // the stored record's version must equal this
}

// Driver is a key-value document backend with compare-and-swap writes. It
// is the contract between DocumentStore and a database, in the manner of
// database/sql/driver:
//
//   - All methods are safe for concurrent use and honour ctx.
//   - Get returns the record and its version, or an error matching
//     ErrNotFound when no record exists. A record that cannot be parsed is
//     an error matching ErrCorrupt, never a zero Record.
//   - Put writes rec atomically if pre holds and returns the new version,
//     which is larger than every earlier version of that key. If pre does
//     not hold it writes nothing and returns an error matching ErrConflict.
//     Any other error means the outcome is unknown: the store re-reads (R9).
//     Put returns only once the write is durable (R2).
//   - Nothing ever deletes a record (R3).
//
// What a driver can do (coordinate processes, how finely it keeps
// ExpiresAt) it states by implementing DriverInfo, not through its name.
// Package leasetest checks a driver against all of this.
type Driver interface {
	// Name names the driver in errors and logs: "memory", "sqlite",
	// "mongodb", "postgres" for the drivers of this module.
	Name() string
	Get(ctx context.Context, key string) (rec Record, version uint64, err error)
	Put(ctx context.Context, rec Record, pre Precondition) (version uint64, err error)
	// Close releases the driver's resources. Later calls fail with ErrClosed.
	Close() error
}

// Capabilities is what a document driver states about itself, through
// DriverInfo. The zero value is the safe assumption for a driver that says
// nothing: it coordinates the stores of one process only, and keeps
// ExpiresAt exactly (as the memory driver does).
type Capabilities struct {
	// CrossProcess: the driver's compare-and-swap excludes writers in other
	// processes (and on other hosts, for a server), not only goroutines.
	CrossProcess bool
	// ExpiryResolution is how finely stored records keep ExpiresAt: the
	// driver truncates it to a multiple of this (time.Millisecond for SQLite
	// and BSON dates). Zero: a time.Time is kept as it is. DocumentStore
	// rounds new expiries down to it, so that a grant equals its record.
	ExpiryResolution time.Duration
	// ServerClock: the driver's database server has a clock that judges
	// expiry (R8), and the driver reports its reading with the answer to
	// every call through ReportServerTime. A DocumentStore over it that
	// was not given WithClock then takes keys, renews and lists by its
	// estimate of the server's clock, never by its host's: skew between
	// hosts no longer matters, only the server's clock does.
	ServerClock bool
	// Sessions: the driver keeps session records (it is a SessionDriver)
	// and each key record's Session exactly, with the compare-and-swap,
	// versions, durability and unknown-outcome handling of key records
	// (R24). A DocumentStore over it keeps every Held it makes through one
	// session record, renewed once per period whatever the number of keys
	// (R18–R23); over any other driver it renews each key.
	Sessions bool
}

// DriverInfo is a Driver that states its capabilities. A driver written
// outside this module implements it to be used for what it is; see
// leasetest for the suite that checks what it states.
type DriverInfo interface {
	Driver
	Capabilities() Capabilities
}

// DriverCapabilities returns what d states about itself, or the zero
// Capabilities (one process, exact expiry) when d does not implement DriverInfo.
func DriverCapabilities(d Driver) Capabilities {
	if info, ok := d.(DriverInfo); ok {
		return info.Capabilities()
	}
	return Capabilities{}
}

// crossProcessDrivers names the drivers of this module that coordinate
// separate processes (R11). The names are fixed here rather than asked of
// the driver packages, so that the answer does not depend on which of them
// a program imports.
var crossProcessDrivers = map[string]bool{"mongodb": true, "postgres": true, "sqlite": true}

// DriverHasCrossProcessCAS reports whether the document driver of this
// module with the given name can coordinate separate processes (R11): true
// for "mongodb", "postgres" and "sqlite", false for "memory", "file" and any
// other name, including the names of drivers written outside this module.
//
// Use DriverCapabilities(d).CrossProcess instead when you have the driver:
// it asks the driver itself, so it answers for any driver. This function
// knows only the names this module ships; it stays because R11 names it.
func DriverHasCrossProcessCAS(driver string) bool {
	return crossProcessDrivers[driver]
}

// NewMemoryDriver returns a driver that keeps records in this process's
// memory. It coordinates goroutines, not processes: every store that shares
// one leases from the others, and everything is gone when the process exits.
// Use it in tests and examples.
func NewMemoryDriver() Driver {
	return &memoryDriver{docs: make(map[string]memoryDoc), sessions: make(map[string]memorySession)}
}

var (
	_ DriverInfo    = (*memoryDriver)(nil)
	_ BatchDriver   = (*memoryDriver)(nil)
	_ BatchReader   = (*memoryDriver)(nil)
	_ ListDriver    = (*memoryDriver)(nil)
	_ SessionDriver = (*memoryDriver)(nil)
)

type memoryDoc struct {
	rec     Record
	version uint64
}

type memoryDriver struct {
	mu       sync.Mutex // guards the fields below
	docs     map[string]memoryDoc
	sessions map[string]memorySession
	closed   bool
}

type memorySession struct {
	rec     SessionRecord
	version uint64
}

func (d *memoryDriver) Name() string { return "memory" }

// Capabilities: one process; a time.Time kept exactly; sessions.
func (*memoryDriver) Capabilities() Capabilities { return Capabilities{Sessions: true} }

func (d *memoryDriver) Get(ctx context.Context, key string) (Record, uint64, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return Record{}, 0, ErrClosed
	}
	doc, ok := d.docs[key]
	if !ok {
		return Record{}, 0, ErrNotFound
	}
	return doc.rec, doc.version, nil
}

func (d *memoryDriver) Put(ctx context.Context, rec Record, pre Precondition) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, ErrClosed
	}
	return d.putLocked(rec, pre)
}

// putLocked applies one conditional write. d.mu must be held.
func (d *memoryDriver) putLocked(rec Record, pre Precondition) (uint64, error) {
	doc, exists := d.docs[rec.Key]
	if pre.Absent == exists || (exists && doc.version != pre.Version) {
		return 0, ErrConflict
	}
	d.docs[rec.Key] = memoryDoc{rec: rec, version: doc.version + 1}
	return doc.version + 1, nil
}

func (d *memoryDriver) PutMany(ctx context.Context, ws []Write) ([]PutResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	results := make([]PutResult, len(ws))
	for i, w := range ws {
		results[i].Version, results[i].Err = d.putLocked(w.Rec, w.Pre)
	}
	return results, nil
}

func (d *memoryDriver) GetMany(ctx context.Context, keys []string) ([]GetResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	results := make([]GetResult, len(keys))
	for i, key := range keys {
		doc, ok := d.docs[key]
		if !ok {
			results[i].Err = ErrNotFound
			continue
		}
		results[i] = GetResult{Rec: doc.rec, Version: doc.version}
	}
	return results, nil
}

func (d *memoryDriver) List(ctx context.Context, prefix, after string, limit int) ([]Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	var recs []Record
	for key, doc := range d.docs {
		if strings.HasPrefix(key, prefix) && key > after {
			recs = append(recs, doc.rec)
		}
	}
	slices.SortFunc(recs, func(a, b Record) int { return strings.Compare(a.Key, b.Key) })
	return recs[:min(len(recs), max(limit, 0))], nil
}

func (d *memoryDriver) GetSession(ctx context.Context, id string) (SessionRecord, uint64, error) {
	if err := ctx.Err(); err != nil {
		return SessionRecord{}, 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return SessionRecord{}, 0, ErrClosed
	}
	sess, ok := d.sessions[id]
	if !ok {
		return SessionRecord{}, 0, ErrNotFound
	}
	return sess.rec, sess.version, nil
}

func (d *memoryDriver) PutSession(ctx context.Context, rec SessionRecord, pre Precondition) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, ErrClosed
	}
	sess, exists := d.sessions[rec.ID]
	if pre.Absent == exists || (exists && sess.version != pre.Version) {
		return 0, ErrConflict
	}
	d.sessions[rec.ID] = memorySession{rec: rec, version: sess.version + 1}
	return sess.version + 1, nil
}

func (d *memoryDriver) RemoveSessions(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, ErrClosed
	}
	named := make(map[string]bool)
	for _, doc := range d.docs {
		named[doc.rec.Session] = true
	}
	removed := 0
	for id, sess := range d.sessions {
		if removed < limit && sess.rec.ExpiresAt.Before(before) && !named[id] {
			delete(d.sessions, id)
			removed++
		}
	}
	return removed, nil
}

func (d *memoryDriver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	return nil
}

// BatchDriver is a Driver that can apply many writes in one round trip.
// DocumentStore uses it, when a driver has it, to renew, acquire and
// release many keys at once (R12); a driver without it gets one Put per key.
type BatchDriver interface {
	Driver
	// PutMany applies each write as Put would: atomically and
	// independently, each with its own precondition. results[i] answers
	// ws[i]: its new version, or an error matching ErrConflict, or another
	// error when that write's outcome is unknown. A non-nil err means the
	// outcome of every write is unknown. It returns once every applied
	// write is durable.
	PutMany(ctx context.Context, ws []Write) (results []PutResult, err error)
}

// Write is one conditional write of a batch.
type Write struct {
	Rec Record
	Pre Precondition
}

// PutResult answers one Write of a batch.
type PutResult struct {
	Version uint64
	Err     error
}

// BatchReader is a Driver that can read many records in one round trip.
// Hold's waiting loop uses it to look at every awaited key at once.
type BatchReader interface {
	Driver
	// GetMany reads each key as Get would. results[i] answers keys[i]: its
	// record and version, or an error matching ErrNotFound when it has no
	// record, or ErrCorrupt when it cannot be parsed. A non-nil err means
	// nothing was read.
	GetMany(ctx context.Context, keys []string) (results []GetResult, err error)
}

// GetResult answers one key of a GetMany.
type GetResult struct {
	Rec     Record
	Version uint64
	Err     error
}

// ListDriver is a Driver that can list records by key prefix. Holders
// uses it; a store over a driver without it cannot list.
type ListDriver interface {
	Driver
	// List returns at most limit records whose keys begin with prefix and
	// sort after `after` ("" for the first page), in ascending key order.
	List(ctx context.Context, prefix, after string, limit int) ([]Record, error)
}
