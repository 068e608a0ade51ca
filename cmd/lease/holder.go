package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/leasekit/lease"
)

// holderJSON is lease holder --json's output, and each line of lease list
// --json. Owner, epoch and expires describe a live holder; expires is
// absent for grants that never expire (the file: store); session names
// the session the key is attached to (R18), and is absent for a key kept
// per key. For a free key, last_owner, last_epoch, last_session and
// released describe what its last holder left (absent if it was never
// held): released false means that holder ended without releasing, and
// the next holder gets PreviousUnclean, unless the holder kept the key
// through a session that ended cleanly (R21, R22).
type holderJSON struct {
	Key         string     `json:"key"`
	Held        bool       `json:"held"`
	Owner       string     `json:"owner,omitempty"`
	Epoch       uint64     `json:"epoch,omitempty"`
	Expires     *time.Time `json:"expires,omitempty"`
	Session     string     `json:"session,omitempty"`
	LastOwner   string     `json:"last_owner,omitempty"`
	LastEpoch   uint64     `json:"last_epoch,omitempty"`
	LastSession string     `json:"last_session,omitempty"`
	Released    *bool      `json:"released,omitempty"`
}

// recordReader is a store that can show a key's record whatever its
// state; both of the library's stores can.
type recordReader interface {
	Record(ctx context.Context, key string) (lease.Record, error)
}

// cmdHolder is "lease holder": print who holds KEY, or what its last
// holder left.
func cmdHolder(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("holder")
	store := fs.String("store", "", "store URL")
	asJSON := fs.Bool("json", false, "print JSON")
	key, rest, err := parseKey(fs, args)
	url := storeURL(*store)
	switch {
	case err != nil:
	case len(rest) > 0:
		err = usagef("holder: unexpected %q after KEY", rest[0])
	default:
		if verr := lease.ValidateKey(key); verr != nil {
			err = usagef("%v", verr)
		} else if serr := checkScheme(url); serr != nil {
			err = usagef("%v", serr)
		}
	}
	if err != nil {
		return exitFor(err, stdout, stderr)
	}
	out := holderJSON{Key: key}
	if missing := missingStore(url); missing != "" {
		printHolder(stdout, out, *asJSON, missing)
		return 0
	}
	ctx := context.Background()
	s, err := lease.Open(ctx, url)
	if err != nil {
		return fail(stderr, exitStore, "%v", err)
	}
	defer s.Close()
	out, err = lookHolder(ctx, s, key)
	if err != nil {
		return fail(stderr, exitStore, "%v", err)
	}
	printHolder(stdout, out, *asJSON, "")
	return 0
}

// lookHolder describes key's live holder in s, or what its last holder left.
func lookHolder(ctx context.Context, s lease.Store, key string) (holderJSON, error) {
	rec, err := s.Holder(ctx, key)
	switch {
	case errors.Is(err, lease.ErrNotFound):
		out := holderJSON{Key: key}
		return out, lastHolder(ctx, s, key, &out)
	case err != nil:
		return holderJSON{}, err
	}
	return heldJSON(rec), nil
}

// heldJSON describes a live holder's record. Its expiry is the record's,
// which for a session-attached key is the session's (R20, R23).
func heldJSON(rec lease.Record) holderJSON {
	out := holderJSON{Key: rec.Key, Held: true, Owner: rec.Owner, Epoch: rec.Epoch, Session: rec.Session}
	if !rec.ExpiresAt.IsZero() {
		exp := rec.ExpiresAt.UTC()
		out.Expires = &exp
	}
	return out
}

// lastHolder fills in what free key's last holder left, if anything.
func lastHolder(ctx context.Context, s lease.Store, key string, out *holderJSON) error {
	rr, ok := s.(recordReader)
	if !ok {
		return nil
	}
	rec, err := rr.Record(ctx, key)
	switch {
	case errors.Is(err, lease.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	out.LastOwner, out.LastEpoch, out.LastSession, out.Released = rec.Owner, rec.Epoch, rec.Session, &rec.Released
	return nil
}

// printHolder prints out as JSON or as a sentence; why says why nothing
// was looked up (a store that does not exist).
func printHolder(w io.Writer, out holderJSON, asJSON bool, why string) {
	if asJSON {
		b, _ := json.Marshal(out) // cannot fail: plain fields
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	switch {
	case why != "":
		fmt.Fprintf(w, "%s is free (%s)\n", out.Key, why)
	case out.Held && out.Expires == nil:
		fmt.Fprintf(w, "%s is held by %s (%s), no expiry\n", out.Key, out.Owner, heldBy(out))
	case out.Held:
		fmt.Fprintf(w, "%s is held by %s (%s) until %s\n", out.Key, out.Owner, heldBy(out),
			out.Expires.Format(time.RFC3339Nano))
	case out.Released == nil:
		fmt.Fprintf(w, "%s is free (never held)\n", out.Key)
	case *out.Released:
		fmt.Fprintf(w, "%s is free (%s released epoch %d cleanly)\n", out.Key, out.LastOwner, out.LastEpoch)
	case out.LastSession != "":
		// Free and not released: its session expired or was ended by a
		// taker (a clean end reads as released, R22).
		fmt.Fprintf(w, "%s is free (%s held epoch %d through session %s, which ended without a release: the next holder gets PreviousUnclean)\n",
			out.Key, out.LastOwner, out.LastEpoch, out.LastSession)
	default:
		fmt.Fprintf(w, "%s is free (%s never released epoch %d: the next holder gets PreviousUnclean)\n",
			out.Key, out.LastOwner, out.LastEpoch)
	}
}

// heldBy is the epoch of a live holder, and its session if it has one.
func heldBy(out holderJSON) string {
	if out.Session != "" {
		return fmt.Sprintf("epoch %d, session %s", out.Epoch, out.Session)
	}
	return fmt.Sprintf("epoch %d", out.Epoch)
}

// missingStore returns why nothing can be held when url names a store
// that does not exist yet (an SQLite file or a file: directory), so that
// looking does not create it; "" when the store may exist.
func missingStore(url string) string {
	if _, rest, _ := strings.Cut(url, ":"); strings.HasPrefix(rest, "//") && !strings.HasPrefix(rest, "///") || strings.Contains(rest, "?") {
		// Names a host, or has a query: lease.Open refuses it without
		// showing it (its user info or query may hold a password).
		return ""
	}
	path, ok := strings.CutPrefix(url, "sqlite:")
	if !ok {
		path = lockDirOf(url)
	}
	if path == "" {
		return ""
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return fmt.Sprintf("nothing is held: %s does not exist", path)
	}
	return ""
}
