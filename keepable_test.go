package lease

import (
	"strings"
	"testing"
)

// sliceStore is a caller's Store whose values cannot be compared.
type sliceStore struct {
	plainStore
	tags []string
}

// boxStore is a caller's Store of a comparable type that may hold a value
// that cannot be compared.
type boxStore struct{ Store }

// TestR16StoreThatCannotBeToldApart: R16 needs one keeper per store, found
// by the store's value. A Store value that cannot be compared (its type, or
// the value an interface field holds) is refused by Hold and HoldEach with
// a clear error, never a panic, and never a keeper per call, with which
// two Holds of one key could share a grant (R4c).
func TestR16StoreThatCannotBeToldApart(t *testing.T) {
	inner := plainStore{loopStore(t, NewMemoryDriver(), "alice")}
	for _, s := range []Store{
		sliceStore{inner, []string{"a"}},
		boxStore{sliceStore{inner, nil}},
	} {
		h, err := Hold(t.Context(), s, "k")
		if err == nil {
			_ = h.Release(t.Context())
			t.Fatalf("Hold through a %T = a Held; want an error", s)
		}
		if !strings.Contains(err.Error(), "pass a pointer") || strings.Count(err.Error(), "lease:") != 1 {
			t.Errorf("Hold through a %T = %v; want one line that says to pass a pointer", s, err)
		}
		for r := range HoldEach(t.Context(), s, []string{"a", "b"}) {
			if r.Err == nil {
				_ = r.Held.Release(t.Context())
				t.Errorf("HoldEach through a %T held %q; want an error", s, r.Key)
			}
		}
	}
	// A comparable wrapper of a comparable store is kept as before.
	h, err := Hold(t.Context(), boxStore{inner}, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}
