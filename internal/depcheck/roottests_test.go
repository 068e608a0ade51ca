package depcheck

import "testing"

// TestCoreTestsLinkNoDatabaseLibrary: package lease's own tests link no
// database library, so that they start no database server either: they
// test what the package defines on the memory and file: stores, and each
// driver package runs the conformance suite on itself.
func TestCoreTestsLinkNoDatabaseLibrary(t *testing.T) {
	if found := linked(t, "github.com/leasekit/lease", "-test"); len(found) > 0 {
		t.Errorf("package lease's tests link database libraries: %v; a test of a driver belongs in that driver's package", found)
	}
}
