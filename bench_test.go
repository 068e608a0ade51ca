package lease

import (
	"fmt"
	"testing"
	"time"
)

// benchDocumentStore measures a DocumentStore over the driver that open
// makes, reporting storage round trips per operation. The floor for each
// operation is the same driver calls made directly.
func benchDocumentStore(b *testing.B, open func(b *testing.B) Driver) {
	newStore := func(b *testing.B) (*DocumentStore, *faultDriver) {
		f := &faultDriver{Driver: open(b)}
		s, err := NewDocumentStore(f, WithOwner("bench"), WithTTL(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s, f
	}
	report := func(b *testing.B, f *faultDriver) {
		gets, puts := f.calls()
		b.ReportMetric(float64(gets+puts)/float64(b.N), "roundtrips/op")
	}
	b.Run("acquire", func(b *testing.B) {
		s, f := newStore(b)
		keys := benchKeys(b.N)
		f.set(func(f *faultDriver) { f.gets, f.puts = 0, 0 })
		b.ResetTimer()
		for i := range b.N {
			if _, err := s.Acquire(ctxBG, keys[i]); err != nil {
				b.Fatal(err)
			}
		}
		report(b, f)
	})
	b.Run("renew", func(b *testing.B) {
		s, f := newStore(b)
		g, err := s.Acquire(ctxBG, "k")
		if err != nil {
			b.Fatal(err)
		}
		f.set(func(f *faultDriver) { f.gets, f.puts = 0, 0 })
		b.ResetTimer()
		for range b.N {
			if g, err = s.Renew(ctxBG, g); err != nil {
				b.Fatal(err)
			}
		}
		report(b, f)
	})
	b.Run("release", func(b *testing.B) {
		s, f := newStore(b)
		grants := make([]Grant, b.N)
		for i, key := range benchKeys(b.N) {
			var err error
			if grants[i], err = s.Acquire(ctxBG, key); err != nil {
				b.Fatal(err)
			}
		}
		f.set(func(f *faultDriver) { f.gets, f.puts = 0, 0 })
		b.ResetTimer()
		for _, g := range grants {
			if err := s.Release(ctxBG, g); err != nil {
				b.Fatal(err)
			}
		}
		report(b, f)
	})
	b.Run("cycle", func(b *testing.B) {
		s, f := newStore(b)
		f.set(func(f *faultDriver) { f.gets, f.puts = 0, 0 })
		b.ResetTimer()
		for range b.N {
			g, err := s.Acquire(ctxBG, "k")
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Release(ctxBG, g); err != nil {
				b.Fatal(err)
			}
		}
		report(b, f)
	})
}

// benchDriverFloor makes the driver calls each store operation cannot
// avoid, directly: acquire = Get + Put, renew = Put, release = Put,
// cycle = Get + Put + Put.
func benchDriverFloor(b *testing.B, open func(b *testing.B) Driver) {
	exp := time.Now().Add(time.Hour)
	rec := func(key string, released bool) Record {
		return Record{Key: key, Owner: "bench", Epoch: 1, ExpiresAt: exp, Released: released}
	}
	b.Run("floor-acquire", func(b *testing.B) {
		d := open(b)
		keys := benchKeys(b.N)
		b.ResetTimer()
		for i := range b.N {
			d.Get(ctxBG, keys[i])
			if _, err := d.Put(ctxBG, rec(keys[i], false), Precondition{Absent: true}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(2, "roundtrips/op")
	})
	b.Run("floor-renew", func(b *testing.B) {
		d := open(b)
		v, err := d.Put(ctxBG, rec("k", false), Precondition{Absent: true})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			if v, err = d.Put(ctxBG, rec("k", false), Precondition{Version: v}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(1, "roundtrips/op")
	})
	b.Run("floor-cycle", func(b *testing.B) {
		d := open(b)
		if _, err := d.Put(ctxBG, rec("k", true), Precondition{Absent: true}); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			_, v, err := d.Get(ctxBG, "k")
			if err != nil {
				b.Fatal(err)
			}
			if v, err = d.Put(ctxBG, rec("k", false), Precondition{Version: v}); err != nil {
				b.Fatal(err)
			}
			if _, err = d.Put(ctxBG, rec("k", true), Precondition{Version: v}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(3, "roundtrips/op")
	})
}

// profileKeys are n keys shaped as a profile host's: "profile/" and 16
// hex digits that follow no order, so that consecutive keys are far
// apart in the store's key order, as random profile IDs are.
func profileKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		x := uint64(i+1) * 0x9e3779b97f4a7c15 // a bijection: distinct i, distinct keys
		keys[i] = fmt.Sprintf("profile/%016x", x^x>>29)
	}
	return keys
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	return keys
}

// BenchmarkMemory measures the document store over the memory driver
// beside its floor, in the same run.
func BenchmarkMemory(b *testing.B) {
	open := func(b *testing.B) Driver { return NewMemoryDriver() }
	benchDocumentStore(b, open)
	benchDriverFloor(b, open)
}
