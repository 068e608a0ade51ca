package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/leasekit/lease"
)

// cmdList is "lease list": one line per live holder of a key that begins
// with PREFIX, in key order.
func cmdList(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("list")
	store := fs.String("store", "", "store URL")
	asJSON := fs.Bool("json", false, "print JSON, one object per line")
	prefix, err := parsePrefix(fs, args)
	url := storeURL(*store)
	if err == nil {
		if serr := checkScheme(url); serr != nil {
			err = usagef("%v", serr)
		}
	}
	if err != nil {
		return exitFor(err, stdout, stderr)
	}
	if missing := missingStore(url); missing != "" {
		warn(stderr, "%s", missing)
		return 0
	}
	ctx := context.Background()
	s, err := lease.Open(ctx, url)
	if err != nil {
		return fail(stderr, exitStore, "%v", err)
	}
	defer s.Close()
	if err := listHolders(ctx, s, prefix, stdout, *asJSON); err != nil {
		return fail(stderr, exitStore, "%v", err)
	}
	return 0
}

// listHolders prints every live holder of a key beginning with prefix,
// in the store's order (key order), one per line.
func listHolders(ctx context.Context, s lease.Store, prefix string, w io.Writer, asJSON bool) error {
	for rec, err := range s.Holders(ctx, prefix) {
		if err != nil {
			return err
		}
		printListed(w, rec, asJSON)
	}
	return nil
}

// parsePrefix parses flags on both sides of the optional PREFIX.
func parsePrefix(fs *flag.FlagSet, args []string) (string, error) {
	if err := fs.Parse(args); err != nil {
		return "", flagErr(fs, err)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return "", nil
	}
	prefix := rest[0]
	if err := fs.Parse(rest[1:]); err != nil {
		return "", flagErr(fs, err)
	}
	if len(fs.Args()) > 0 {
		return "", usagef("list: unexpected %q after PREFIX", fs.Args()[0])
	}
	// A prefix need not be a key ("jobs/"), but some key must be able to
	// begin with it.
	if lease.ValidateKey(prefix) != nil && lease.ValidateKey(prefix+"x") != nil {
		return "", usagef("list: no key can begin with %q (lease help)", prefix)
	}
	return prefix, nil
}

// printListed prints one live holder: KEY OWNER EPOCH EXPIRES, tab-
// separated (EXPIRES empty for grants that never expire), or JSON.
func printListed(w io.Writer, rec lease.Record, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(heldJSON(rec)) // cannot fail: plain fields
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	expires := ""
	if !rec.ExpiresAt.IsZero() {
		expires = rec.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", rec.Key, rec.Owner, strconv.FormatUint(rec.Epoch, 10), expires)
}
