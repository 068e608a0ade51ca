//go:build unix && !aix

package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/leasekit/lease/internal/sessionproc"
)

// TestSessionChild is the entry point of package sessionproc's children;
// run directly it does nothing.
func TestSessionChild(t *testing.T) { sessionproc.Serve(t, openURL) }

// sessionBackend is a fresh SQLite file, judged by the host's clock (R8).
func sessionBackend(t *testing.T) sessionproc.Backend {
	return sessionproc.Backend{URL: "sqlite:" + filepath.Join(t.TempDir(), "leases.db"), Open: openURL, Now: sessionproc.HostClock}
}

// TestR21KillTakeoverAcrossProcesses: a process holding 10,000 keys in one
// session is SIGKILLed; this process, waiting on them with HoldEach, takes
// every one after the session's expiry by the host's clock, epoch 2 and
// PreviousUnclean, with one kill write, and the shared journal shows no
// two live holders (sessionproc.KillTakeover).
func TestR21KillTakeoverAcrossProcesses(t *testing.T) {
	sessionproc.KillTakeover(t, sessionBackend(t))
}

// TestR21RenewalRacesKillAcrossProcesses: two processes write one session
// record at one version, a renewal and a kill, 50 rounds: exactly one wins
// each round, the other gets ErrConflict (sessionproc.RenewKillRace).
func TestR21RenewalRacesKillAcrossProcesses(t *testing.T) {
	sessionproc.RenewKillRace(t, sessionBackend(t))
}
