package jsondriver_test

import (
	"testing"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/examples/jsondriver"
	"github.com/leasekit/lease/leasetest"
)

// TestConformance: the driver keeps the lease contract, as leasetest checks it.
func TestConformance(t *testing.T) {
	leasetest.TestDriver(t, func(t *testing.T) lease.Driver {
		d, err := jsondriver.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	})
}
