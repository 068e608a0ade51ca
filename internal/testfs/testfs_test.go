package testfs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSnapshotSeesEveryChange(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a", "one")
	write("sub/b", "two")
	before := Snapshot(t, dir)
	if again := Snapshot(t, dir); again != before {
		t.Fatalf("two snapshots of an unchanged dir differ:\n%s\n%s", before, again)
	}
	for _, change := range []func(){
		func() { write("sub/b", "twO") },              // same length, other bytes
		func() { write("c", "") },                     // a new empty file
		func() { os.Remove(filepath.Join(dir, "a")) }, // a file gone
	} {
		change()
		if after := Snapshot(t, dir); after == before {
			t.Fatalf("a change left the snapshot %q as it was", after)
		}
		before = Snapshot(t, dir)
	}
}
