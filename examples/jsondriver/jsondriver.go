// Package jsondriver is a worked example of a lease.Driver written outside
// package lease: one JSON document per key in a directory, with an flock
// around each compare-and-swap. Stores in several processes on one host can
// share a directory. It passes leasetest.TestDriver (see its test), which
// is how a driver proves that it keeps the contract.
//
//	d, err := jsondriver.Open("/var/lib/myapp/leases")
//	store, err := lease.NewDocumentStore(d, lease.WithOwner(...))
package jsondriver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"
	"github.com/leasekit/lease"
)

// Driver keeps each key's record in <dir>/<sha256(key)>.json and serialises
// writes to a key with an flock on <dir>/<sha256(key)>.lock. Hashing the
// key keeps every file name short and safe whatever the key (R1 allows
// '/', ':' and '@'); the document names its key, and a document under the
// wrong name is corrupt (R10).
type Driver struct {
	dir string

	mu     sync.Mutex // guards closed
	closed bool
}

var (
	_ lease.DriverInfo = (*Driver)(nil)
	_ lease.ListDriver = (*Driver)(nil)
)

// document is a record as stored: the record and its version.
type document struct {
	Key       string    `json:"key"`
	Owner     string    `json:"owner"`
	Epoch     uint64    `json:"epoch"`
	ExpiresAt time.Time `json:"expires_at"` // RFC 3339 with nanoseconds: kept exactly
	Released  bool      `json:"released"`
	Version   uint64    `json:"version"`
}

// lockRetry is how often a Put waiting for another writer's flock retries.
const lockRetry = time.Millisecond

// Open returns a driver on dir, creating it if needed.
func Open(dir string) (*Driver, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("jsondriver: %w", err)
	}
	return &Driver{dir: dir}, nil
}

// Name is "jsondir". What the driver can do, it states in Capabilities.
func (d *Driver) Name() string { return "jsondir" }

// Capabilities: flocks exclude other processes on this host; JSON keeps a
// time.Time to the nanosecond.
func (d *Driver) Capabilities() lease.Capabilities {
	return lease.Capabilities{CrossProcess: true}
}

// Close makes later calls fail with lease.ErrClosed.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	return nil
}

func (d *Driver) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return lease.ErrClosed
	}
	return nil
}

func (d *Driver) path(key, ext string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(d.dir, hex.EncodeToString(sum[:])+ext)
}

// Get returns key's record and version, lease.ErrNotFound, or an error
// matching lease.ErrCorrupt for a document that does not parse. Writes
// replace documents by rename, so a read sees a whole one without a lock.
func (d *Driver) Get(ctx context.Context, key string) (lease.Record, uint64, error) {
	if err := d.usable(ctx); err != nil {
		return lease.Record{}, 0, err
	}
	doc, err := readDocument(d.path(key, ".json"))
	if err != nil {
		return lease.Record{}, 0, err
	}
	return doc.record(), doc.Version, nil
}

func readDocument(path string) (document, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return document{}, lease.ErrNotFound
	}
	if err != nil {
		return document{}, fmt.Errorf("jsondriver: %w", err)
	}
	var doc document
	if err := json.Unmarshal(b, &doc); err != nil {
		return document{}, fmt.Errorf("jsondriver: %s: %w: %v", filepath.Base(path), lease.ErrCorrupt, err)
	}
	if doc.Version == 0 {
		return document{}, fmt.Errorf("jsondriver: %s: %w: version 0", filepath.Base(path), lease.ErrCorrupt)
	}
	return doc, nil
}

func (doc document) record() lease.Record {
	return lease.Record{Key: doc.Key, Owner: doc.Owner, Epoch: doc.Epoch, ExpiresAt: doc.ExpiresAt, Released: doc.Released}
}

// Put writes rec if pre holds, under the key's flock: read the current
// version, compare, write a new file, fsync it, rename it into place and
// fsync the directory, so that the write is durable before Put returns (R2).
func (d *Driver) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	if err := d.usable(ctx); err != nil {
		return 0, err
	}
	lock := flock.New(d.path(rec.Key, ".lock"))
	defer lock.Close() // unlocks, and closes the lock file even if locking failed
	if ok, err := lock.TryLockContext(ctx, lockRetry); !ok {
		return 0, fmt.Errorf("jsondriver: locking %q: %w", rec.Key, errors.Join(err, ctx.Err()))
	}
	path := d.path(rec.Key, ".json")
	cur, err := readDocument(path)
	exists := err == nil
	if err != nil && !errors.Is(err, lease.ErrNotFound) {
		return 0, err
	}
	if pre.Absent == exists || (exists && cur.Version != pre.Version) {
		return 0, lease.ErrConflict
	}
	next := document{Key: rec.Key, Owner: rec.Owner, Epoch: rec.Epoch, ExpiresAt: rec.ExpiresAt, Released: rec.Released, Version: cur.Version + 1}
	if err := writeDurably(d.dir, path, next); err != nil {
		return 0, fmt.Errorf("jsondriver: writing %q: %w", rec.Key, err)
	}
	return next.Version, nil
}

func writeDurably(dir, path string, doc document) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	dirf, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer dirf.Close()
	return dirf.Sync()
}

// List returns at most limit records whose keys begin with prefix and sort
// after after, in key order. It reads every document: fine for the few
// hundred keys of one host, and what lets Store.Holders work (R14).
func (d *Driver) List(ctx context.Context, prefix, after string, limit int) ([]lease.Record, error) {
	if err := d.usable(ctx); err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(d.dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("jsondriver: %w", err)
	}
	var recs []lease.Record
	for _, p := range paths {
		doc, err := readDocument(p)
		if errors.Is(err, lease.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if strings.HasPrefix(doc.Key, prefix) && doc.Key > after {
			recs = append(recs, doc.record())
		}
	}
	slices.SortFunc(recs, func(a, b lease.Record) int { return strings.Compare(a.Key, b.Key) })
	return recs[:min(len(recs), max(limit, 0))], nil
}
