// Package testfs snapshots a directory, so that a test can show that an
// operation changed no file in it.
package testfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Snapshot describes every file under dir: name, size and content hash.
func Snapshot(t testing.TB, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s:%d:%x ", strings.TrimPrefix(p, dir), len(data), hashBytes(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// hashBytes is FNV-1a: enough to tell two files apart in a test.
func hashBytes(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}
