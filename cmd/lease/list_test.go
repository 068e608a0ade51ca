package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
)

// TestListFormat: R14 through the command. lease list prints the live
// holders under PREFIX in key order, KEY OWNER EPOCH EXPIRES tab-separated
// (EXPIRES empty for grants that never expire), or one lease holder --json
// object per line; released keys and other prefixes are left out.
func TestListFormat(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	s, err := lease.NewDocumentStore(lease.NewMemoryDriver(), lease.WithOwner("host-a"),
		lease.WithClock(func() time.Time { return now }), lease.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"jobs/b", "other", "jobs/a", "jobs/c"} {
		if _, err := s.Acquire(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	g, _ := s.Acquire(ctx, "jobs/c")
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}

	var text bytes.Buffer
	if err := listHolders(ctx, s, "jobs/", &text, false); err != nil {
		t.Fatal(err)
	}
	want := "jobs/a\thost-a\t1\t2026-12-01T08:00:30Z\njobs/b\thost-a\t1\t2026-12-01T08:00:30Z\n"
	if text.String() != want {
		t.Errorf("list jobs/ = %q; want %q", text.String(), want)
	}

	var js bytes.Buffer
	if err := listHolders(ctx, s, "", &js, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(js.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("list --json = %q; want 3 lines", js.String())
	}
	var h holderJSON
	if err := json.Unmarshal([]byte(lines[2]), &h); err != nil || h.Key != "other" || !h.Held || h.Owner != "host-a" ||
		h.Epoch != 1 || h.Expires == nil || !h.Expires.Equal(now.Add(30*time.Second)) {
		t.Errorf("last JSON line %s (%v); want other held by host-a, epoch 1, expiring in 30s", lines[2], err)
	}

	var never bytes.Buffer
	printListed(&never, lease.Record{Key: "k", Owner: "o", Epoch: 3}, false)
	if never.String() != "k\to\t3\t\n" {
		t.Errorf("a grant that never expires lists as %q; want an empty EXPIRES", never.String())
	}
}

// TestListCommandLine: lease list exits 0 with no lines when nothing is
// held, and refuses stray arguments and impossible prefixes (status 2).
func TestListCommandLine(t *testing.T) {
	if code, stdout, stderr := runLease(t, t.TempDir(), nil, "list", "--store", "memory:"); code != 0 || stdout != "" || stderr != "" {
		t.Errorf("list of an empty store: %d %q %q; want 0 and nothing", code, stdout, stderr)
	}
	if code, stdout, _ := runLease(t, t.TempDir(), nil, "list", "jobs/", "--json", "--store", "memory:"); code != 0 || stdout != "" {
		t.Errorf("list with flags after PREFIX: %d %q; want 0 and nothing", code, stdout)
	}
	for _, args := range [][]string{{"a", "b"}, {"/x"}, {"a//"}, {"--bogus"}, {"--store", "redis://x"}} {
		code, stdout, stderr := runLease(t, t.TempDir(), nil, append([]string{"list", "--store", "memory:"}, args...)...)
		if code != exitUsage || stdout != "" || !strings.HasPrefix(stderr, "lease: ") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("list %v: %d %q %q; want 2 and one line", args, code, stdout, stderr)
		}
	}
}

// TestHolderSaysWhatLastHolderLeft: R3, R4b. lease holder of a free key
// tells whether it was ever held, and the last epoch and whether its
// holder released it cleanly.
func TestHolderSaysWhatLastHolderLeft(t *testing.T) {
	forEachStore(t, func(t *testing.T, url string) {
		code, stdout, _ := runLease(t, t.TempDir(), nil, "holder", "--store", url, "k")
		if code != 0 || stdout != "k is free (never held)\n" {
			t.Errorf("holder of a key never held: %d %q", code, stdout)
		}
		if code, _, stderr := runLease(t, t.TempDir(), nil, "run", "--store", url, "k", "--", "true"); code != 0 {
			t.Fatalf("run: %d %s", code, stderr)
		}
		code, stdout, _ = runLease(t, t.TempDir(), nil, "holder", "--json", "--store", url, "k")
		var h holderJSON
		if err := json.Unmarshal([]byte(stdout), &h); err != nil || code != 0 || h.Held || h.LastEpoch != 1 ||
			h.LastOwner == "" || h.Released == nil || !*h.Released {
			t.Errorf("holder --json after a clean run = %s (%d, %v); want free, last epoch 1, released", stdout, code, err)
		}
	})
}
