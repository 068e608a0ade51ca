package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/leasekit/lease"
)

// holderJSON is lease holder --json's output. Owner, epoch and expires
// are absent when the key is free; expires is absent for grants that
// never expire (the file: store).
type holderJSON struct {
	Key     string     `json:"key"`
	Held    bool       `json:"held"`
	Owner   string     `json:"owner,omitempty"`
	Epoch   uint64     `json:"epoch,omitempty"`
	Expires *time.Time `json:"expires,omitempty"`
}

// cmdHolder is "lease holder": print who holds KEY, or that it is free.
func cmdHolder(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("holder")
	store := fs.String("store", "", "store URL")
	asJSON := fs.Bool("json", false, "print JSON")
	key, rest, err := parseKey(fs, args)
	switch {
	case err != nil:
	case len(rest) > 0:
		err = usagef("holder: unexpected %q after KEY", rest[0])
	default:
		if verr := lease.ValidateKey(key); verr != nil {
			err = usagef("%v", verr)
		}
	}
	if err != nil {
		return exitFor(err, stdout, stderr)
	}
	url := storeURL(*store)
	if err := checkScheme(url); err != nil {
		return fail(stderr, exitUsage, "%v", err)
	}
	ctx := context.Background()
	s, err := lease.Open(ctx, url)
	if err != nil {
		return fail(stderr, exitStore, "%v", err)
	}
	defer s.Close()
	rec, err := s.Holder(ctx, key)
	out := holderJSON{Key: key}
	switch {
	case errors.Is(err, lease.ErrNotFound):
	case err != nil:
		return fail(stderr, exitStore, "%v", err)
	default:
		out.Held, out.Owner, out.Epoch = true, rec.Owner, rec.Epoch
		if !rec.ExpiresAt.IsZero() {
			exp := rec.ExpiresAt.UTC()
			out.Expires = &exp
		}
	}
	if *asJSON {
		b, _ := json.Marshal(out) // cannot fail: plain fields
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	switch {
	case !out.Held:
		fmt.Fprintf(stdout, "%s is free\n", key)
	case out.Expires == nil:
		fmt.Fprintf(stdout, "%s is held by %s (epoch %d), no expiry\n", key, out.Owner, out.Epoch)
	default:
		fmt.Fprintf(stdout, "%s is held by %s (epoch %d) until %s\n", key, out.Owner, out.Epoch,
			out.Expires.Format(time.RFC3339Nano))
	}
	return 0
}
