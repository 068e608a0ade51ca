//go:build unix && !aix

package sessionproc

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestJournalOverlap: the journal's check has teeth. Two nodes' lines,
// written through journal as the nodes write them, read back into
// holdings: a taker whose write was sent before the killed node's kill,
// or before another node's release, is two live holders; one sent after
// is not; nor may an epoch repeat.
func TestJournalOverlap(t *testing.T) {
	k := []keyEpoch{{"profile/00000", 1}}
	k2 := []keyEpoch{{"profile/00000", 2}}
	for _, tc := range []struct {
		name  string
		lines func(j *journal)
		want  string // a part of the overlap's error; "" for none
	}{
		{"taken after the kill", func(j *journal) {
			j.writeAt(10, evTake, ownerA, k...)
			j.writeAt(11, evGot, ownerA, k...)
			j.writeAt(20, evKill, ownerA, keyEpoch{noKey, 0})
			j.writeAt(30, evTake, ownerB, k2...)
			j.writeAt(31, evGot, ownerB, k2...)
			j.writeAt(40, evEnd, ownerB, k2...)
		}, ""},
		{"taken before the kill", func(j *journal) {
			j.writeAt(10, evTake, ownerA, k...)
			j.writeAt(11, evGot, ownerA, k...)
			j.writeAt(30, evTake, ownerB, k2...)
			j.writeAt(31, evGot, ownerB, k2...)
			j.writeAt(35, evKill, ownerA, keyEpoch{noKey, 0})
			j.writeAt(40, evEnd, ownerB, k2...)
		}, "two live holders"},
		{"taken before the release", func(j *journal) {
			j.writeAt(10, evTake, ownerA, k...)
			j.writeAt(11, evGot, ownerA, k...)
			j.writeAt(30, evTake, ownerB, k2...)
			j.writeAt(31, evGot, ownerB, k2...)
			j.writeAt(32, evEnd, ownerA, k...)
			j.writeAt(40, evEnd, ownerB, k2...)
		}, "two live holders"},
		{"the same epoch twice", func(j *journal) {
			j.writeAt(10, evTake, ownerA, k...)
			j.writeAt(11, evGot, ownerA, k...)
			j.writeAt(20, evKill, ownerA, keyEpoch{noKey, 0})
			j.writeAt(30, evTake, ownerB, k...)
			j.writeAt(31, evGot, ownerB, k...)
		}, "epoch 1 of node-b after epoch 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal")
			j, err := openJournal(path)
			if err != nil {
				t.Fatal(err)
			}
			tc.lines(j)
			j.Close()
			hs := holdings(t, readJournal(t, path))
			err = overlap("profile/00000", hs["profile/00000"])
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("overlap = %v; want %q", err, tc.want)
			}
		})
	}
}

// TestJournalAfterKill: a line of a node after its kill fails the check.
func TestJournalAfterKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	j, err := openJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	j.writeAt(20, evKill, ownerA, keyEpoch{noKey, 0})
	j.writeAt(30, evTake, ownerA, keyEpoch{"profile/00000", 1})
	j.Close()
	ft := &fakeT{TB: t}
	holdings(ft, readJournal(t, path))
	if !strings.Contains(ft.errs, "after node-a was killed") {
		t.Fatalf("errors %q; want a line after the kill refused", ft.errs)
	}
}

// fakeT collects the errors of a check under test.
type fakeT struct {
	testing.TB
	errs string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Errorf(format string, args ...any) {
	f.errs += strings.TrimSpace(fmt.Sprintf(format, args...)) + "\n"
}
