//go:build unix && !aix

package mongodb

import (
	"context"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/mongoserver"
	"github.com/leasekit/lease/internal/sessionproc"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestSessionChild is the entry point of package sessionproc's children;
// run directly it does nothing.
func TestSessionChild(t *testing.T) { sessionproc.Serve(t, openURL) }

// sessionBackend is a fresh collection on the shared server, judged by the
// server's clock (R8): hello's localTime, the reading the driver's own
// clock samples. On FerretDB every process goes through this process's
// serialising proxy, and Open accepts it (mongoUnsafeEnv, openOptions);
// the proxy runs one command at a time, so that a batch of thousands of
// keys holds up the session's renewal: the first node holds ferretKeys.
func sessionBackend(t *testing.T) sessionproc.Backend {
	keys := 0
	if mongoserver.Shared(t).Ferret {
		t.Setenv(mongoUnsafeEnv, "1")
		openOptions = []Option{AllowUnsafeServer()}
		t.Cleanup(func() { openOptions = nil })
		keys = ferretKeys
	}
	client := mongoserver.SharedClient(t)
	return sessionproc.Backend{
		Keys: keys,
		URL:  mongoStoreURL(t, mongoserver.Collection(t, client).Name()),
		Open: openURL,
		Now: func(ctx context.Context) (time.Time, error) {
			var hello struct {
				LocalTime time.Time `bson:"localTime"`
			}
			err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello)
			return hello.LocalTime, err
		},
	}
}

// ferretKeys is how many keys the first node of KillTakeover holds on
// FerretDB behind the serialising proxy (10,000 on a real MongoDB).
const ferretKeys = 100

// TestR21KillTakeoverAcrossProcesses: a process holding 10,000 keys in one
// session is SIGKILLed; this process, waiting on them with HoldEach, takes
// every one after the session's expiry by the server's clock, epoch 2 and
// PreviousUnclean, with one kill write, and the shared journal shows no
// two live holders (sessionproc.KillTakeover).
func TestR21KillTakeoverAcrossProcesses(t *testing.T) {
	sessionproc.KillTakeover(t, sessionBackend(t))
}

// TestR21RenewalRacesKillAcrossProcesses: two processes, each with its own
// client, write one session record at one version, a renewal and a kill,
// 50 rounds: exactly one wins each round, the other gets ErrConflict
// (sessionproc.RenewKillRace).
func TestR21RenewalRacesKillAcrossProcesses(t *testing.T) {
	sessionproc.RenewKillRace(t, sessionBackend(t))
}
