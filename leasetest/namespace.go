package leasetest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync/atomic"

	"github.com/leasekit/lease"
)

// namespaces numbers the key spaces the suite's cases use.
var namespaces atomic.Int64

// newNamespace returns a key prefix no other case of this process uses, so
// that cases may share one backend: the suite works whether open gives each
// test its own backend or every test the same one.
func newNamespace() string { return fmt.Sprintf("leasetest-%d/", namespaces.Add(1)) }

// nsStore is a Store whose keys live under a prefix the caller does not
// see: keys going in gain it, keys coming out (grants, records, a
// *HeldError) lose it.
type nsStore struct {
	lease.Store
	ns string
}

func (s nsStore) grant(g lease.Grant) lease.Grant {
	g.Key = strings.TrimPrefix(g.Key, s.ns)
	return g
}

// err strips the prefix from a *HeldError's key; other errors pass as they are.
func (s nsStore) err(err error) error {
	var he *lease.HeldError
	if errors.As(err, &he) && strings.HasPrefix(he.Key, s.ns) {
		stripped := *he
		stripped.Key = strings.TrimPrefix(he.Key, s.ns)
		return &stripped
	}
	return err
}

func (s nsStore) Acquire(ctx context.Context, key string) (lease.Grant, error) {
	g, err := s.Store.Acquire(ctx, s.ns+key)
	return s.grant(g), s.err(err)
}

func (s nsStore) Renew(ctx context.Context, g lease.Grant) (lease.Grant, error) {
	g.Key = s.ns + g.Key
	got, err := s.Store.Renew(ctx, g)
	return s.grant(got), s.err(err)
}

func (s nsStore) Release(ctx context.Context, g lease.Grant) error {
	g.Key = s.ns + g.Key
	return s.err(s.Store.Release(ctx, g))
}

func (s nsStore) Holder(ctx context.Context, key string) (lease.Record, error) {
	rec, err := s.Store.Holder(ctx, s.ns+key)
	rec.Key = strings.TrimPrefix(rec.Key, s.ns)
	return rec, s.err(err)
}

func (s nsStore) Holders(ctx context.Context, prefix string) iter.Seq2[lease.Record, error] {
	return func(yield func(lease.Record, error) bool) {
		for rec, err := range s.Store.Holders(ctx, s.ns+prefix) {
			rec.Key = strings.TrimPrefix(rec.Key, s.ns)
			if !yield(rec, err) {
				return
			}
		}
	}
}
