package rules

import (
	"strings"
	"testing"
)

func TestPrefixSuccessor(t *testing.T) {
	for _, tc := range []struct {
		in, out string
		ok      bool
	}{{"", "", false}, {"a", "b", true}, {"a/", "a0", true}, {"a\xff", "b", true}, {"\xff\xff", "", false}, {"az", "a{", true}} {
		out, ok := PrefixSuccessor(tc.in)
		if out != tc.out || ok != tc.ok {
			t.Errorf("PrefixSuccessor(%q) = %q, %v; want %q, %v", tc.in, out, ok, tc.out, tc.ok)
		}
	}
}

func TestCheckOwner(t *testing.T) {
	for _, ok := range []string{"a", "node-1", "~!#", strings.Repeat("x", MaxIDLen)} {
		if err := CheckOwner(ok); err != nil {
			t.Errorf("CheckOwner(%q) = %v; want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "a b", "a\x00", "é", "\x7f", strings.Repeat("x", MaxIDLen+1)} {
		if err := CheckOwner(bad); err == nil {
			t.Errorf("CheckOwner(%q) accepted", bad)
		}
	}
}
