//go:build linux

package lease

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/leasekit/lease/internal/localfs"
)

// BenchmarkLocalMany measures ReleaseAll and Holders over n held keys
// beside their floors, in the same run. One op is the whole call over n
// keys; roundtrips/op counts durable writes and flock operations.
//
//	floor/release-serial:   per key one in-place write + fdatasync + unlock, one key after another
//	floor/release-parallel: the same with localReleaseWorkers keys at a time, as ReleaseAll runs them
//	floor/list:             per key one open + pread + close, and one reading of /proc/locks
func BenchmarkLocalMany(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("n=%d/floor/release-serial", n), func(b *testing.B) { benchFloorRelease(b, n, 1) })
		b.Run(fmt.Sprintf("n=%d/floor/release-parallel", n), func(b *testing.B) { benchFloorRelease(b, n, localReleaseWorkers) })
		b.Run(fmt.Sprintf("n=%d/store/release-all", n), func(b *testing.B) { benchReleaseAll(b, n) })
		b.Run(fmt.Sprintf("n=%d/floor/list", n), func(b *testing.B) { benchFloorList(b, n) })
		b.Run(fmt.Sprintf("n=%d/store/holders", n), func(b *testing.B) { benchHolders(b, n) })
	}
}

// benchFloorRelease opens and flocks n files (untimed), then writes,
// fdatasyncs and unlocks each, workers at a time.
func benchFloorRelease(b *testing.B, n, workers int) {
	dir := b.TempDir()
	slot := localfs.EncodeSlot(2, localfs.Record{Key: "k", Owner: "floor", Epoch: 1, Released: true})
	files := make([]*os.File, n)
	for range b.N {
		b.StopTimer()
		for i := range files {
			f, err := os.OpenFile(fmt.Sprintf("%s/%d", dir, i), os.O_CREATE|os.O_RDWR, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				b.Fatal(err)
			}
			files[i] = f
		}
		b.StartTimer()
		next := make(chan *os.File)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for f := range next {
					if _, err := f.WriteAt(slot, localfs.SlotStride); err != nil {
						b.Error(err)
					}
					if err := localfs.Datasync(f); err != nil {
						b.Error(err)
					}
					syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
					f.Close()
				}
			})
		}
		for _, f := range files {
			next <- f
		}
		close(next)
		wg.Wait()
	}
	b.ReportMetric(float64(2*n), "roundtrips/op")
}

func benchReleaseAll(b *testing.B, n int) {
	ctx := context.Background()
	s, err := NewLocalStore(b.TempDir(), WithOwner("bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var trips uint64
	for range b.N {
		b.StopTimer()
		for i := range n {
			if _, err := s.Acquire(ctx, fmt.Sprintf("k%d", i)); err != nil {
				b.Fatal(err)
			}
		}
		before := s.roundTrips.Load()
		b.StartTimer()
		if err := s.ReleaseAll(ctx); err != nil {
			b.Fatal(err)
		}
		trips += s.roundTrips.Load() - before
	}
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/op")
}

// localHoldMany makes a store on a fresh root that holds n keys.
func localHoldMany(b *testing.B, n int) *LocalStore {
	s, err := NewLocalStore(b.TempDir(), WithOwner("bench"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	for i := range n {
		if _, err := s.Acquire(context.Background(), fmt.Sprintf("k%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

func benchFloorList(b *testing.B, n int) {
	s := localHoldMany(b, n)
	ents, err := os.ReadDir(s.root)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, localfs.FileLen+1)
	b.ResetTimer()
	for range b.N {
		for _, e := range ents {
			f, err := os.Open(s.root + "/" + e.Name())
			if err != nil {
				b.Fatal(err)
			}
			localfs.PreadOnce(f, buf)
			f.Close()
		}
		if _, err := localfs.ReadProcLocks(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(0, "roundtrips/op")
}

func benchHolders(b *testing.B, n int) {
	s := localHoldMany(b, n)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		got := 0
		for _, err := range s.Holders(ctx, "") {
			if err != nil {
				b.Fatal(err)
			}
			got++
		}
		if got != n {
			b.Fatalf("Holders yielded %d; want %d", got, n)
		}
	}
	b.ReportMetric(0, "roundtrips/op")
}
