package lease

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestInKeyOrder: whatever runs a renewal wave is made of (each from one
// round, in key order or not, their ranges apart or overlapping, in any
// order), the keeper renews it in key order, every Held once.
func TestInKeyOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := &keeper{}
		for range 3 { // the keeper reuses its arrays from wave to wave
			var wave []*Held
			var runs []keyRun
			for range rapid.IntRange(0, 6).Draw(t, "runs") {
				keys := rapid.SliceOfDistinct(rapid.StringMatching(`[a-e]{1,3}`), rapid.ID[string]).Draw(t, "keys")
				if len(keys) == 0 {
					continue
				}
				sorted := rapid.Bool().Draw(t, "sorted")
				if sorted {
					slices.Sort(keys)
				}
				start := len(wave)
				for _, key := range keys {
					wave = append(wave, &Held{key: key})
				}
				runs = append(runs, keyRun{start, len(wave), !sorted && !slices.IsSorted(keys)})
			}
			want := make([]string, len(wave))
			for i, h := range wave {
				want[i] = h.key
			}
			slices.Sort(want)
			got := k.inKeyOrder(wave, runs)
			keys := make([]string, len(got))
			for i, h := range got {
				keys[i] = h.key
			}
			if !slices.Equal(keys, want) {
				t.Fatalf("renewed %q; want %q", keys, want)
			}
		}
	})
}
