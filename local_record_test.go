//go:build unix

package lease

// Fail closed and crash safety of the local store's record (R2, R7, R10).

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/leasekit/lease/internal/localfs"
)

// TestLocalFailClosed: a record that cannot be read or parsed is refused
// with ErrCorrupt, the flock is given back and the bytes stay as they were
// (R10); an exhausted epoch is ErrEpochExhausted (R2).
func TestLocalFailClosed(t *testing.T) {
	ctx := context.Background()
	const key = "k"
	// prepare leaves key released at epoch 2 (both slots written) and
	// returns the lock file's bytes.
	prepare := func(t *testing.T, s *LocalStore) []byte {
		for range 2 {
			g := mustAcquire(t, s, key)
			if err := s.Release(ctx, g); err != nil {
				t.Fatal(err)
			}
		}
		b, err := os.ReadFile(s.lockPath(key))
		if err != nil || len(b) != localfs.FileLen {
			t.Fatalf("lock file: %d bytes, %v", len(b), err)
		}
		return b
	}
	slot := func(seq uint64, r Record) []byte {
		b := make([]byte, localfs.FileLen)
		copy(b[localfs.SlotOffset(seq):], localfs.EncodeSlot(seq, toSlot(r)))
		return b
	}
	cases := []struct {
		name   string
		damage func(good []byte) []byte
		want   error
	}{
		{"emptied", func(g []byte) []byte { return g[:0] }, ErrCorrupt},
		{"truncated to one byte", func(g []byte) []byte { return g[:1] }, ErrCorrupt},
		{"truncated mid slot", func(g []byte) []byte { return g[:localfs.SlotLen/2] }, ErrCorrupt},
		{"truncated after slot 0", func(g []byte) []byte { return g[:localfs.SlotStride] }, ErrCorrupt},
		{"truncated by one byte", func(g []byte) []byte { return g[:localfs.FileLen-1] }, ErrCorrupt},
		{"one byte too long", func(g []byte) []byte { return append(g, 0) }, ErrCorrupt},
		{"garbage bytes", func(g []byte) []byte { return bytes.Repeat([]byte("garbage!"), localfs.FileLen/8) }, ErrCorrupt},
		{"zeros", func(g []byte) []byte { return make([]byte, localfs.FileLen) }, ErrCorrupt},
		{"both slots flipped", func(g []byte) []byte {
			b := bytes.Clone(g)
			b[30] ^= 1
			b[localfs.SlotStride+30] ^= 1
			return b
		}, ErrCorrupt},
		{"record for another key", func(g []byte) []byte {
			return slot(1, Record{Key: "other", Owner: "x", Epoch: 7, Released: true})
		}, ErrCorrupt},
		{"epoch 0", func(g []byte) []byte { return slot(1, Record{Key: key, Owner: "x", Released: true}) }, ErrCorrupt},
		{"owner with a space", func(g []byte) []byte {
			return slot(1, Record{Key: key, Owner: "x y", Epoch: 3, Released: true})
		}, ErrCorrupt},
		{"slots not consecutive", func(g []byte) []byte {
			b := slot(1, Record{Key: key, Owner: "x", Epoch: 1, Released: true})
			copy(b[localfs.SlotStride:], localfs.EncodeSlot(4, localfs.Record{Key: key, Owner: "x", Epoch: 2, Released: true}))
			return b
		}, ErrCorrupt},
		{"released epoch at MaxUint64", func(g []byte) []byte {
			return slot(1, Record{Key: key, Owner: "x", Epoch: math.MaxUint64, Released: true})
		}, ErrEpochExhausted},
		{"dead holder's epoch at MaxUint64", func(g []byte) []byte {
			return slot(1, Record{Key: key, Owner: "x", Epoch: math.MaxUint64})
		}, ErrEpochExhausted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newLocal(t, t.TempDir(), WithOwner("a"))
			path := s.lockPath(key)
			bad := tc.damage(prepare(t, s))
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := s.Acquire(ctx, key)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Acquire = %v; want %v", err, tc.want)
			}
			if tc.want == ErrCorrupt {
				var se *StorageError
				if !errors.As(err, &se) || se.Key != key {
					t.Fatalf("Acquire = %#v; want a *StorageError for %q", err, key)
				}
				if _, err := s.Holder(ctx, key); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Holder = %v; want ErrCorrupt", err)
				}
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, bad) {
				t.Fatal("the refused record was changed")
			}
			wantFlockFree(t, path)
		})
	}
}

