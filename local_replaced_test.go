//go:build unix

package lease

import (
	"os"
	"path/filepath"
	"testing"
)

// replaceWithCopy puts a copy of key's lock file over it, as a restore
// from a backup would: the copy names the same record, and its flock is
// free.
func replaceWithCopy(t *testing.T, s *LocalStore, key string) {
	t.Helper()
	b, err := os.ReadFile(s.lockPath(key))
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(s.root, "restored")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.lockPath(key)); err != nil {
		t.Fatal(err)
	}
}

// TestLocalHolderAfterLockFileReplaced (R14): a store that holds a key
// through a bare Acquire, whose lock file is then replaced and taken by
// another process, names that process from Holder, as Holders does, not
// its own stale grant: Holder checks that the path still names the file
// it reads through.
func TestLocalHolderAfterLockFileReplaced(t *testing.T) {
	ctx := t.Context()
	root := t.TempDir()
	a := newLocal(t, root, WithOwner("a"))
	mustAcquire(t, a, procKey)
	replaceWithCopy(t, a, procKey)
	c := startChild(t, "file:"+root, "restorer")
	c.Send(t, "acquire")
	if r := c.Recv(t); r != "ok 2 true" {
		t.Fatalf("the other process's Acquire of the replaced file: %q; want ok 2 true", r)
	}
	rec, err := a.Holder(ctx, procKey)
	if err != nil || rec.Owner != "restorer" || rec.Epoch != 2 {
		t.Fatalf("Holder = %+v, %v; want restorer at epoch 2, the real holder", rec, err)
	}
	var listed []Record
	for rec, err := range a.Holders(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, rec)
	}
	if len(listed) != 1 || listed[0] != rec {
		t.Fatalf("Holders = %+v; want the one record Holder names, %+v", listed, rec)
	}
}
