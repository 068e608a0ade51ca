// Package rules holds the checks of the lease contract that the package
// lease and the driver packages of this module share, so that each is
// written once. Errors here carry no "lease:" prefix and match no sentinel;
// the callers wrap them.
package rules

import "fmt"

// MaxIDLen bounds keys and owners (R1).
const MaxIDLen = 256

// CheckOwner checks R1's rule for owners: 1 to MaxIDLen bytes of printable
// ASCII without spaces.
func CheckOwner(owner string) error {
	if len(owner) == 0 || len(owner) > MaxIDLen {
		return fmt.Errorf("owner of %d bytes, want 1 to %d", len(owner), MaxIDLen)
	}
	for i := 0; i < len(owner); i++ {
		if c := owner[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("owner %q: byte %#x at %d is not printable ASCII", owner, c, i)
		}
	}
	return nil
}

// PrefixSuccessor returns the least string greater than every string that
// begins with prefix, in byte order; false when there is none ("" or all
// 0xff bytes). A driver lists the keys under prefix as the range
// [prefix, successor).
func PrefixSuccessor(prefix string) (string, bool) {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}