// TestLocalUnopenable: a lock file the store cannot open is refused as
// unreadable (R10) and nothing is created or changed. The tests run as
// root, which chmod 000 does not stop, so the path is made into things no
// mode bits can make readable as a record: a directory, a dangling symlink
// (the store does not follow symlinks, so it creates nothing at the target)
// and a symlink to a valid lock file elsewhere.
func TestLocalUnopenable(t *testing.T) {
	ctx := context.Background()
	const key = "k"
	cases := map[string]func(t *testing.T, path, elsewhere string){
		"directory": func(t *testing.T, path, _ string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		},
		"dangling symlink": func(t *testing.T, path, elsewhere string) {
			if err := os.Symlink(elsewhere, path); err != nil {
				t.Fatal(err)
			}
		},
		"symlink to a record": func(t *testing.T, path, elsewhere string) {
			other := newLocal(t, filepath.Dir(elsewhere))
			g := mustAcquire(t, other, key)
			if err := other.Release(ctx, g); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other.lockPath(key), path); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			s := newLocal(t, t.TempDir(), WithOwner("a"))
			path := s.lockPath(key)
			elsewhere := filepath.Join(t.TempDir(), "target")
			setup(t, path, elsewhere)
			before, _ := os.Lstat(path)
			_, err := s.Acquire(ctx, key)
			var se *StorageError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &se) {
				t.Fatalf("Acquire = %v; want a *StorageError matching ErrCorrupt", err)
			}
			if _, err := s.Holder(ctx, key); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Holder = %v; want ErrCorrupt", err)
			}
			after, err := os.Lstat(path)
			if err != nil || after.Mode() != before.Mode() || !after.ModTime().Equal(before.ModTime()) {
				t.Fatalf("lock path changed: %v -> %v (%v)", before.Mode(), after, err)
			}
			if _, err := os.Lstat(elsewhere); !errors.Is(err, os.ErrNotExist) && name == "dangling symlink" {
				t.Fatalf("the symlink's target was created: %v", err)
			}
		})
	}
}

// wantFlockFree checks that nothing holds the flock on path.
func wantFlockFree(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("flock on %s still taken (%v): a refused acquire must give it back", path, err)
	}
}

// flockByHand takes path's flock as another process would, on a
// descriptor of its own; closing the file gives it up.
func flockByHand(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		t.Fatalf("flock %s: %v", path, err)
	}
	return f
}

// TestLocalReleaseWriteFails: when the released record cannot be written,
// Release returns the error and keeps the flock and the grant, so a retry
// can succeed (R7).
func TestLocalReleaseWriteFails(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	a := newLocal(t, root, WithOwner("a"))
	b := newLocal(t, root, WithOwner("b"))
	g := mustAcquire(t, a, "k")

	// Swap the record descriptor for a read-only one: the kernel refuses
	// the write with EBADF, as it would a failing disk.
	h := a.heldLock("k")
	good := h.f
	ro, err := os.Open(a.lockPath("k"))
	if err != nil {
		t.Fatal(err)
	}
	h.f = ro
	if err := a.Release(ctx, g); !errors.Is(err, ErrStorage) {
		t.Fatalf("Release with a failing write = %v; want ErrStorage", err)
	}
	_, err = b.Acquire(ctx, "k")
	wantHeld(t, err, "a", 1)
	if r, err := a.Renew(ctx, g); err != nil || r != g {
		t.Fatalf("Renew after a failed release = %+v, %v; want the grant kept", r, err)
	}

	h.f = good
	ro.Close()
	if err := a.Release(ctx, g); err != nil {
		t.Fatalf("retried Release = %v", err)
	}
	if g := mustAcquire(t, b, "k"); g.Epoch != 2 || g.PreviousUnclean {
		t.Fatalf("after the retried release: %+v; want epoch 2 clean", g)
	}
}

