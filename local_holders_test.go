//go:build unix

package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/leasekit/lease/internal/testfs"
)

// collectHolders runs s.Holders and returns the records and the errors.
func collectHolders(t *testing.T, s Store, ctx context.Context, prefix string) (recs []Record, errs []error) {
	t.Helper()
	for rec, err := range s.Holders(ctx, prefix) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		recs = append(recs, rec)
	}
	return recs, errs
}

func recKeys(recs []Record) []string {
	keys := make([]string, len(recs))
	for i, r := range recs {
		keys[i] = r.Key
	}
	return keys
}

// TestLocalHolders (R14): Holders yields the live holders whose key begins
// with the prefix, in ascending byte order of key: held by this instance or
// another, never released, never a dead holder's, never a key only
// created. A corrupt lock file is an error matching ErrCorrupt and the
// listing goes on. Nothing is created, changed or locked.
func TestLocalHolders(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	a := newLocal(t, root, WithOwner("a"))
	b := newLocal(t, root, WithOwner("b"))
	dead := newLocal(t, root, WithOwner("dead"))
	for _, k := range []string{"jobs/b", "jobs/a", "jobs/c/x", "other", "jobs/Z"} {
		mustAcquire(t, a, k)
	}
	mustAcquire(t, b, "jobs/b2")
	g := mustAcquire(t, b, "jobs/released")
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, dead, "jobs/dead")
	dead.Close()
	// A key whose file exists but was never acquired: another store's
	// create won, then its acquire failed.
	if err := a.createLockFile("jobs/only-created"); err != nil {
		t.Fatal(err)
	}
	// Damage: a lock file emptied, and debris that is not a lock file.
	broken := newLocal(t, root, WithOwner("x"))
	mustAcquire(t, broken, "jobs/broken")
	broken.Close()
	if err := os.Truncate(a.lockPath("jobs/broken"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root+"/.new-leftover", []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := testfs.Snapshot(t, root)

	for _, s := range []*LocalStore{a, b} {
		recs, errs := collectHolders(t, s, ctx, "jobs/")
		want := []string{"jobs/Z", "jobs/a", "jobs/b", "jobs/b2", "jobs/c/x"}
		if got := recKeys(recs); !slices.Equal(got, want) {
			t.Fatalf("Holders(jobs/) keys = %q; want %q", got, want)
		}
		for _, r := range recs {
			wantOwner := "a"
			if r.Key == "jobs/b2" {
				wantOwner = "b"
			}
			if r.Owner != wantOwner || r.Epoch != 1 || r.Released || !r.ExpiresAt.IsZero() {
				t.Fatalf("Holders yielded %+v; want owner %s epoch 1", r, wantOwner)
			}
		}
		if len(errs) != 1 || !errors.Is(errs[0], ErrCorrupt) {
			t.Fatalf("Holders errors = %v; want one matching ErrCorrupt (the emptied file)", errs)
		}
	}
	all, _ := collectHolders(t, b, ctx, "")
	if got := recKeys(all); !slices.Equal(got, []string{"jobs/Z", "jobs/a", "jobs/b", "jobs/b2", "jobs/c/x", "other"}) {
		t.Fatalf("Holders(\"\") = %q", got)
	}
	if recs, _ := collectHolders(t, b, ctx, "nothing/"); len(recs) != 0 {
		t.Fatalf("Holders(nothing/) = %+v; want none", recs)
	}
	// Stopping early is honoured.
	n := 0
	for range b.Holders(ctx, "jobs/") {
		n++
		break
	}
	if n != 1 {
		t.Fatalf("a loop that breaks saw %d yields", n)
	}
	if after := testfs.Snapshot(t, root); after != before {
		t.Fatalf("Holders changed the root:\nbefore %v\nafter  %v", before, after)
	}
	// Nothing was locked: another store takes the dead holder's key.
	if g := mustAcquire(t, b, "jobs/dead"); !g.PreviousUnclean || g.Epoch != 2 {
		t.Fatalf("after Holders: %+v; want epoch 2 unclean", g)
	}
}

// TestLocalHoldersEnds (R14): Holders on a closed store yields ErrClosed,
// and with an ended context yields the context's error.
func TestLocalHoldersEnds(t *testing.T) {
	root := t.TempDir()
	s := newLocal(t, root, WithOwner("a"))
	mustAcquire(t, s, "k")
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, errs := collectHolders(t, s, cctx, ""); len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Fatalf("Holders with a cancelled ctx: %v; want context.Canceled", errs)
	}
	s.Close()
	if _, errs := collectHolders(t, s, context.Background(), ""); len(errs) != 1 || !errors.Is(errs[0], ErrClosed) {
		t.Fatalf("Holders on a closed store: %v; want ErrClosed", errs)
	}
}

