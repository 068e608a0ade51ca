package lease_test

import (
	"testing"

	"github.com/leasekit/lease/internal/storechild"
)

// TestStoreChild is the store child's entry point (package childproc);
// run directly it does nothing.
func TestStoreChild(t *testing.T) { storechild.Serve(t) }