// TestLocalTornWrites checks the argument in internal/localfs/record.go: whatever part
// of write n+1 reached the disk, the record reads as write n or n+1 (R2).
func TestLocalTornWrites(t *testing.T) {
	const key = "k"
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	states := []Record{
		{Key: key, Owner: "a", Epoch: 1},
		{Key: key, Owner: "a", Epoch: 1, Released: true},
		{Key: key, Owner: "b", Epoch: 2},
		{Key: key, Owner: "b", Epoch: 2, Released: true},
		{Key: key, Owner: "c", Epoch: 3},
	}
	if err := writeRecord(f, 1, toSlot(states[0])); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(states); i++ {
		seq := uint64(i + 1)
		before, _ := os.ReadFile(f.Name())
		newSlot := localfs.EncodeSlot(seq, toSlot(states[i]))
		off := int(localfs.SlotOffset(seq))
		// A torn write: the first cut bytes are new, the rest old; and
		// the other way round (devices do not promise an order).
		for cut := 0; cut <= localfs.SlotLen; cut += 8 {
			for _, newFirst := range []bool{true, false} {
				img := bytes.Clone(before)
				if newFirst {
					copy(img[off:off+cut], newSlot[:cut])
				} else {
					copy(img[off+cut:off+localfs.SlotLen], newSlot[cut:])
				}
				if err := f.Truncate(0); err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt(img, 0); err != nil {
					t.Fatal(err)
				}
				rec, _, err := readRecord(f, key)
				if err != nil {
					t.Fatalf("write %d torn at %d: %v", seq, cut, err)
				}
				if *rec != states[i-1] && *rec != states[i] {
					t.Fatalf("write %d torn at %d reads %+v; want %+v or %+v", seq, cut, *rec, states[i-1], states[i])
				}
			}
		}
		if err := f.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(before, 0); err != nil {
			t.Fatal(err)
		}
		if err := writeRecord(f, seq, toSlot(states[i])); err != nil {
			t.Fatal(err)
		}
		if rec, got, err := readRecord(f, key); err != nil || *rec != states[i] || got != seq {
			t.Fatalf("after write %d: %+v seq %d, %v", seq, rec, got, err)
		}
	}
}

// TestLocalNewFile (R2, R4a): a lock file that was created but never
// acquired (a crash between the two) holds only its absent marker: Holder
// finds nobody, Holders lists nothing, and the next Acquire gets epoch 1.
// An absent marker anywhere but write 1 is damage (R10).
func TestLocalNewFile(t *testing.T) {
	ctx := context.Background()
	s := newLocal(t, t.TempDir(), WithOwner("a"))
	if err := s.createLockFile("k"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(s.lockPath("k")); err != nil || fi.Size() != localfs.FileLen {
		t.Fatalf("a new lock file: %v, %v; want %d bytes", fi, err, localfs.FileLen)
	}
	if _, err := s.Holder(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Holder of a new file = %v; want ErrNotFound", err)
	}
	for rec, err := range s.Holders(ctx, "") {
		t.Fatalf("Holders of a new file yielded %+v, %v", rec, err)
	}
	if err := s.createLockFile("k"); err != nil { // a racing creator that lost
		t.Fatalf("creating an existing lock file = %v; want nil (EEXIST is as good)", err)
	}
	g := mustAcquire(t, s, "k")
	if g.Epoch != 1 || g.PreviousUnclean {
		t.Fatalf("first grant from a new file = %+v; want epoch 1 clean", g)
	}
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}

	bad := make([]byte, localfs.FileLen)
	copy(bad, localfs.EncodeSlot(3, localfs.AbsentRecord("k")))
	copy(bad[localfs.SlotStride:], localfs.EncodeSlot(2, localfs.Record{Key: "k", Owner: "a", Epoch: 1, Released: true}))
	if err := os.WriteFile(s.lockPath("k"), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "k"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Acquire over an absent marker at write 3 = %v; want ErrCorrupt", err)
	}
}
