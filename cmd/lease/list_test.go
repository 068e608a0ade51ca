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

// sessionFixture is a memory backend with a live session (R18) of host-a
// and two held keys under jobs/: jobs/attached, attached to the session
// as a store writes it (its own expiry lease.SessionKeyExpiry), and
// jobs/plain, held per key by the returned store, host-b. jobs/left was
// released by a holder that kept it through the session.
func sessionFixture(t *testing.T) (s *lease.DocumentStore, id string) {
	t.Helper()
	ctx := t.Context()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	d := lease.NewMemoryDriver()
	id = "0123456789abcdef0123456789abcdef"
	sess := lease.SessionRecord{ID: id, Owner: "host-a", ExpiresAt: now.Add(30 * time.Second), State: lease.SessionLive}
	if _, err := d.(lease.SessionDriver).PutSession(ctx, sess, lease.Precondition{Absent: true}); err != nil {
		t.Fatal(err)
	}
	for _, rec := range []lease.Record{
		{Key: "jobs/attached", Owner: "host-a", Epoch: 3, ExpiresAt: lease.SessionKeyExpiry, Session: id},
		{Key: "jobs/left", Owner: "host-a", Epoch: 5, ExpiresAt: lease.SessionKeyExpiry, Session: id, Released: true},
	} {
		if _, err := d.Put(ctx, rec, lease.Precondition{Absent: true}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := lease.NewDocumentStore(d, lease.WithOwner("host-b"),
		lease.WithClock(func() time.Time { return now }), lease.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Acquire(ctx, "jobs/plain"); err != nil {
		t.Fatal(err)
	}
	return s, id
}

// jsonFields decodes one JSON object of lease holder --json or lease list --json.
func jsonFields(t *testing.T, line string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("%q is not a JSON object: %v", line, err)
	}
	return m
}

// TestHolderShowsSession: R18, R23 through the command. lease holder of a
// key attached to a session names the session in its sentence and in
// --json's "session"; a key kept per key has no "session" field and the
// sentence it always had. EXPIRES is the record's: the store fills it with
// the session's expiry (R20, R23).
func TestHolderShowsSession(t *testing.T) {
	ctx := t.Context()
	s, id := sessionFixture(t)
	rec, err := s.Holder(ctx, "jobs/attached")
	if err != nil || rec.Session != id {
		t.Fatalf("Holder(jobs/attached) = %+v, %v; want the record of session %s", rec, err, id)
	}
	for _, tc := range []struct {
		key, text, session string
	}{
		{"jobs/attached", "jobs/attached is held by host-a (epoch 3, session " + id + ") until " + rec.ExpiresAt.UTC().Format(time.RFC3339Nano) + "\n", id},
		{"jobs/plain", "jobs/plain is held by host-b (epoch 1) until 2026-12-01T08:00:30Z\n", ""},
	} {
		out, err := lookHolder(ctx, s, tc.key)
		if err != nil {
			t.Fatalf("lookHolder(%s) = %v", tc.key, err)
		}
		var text, js bytes.Buffer
		printHolder(&text, out, false, "")
		if text.String() != tc.text {
			t.Errorf("holder %s = %q; want %q", tc.key, text.String(), tc.text)
		}
		printHolder(&js, out, true, "")
		got, has := jsonFields(t, js.String())["session"]
		switch {
		case tc.session == "" && has:
			t.Errorf("holder --json %s = %s; want no \"session\" for a key kept per key", tc.key, js.String())
		case tc.session != "" && got != tc.session:
			t.Errorf("holder --json %s = %s; want \"session\":%q", tc.key, js.String(), tc.session)
		}
	}
}

// TestHolderShowsLastSession: R3, R22 through the command. A free key
// whose last holder kept it through a session shows that session as
// last_session; one left unreleased says that how the session ended
// decides PreviousUnclean (R21), not the key's record.
func TestHolderShowsLastSession(t *testing.T) {
	ctx := t.Context()
	s, id := sessionFixture(t)
	out, err := lookHolder(ctx, s, "jobs/left")
	if err != nil || out.Held || out.LastSession != id || out.LastEpoch != 5 || out.Released == nil || !*out.Released {
		t.Fatalf("lookHolder(jobs/left) = %+v, %v; want free, released epoch 5 of session %s", out, err, id)
	}
	var js, text bytes.Buffer
	printHolder(&js, out, true, "")
	if got := jsonFields(t, js.String())["last_session"]; got != id {
		t.Errorf("holder --json jobs/left = %s; want \"last_session\":%q", js.String(), id)
	}
	printHolder(&text, out, false, "")
	if want := "jobs/left is free (host-a released epoch 5 cleanly)\n"; text.String() != want {
		t.Errorf("holder jobs/left = %q; want %q", text.String(), want)
	}

	unreleased := false
	out.Released = &unreleased
	text.Reset()
	printHolder(&text, out, false, "")
	want := "jobs/left is free (host-a held epoch 5 through session " + id +
		", which ended without a release: the next holder gets PreviousUnclean)\n"
	if text.String() != want {
		t.Errorf("holder of a key its session left = %q; want %q", text.String(), want)
	}
}

// TestListShowsSession: R23 through the command. Each lease list --json
// line carries its key's "session", and none for a key kept per key; the
// text lines keep their four columns.
func TestListShowsSession(t *testing.T) {
	ctx := t.Context()
	s, id := sessionFixture(t)
	var js, text bytes.Buffer
	if err := listHolders(ctx, s, "jobs/", &js, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(js.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("list --json jobs/ = %q; want 2 lines (jobs/left is released)", js.String())
	}
	if m := jsonFields(t, lines[0]); m["key"] != "jobs/attached" || m["session"] != id {
		t.Errorf("list --json line 1 = %s; want jobs/attached with \"session\":%q", lines[0], id)
	}
	if m := jsonFields(t, lines[1]); m["key"] != "jobs/plain" || m["session"] != nil {
		t.Errorf("list --json line 2 = %s; want jobs/plain without \"session\"", lines[1])
	}
	if err := listHolders(ctx, s, "jobs/", &text, false); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(text.String()), "\n") {
		if n := len(strings.Split(line, "\t")); n != 4 {
			t.Errorf("list line %q has %d columns; want KEY OWNER EPOCH EXPIRES", line, n)
		}
	}
}
