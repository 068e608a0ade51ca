//go:build unix && !aix

package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/pgserver"
	"github.com/leasekit/lease/internal/sessionproc"
)

// TestSessionChild is the entry point of package sessionproc's children;
// run directly it does nothing.
func TestSessionChild(t *testing.T) { sessionproc.Serve(t, openURL) }

// sessionBackend is a fresh table on the shared server, judged by the
// server's clock (R8): clock_timestamp(), read on a connection of its own.
func sessionBackend(t *testing.T) sessionproc.Backend {
	db := pgserver.SharedDB(t)
	return sessionproc.Backend{
		URL:  postgresStoreURL(t, pgserver.FreshTable(t)),
		Open: openURL,
		Now: func(ctx context.Context) (now time.Time, err error) {
			err = db.QueryRowContext(ctx, "SELECT clock_timestamp()").Scan(&now)
			return now, err
		},
	}
}

// TestR21KillTakeoverAcrossProcesses: a process holding 10,000 keys in one
// session is SIGKILLed; this process, waiting on them with HoldEach, takes
// every one after the session's expiry by the server's clock, epoch 2 and
// PreviousUnclean, with one kill write, and the shared journal shows no
// two live holders (sessionproc.KillTakeover).
func TestR21KillTakeoverAcrossProcesses(t *testing.T) {
	sessionproc.KillTakeover(t, sessionBackend(t))
}

// TestR21RenewalRacesKillAcrossProcesses: two processes, each with its own
// pool, write one session record at one version, a renewal and a kill, 50
// rounds: exactly one wins each round, the other gets ErrConflict
// (sessionproc.RenewKillRace).
func TestR21RenewalRacesKillAcrossProcesses(t *testing.T) {
	sessionproc.RenewKillRace(t, sessionBackend(t))
}
