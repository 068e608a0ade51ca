//go:build linux

package localfs

import (
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProcLocksLines: the /proc/locks reader takes granted flocks
// only, with the device in hex and the inode in decimal.
func TestProcLocksLines(t *testing.T) {
	for line, want := range map[string]*FileID{
		"1: FLOCK  ADVISORY  WRITE 14066 fe:00:9977952 0 EOF\n":    {dev: unix.Mkdev(0xfe, 0), ino: 9977952},
		"2: FLOCK  ADVISORY  WRITE 1 00:1b:3 0 EOF":                {dev: unix.Mkdev(0, 0x1b), ino: 3},
		"3: -> FLOCK  ADVISORY  WRITE 14066 fe:00:9977952 0 EOF\n": nil, // a waiter holds nothing
		"4: POSIX  ADVISORY  WRITE 699 00:16:28457 0 EOF\n":        nil,
		"5: OFDLCK ADVISORY  READ  -1 00:06:9028 0 EOF\n":          nil,
		"6: FLOCK  ADVISORY  WRITE 14066 fe:00\n":                  nil,
		"7: FLOCK  ADVISORY  WRITE 14066 zz:00:12 0 EOF\n":         nil,
		"": nil,
	} {
		id, ok := parseFlockLine([]byte(line))
		if want == nil {
			if ok {
				t.Errorf("%q read as a flock on %+v; want none", line, id)
			}
			continue
		}
		if !ok || id != *want {
			t.Errorf("%q = %+v, %v; want %+v", line, id, ok, *want)
		}
	}
}

// TestFlockView (R14): a view sees a flock another open file holds and
// does not see a free file, without locking anything; the device mapping
// is learnt from an unnamed file that leaves nothing in the root.
func TestFlockView(t *testing.T) {
	root := t.TempDir()
	dm := learnLockDev(root)
	if dm.stat == 0 && dm.locks == 0 {
		t.Fatal("learnLockDev found no flock of its own in /proc/locks")
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Fatalf("learning the device left %d entries in the root", len(ents))
	}
	paths := map[string]bool{}
	for _, held := range []bool{true, false} {
		f, err := CreateTemp(root, "f-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if held {
			if ok, err := FlockTry(f); !ok || err != nil {
				t.Fatalf("FlockTry = %v, %v", ok, err)
			}
		}
		paths[f.Name()] = held
	}
	view := new(Flocks).View(root)
	for path, want := range paths {
		f, id, err := OpenLockFile(path, os.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		got, err := view.Locked(f, id)
		f.Close()
		if err != nil || got != want {
			t.Fatalf("%s: Locked = %v, %v; want %v", path, got, err, want)
		}
		// The view took no lock: the free file can still be locked.
		if !want {
			g, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Flock(int(g.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				t.Fatalf("flock after the view looked: %v", err)
			}
			g.Close()
		}
	}
	m := devMap{stat: 1, locks: 2}
	if got := m.of(FileID{dev: 1, ino: 9}); got != (FileID{dev: 2, ino: 9}) {
		t.Fatalf("devMap.of = %+v", got)
	}
}
