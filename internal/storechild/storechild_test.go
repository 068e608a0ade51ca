//go:build unix

package storechild

import (
	"testing"

	"github.com/leasekit/lease/internal/childproc"
)

func TestStoreChild(t *testing.T) { Serve(t) }

// TestRaceOnLocalStore runs the cross-process race on the local store:
// real children serving the protocol through lease.Open("file:...").
func TestRaceOnLocalStore(t *testing.T) {
	childproc.StoreRace(t, "file:"+t.TempDir(), false)
}