// TestLocalReleaseAll (R13): every key this instance holds is released,
// durably; another store then takes each with epoch+1 and no
// PreviousUnclean. A key whose write fails stays held and its error is
// returned; a retry finishes the job. A key lost adds ErrLost and stops
// nothing. Keys held by others are untouched.
func TestLocalReleaseAll(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	a := newLocal(t, root, WithOwner("a"))
	b := newLocal(t, root, WithOwner("b"))
	const n = 100
	for i := range n {
		mustAcquire(t, a, fmt.Sprintf("k%03d", i))
	}
	mustAcquire(t, b, "b-only")
	// One key's writes fail, as a failing disk would (see TestLocalReleaseWriteFails).
	h := a.heldLock("k007")
	good := h.f
	ro, err := os.Open(a.lockPath("k007"))
	if err != nil {
		t.Fatal(err)
	}
	h.f = ro
	err = a.ReleaseAll(ctx)
	var se *StorageError
	if !errors.As(err, &se) || se.Key != "k007" {
		t.Fatalf("ReleaseAll with one failing key = %v; want its *StorageError", err)
	}
	if _, err := b.Acquire(ctx, "k007"); !errors.Is(err, ErrHeld) {
		t.Fatalf("the key whose release failed: %v; want still held (ErrHeld)", err)
	}
	h.f = good
	ro.Close()
	if err := a.ReleaseAll(ctx); err != nil {
		t.Fatalf("retried ReleaseAll = %v", err)
	}
	if n := openFDs(t, root); n != 1 { // b's one key
		t.Fatalf("%d descriptors open under the root; want 1 (b's key)", n)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("k%03d", i)
			g, err := b.Acquire(ctx, key)
			if err != nil || g.Epoch != 2 || g.PreviousUnclean {
				t.Errorf("after ReleaseAll, %s: %+v, %v; want epoch 2 clean", key, g, err)
			}
		})
	}
	wg.Wait()
	if _, err := a.Acquire(ctx, "b-only"); !errors.Is(err, ErrHeld) {
		t.Fatalf("b's key after a's ReleaseAll: %v; want ErrHeld", err)
	}
	if err := a.ReleaseAll(ctx); err != nil {
		t.Fatalf("ReleaseAll with nothing held = %v", err)
	}
	// A key whose lock file was replaced is lost: ErrLost, the others
	// are released all the same.
	mustAcquire(t, a, "replaced")
	mustAcquire(t, a, "fine")
	path := a.lockPath("replaced")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.ReleaseAll(ctx); !errors.Is(err, ErrLost) {
		t.Fatalf("ReleaseAll with a replaced lock file = %v; want ErrLost", err)
	}
	if g := mustAcquire(t, b, "fine"); g.Epoch != 2 || g.PreviousUnclean {
		t.Fatalf("the other key after ReleaseAll: %+v; want epoch 2 clean", g)
	}
	a.Close()
	if err := a.ReleaseAll(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReleaseAll on a closed store = %v; want ErrClosed", err)
	}
}
