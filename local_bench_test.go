//go:build unix

package lease

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/localfs"
)

// BenchmarkLocal measures the local store beside its floor, in the same
// run. A round trip, for the local store, is one flock operation (lock or
// unlock) or one durable write (a write made durable by fdatasync); reads
// of a record the page cache holds are not counted. The floor is what no
// local lease can avoid, done directly on one open file:
//
//	acquire: flock + one in-place write + fdatasync
//	release: one in-place write + fdatasync + unlock
//	cycle:   both (4 round trips)
//
// store/cycle also reports its time as a multiple of floor/cycle (x-floor).
func BenchmarkLocal(b *testing.B) {
	var floorCycle time.Duration // ns/op of floor/cycle, for x-floor
	b.Run("floor/acquire", func(b *testing.B) { benchFloor(b, true, false) })
	b.Run("floor/release", func(b *testing.B) { benchFloor(b, false, true) })
	b.Run("floor/cycle", func(b *testing.B) {
		benchFloor(b, true, true)
		floorCycle = b.Elapsed() / time.Duration(b.N)
	})
	b.Run("store/acquire", func(b *testing.B) { benchStore(b, true, false, 0) })
	b.Run("store/release", func(b *testing.B) { benchStore(b, false, true, 0) })
	b.Run("store/cycle", func(b *testing.B) { benchStore(b, true, true, floorCycle) })
	b.Run("interleaved/cycle", benchInterleaved)
}

// benchInterleaved alternates one floor cycle and one store cycle and
// times each, so that a busy machine slows both alike: its x-floor is the
// steadier figure. ns/op is the time of both together.
func benchInterleaved(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	f, err := os.OpenFile(dir+"/floor.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(localfs.FileLen); err != nil {
		b.Fatal(err)
	}
	s, err := NewLocalStore(dir, WithOwner("bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	slot := localfs.EncodeSlot(1, localfs.Record{Key: "k", Owner: "floor", Epoch: 1})
	fd := int(f.Fd())
	floorCycle := func() error {
		if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			return err
		}
		for _, off := range []int64{0, localfs.SlotStride} {
			if _, err := f.WriteAt(slot, off); err != nil {
				return err
			}
			if err := localfs.Datasync(f); err != nil {
				return err
			}
		}
		return syscall.Flock(fd, syscall.LOCK_UN)
	}
	storeCycle := func() error {
		g, err := s.Acquire(ctx, "k")
		if err != nil {
			return err
		}
		return s.Release(ctx, g)
	}
	if err := storeCycle(); err != nil { // lay out the key's file
		b.Fatal(err)
	}
	var floorT, storeT time.Duration
	trips := s.roundTrips.Load()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := floorCycle(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := storeCycle(); err != nil {
			b.Fatal(err)
		}
		floorT += t1.Sub(t0)
		storeT += time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(floorT.Nanoseconds())/n, "floor-ns/op")
	b.ReportMetric(float64(storeT.Nanoseconds())/n, "store-ns/op")
	b.ReportMetric(float64(storeT)/float64(floorT), "x-floor")
	b.ReportMetric(float64(s.roundTrips.Load()-trips)/n, "roundtrips/op")
}

// benchFloor times the acquire half, the release half, or both, of the
// floor's cycle; the untimed half still runs so each iteration starts alike.
func benchFloor(b *testing.B, timeAcquire, timeRelease bool) {
	f, err := os.OpenFile(b.TempDir()+"/floor.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(localfs.FileLen); err != nil {
		b.Fatal(err)
	}
	fd := int(f.Fd())
	slot := localfs.EncodeSlot(1, localfs.Record{Key: "k", Owner: "floor", Epoch: 1})
	write := func(off int64) {
		if _, err := f.WriteAt(slot, off); err != nil {
			b.Fatal(err)
		}
		if err := localfs.Datasync(f); err != nil {
			b.Fatal(err)
		}
	}
	flockOp := func(how int) {
		if err := syscall.Flock(fd, how); err != nil {
			b.Fatal(err)
		}
	}
	trips := 0
	if timeAcquire {
		trips += 2
	}
	if timeRelease {
		trips += 2
	}
	b.ResetTimer()
	for range b.N {
		if !timeAcquire {
			b.StopTimer()
		}
		flockOp(syscall.LOCK_EX | syscall.LOCK_NB)
		write(0)
		if !timeAcquire {
			b.StartTimer()
		}
		if !timeRelease {
			b.StopTimer()
		}
		write(localfs.SlotStride)
		flockOp(syscall.LOCK_UN)
		if !timeRelease {
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(trips), "roundtrips/op")
}

// benchStore is benchFloor's twin through the store's API.
func benchStore(b *testing.B, timeAcquire, timeRelease bool, floorCycle time.Duration) {
	ctx := context.Background()
	s, err := NewLocalStore(b.TempDir(), WithOwner("bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	// Warm up: the key's first write lays out its file.
	g, err := s.Acquire(ctx, "k")
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Release(ctx, g); err != nil {
		b.Fatal(err)
	}
	var timed uint64
	b.ResetTimer()
	for range b.N {
		if !timeAcquire {
			b.StopTimer()
		}
		before := s.roundTrips.Load()
		g, err := s.Acquire(ctx, "k")
		if err != nil {
			b.Fatal(err)
		}
		if timeAcquire {
			timed += s.roundTrips.Load() - before
		} else {
			b.StartTimer()
		}
		if !timeRelease {
			b.StopTimer()
		}
		before = s.roundTrips.Load()
		if err := s.Release(ctx, g); err != nil {
			b.Fatal(err)
		}
		if timeRelease {
			timed += s.roundTrips.Load() - before
		} else {
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(timed)/float64(b.N), "roundtrips/op")
	if floorCycle > 0 {
		b.ReportMetric(float64(b.Elapsed()/time.Duration(b.N))/float64(floorCycle), "x-floor")
	}
}
