//go:build unix && !aix

package sessionproc

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/childproc"
)

// Rounds is how many rounds RenewKillRace runs.
const Rounds = 50

// The two writes of a round.
const (
	writeRenew = "renew" // the holder's renewal: live, a later expiry
	writeKill  = "kill"  // a taker's kill: ended-unclean, the expiry kept
)

// raceOwner owns the sessions RenewKillRace creates.
const raceOwner = "holder"

// serveRacer is one of RenewKillRace's writers, on its own driver. It
// answers
//
//	arm renew|kill ID VERSION EXPIRY_UNIX_MS  prepare the write → "RESULT armed"
//	go                                        PutSession it at VERSION
//	                                          → "RESULT won <version>" | "RESULT conflict" | "RESULT err <text>"
//
// until its stdin ends.
func serveRacer(open lease.DriverOpener, url string, in io.Reader, out io.Writer) error {
	ctx := context.Background()
	d, err := open(ctx, url)
	if err != nil {
		return err
	}
	defer d.Close()
	sd, ok := d.(lease.SessionDriver)
	if !ok {
		return fmt.Errorf("the %s driver keeps no sessions", d.Name())
	}
	fmt.Fprintln(out, "RESULT ready")
	var (
		rec lease.SessionRecord
		pre lease.Precondition
	)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 5 && f[0] == "arm":
			if rec, pre, err = armed(f[1], f[2], f[3], f[4]); err != nil {
				return err
			}
			fmt.Fprintln(out, "RESULT armed")
		case len(f) == 1 && f[0] == "go":
			v, err := sd.PutSession(ctx, rec, pre)
			switch {
			case err == nil:
				fmt.Fprintf(out, "RESULT won %d\n", v)
			case errors.Is(err, lease.ErrConflict):
				fmt.Fprintln(out, "RESULT conflict")
			default:
				fmt.Fprintf(out, "RESULT err %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			}
		default:
			return fmt.Errorf("unknown command %q", sc.Text())
		}
	}
	return sc.Err()
}

// armed is the session write of an "arm" command.
func armed(write, id, version, expiry string) (lease.SessionRecord, lease.Precondition, error) {
	v, err := strconv.ParseUint(version, 10, 64)
	if err != nil {
		return lease.SessionRecord{}, lease.Precondition{}, err
	}
	ms, err := strconv.ParseInt(expiry, 10, 64)
	if err != nil {
		return lease.SessionRecord{}, lease.Precondition{}, err
	}
	rec := lease.SessionRecord{ID: id, Owner: raceOwner, ExpiresAt: time.UnixMilli(ms).UTC(), State: lease.SessionLive}
	switch write {
	case writeRenew:
		rec.ExpiresAt = rec.ExpiresAt.Add(TTL)
	case writeKill:
		rec.State = lease.SessionEndedUnclean
	default:
		return lease.SessionRecord{}, lease.Precondition{}, fmt.Errorf("unknown write %q", write)
	}
	return rec, lease.Precondition{Version: v}, nil
}

// RenewKillRace: R21, R24. Two processes, each on its own driver, write
// one session record at the same version at nearly the same instant (both
// blocked on their stdin until this process writes "go" to both): one as
// its holder's renewal (live, a later expiry), the other as a taker's kill
// (ended-unclean). Every round exactly one wins, the other gets
// lease.ErrConflict, and the record ends as the winner wrote it, at the
// version it was told. The processes swap roles and the order of their
// "go" every round; each round has a fresh session.
func RenewKillRace(t *testing.T, b Backend) {
	ctx := t.Context()
	d, err := b.Open(ctx, b.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	sd := d.(lease.SessionDriver)
	racers := []*childproc.Child{
		childproc.Start(t, ChildTest, "racer-1", EnvRole+"="+roleRace, EnvURL+"="+b.URL),
		childproc.Start(t, ChildTest, "racer-2", EnvRole+"="+roleRace, EnvURL+"="+b.URL),
	}
	wins := map[string]int{}
	start := time.Now()
	for round := range Rounds {
		id := newID(t)
		expiry := time.Now().Truncate(time.Millisecond).Add(TTL).UTC()
		v, err := sd.PutSession(ctx, lease.SessionRecord{ID: id, Owner: raceOwner, ExpiresAt: expiry, State: lease.SessionLive}, lease.Precondition{Absent: true})
		if err != nil {
			t.Fatal(err)
		}
		renewer, killer := racers[round%2], racers[1-round%2]
		renewer.Send(t, fmt.Sprintf("arm %s %s %d %d", writeRenew, id, v, expiry.UnixMilli()))
		killer.Send(t, fmt.Sprintf("arm %s %s %d %d", writeKill, id, v, expiry.UnixMilli()))
		for _, c := range racers {
			if got := c.Recv(t); got != "armed" {
				t.Fatalf("round %d: %s: %s", round, c.Name, got)
			}
		}
		// Both are blocked reading stdin: these two lines are the start.
		first, second := racers[round/2%2], racers[1-round/2%2]
		first.Send(t, "go")
		second.Send(t, "go")
		answers := map[string]string{writeRenew: renewer.Recv(t), writeKill: killer.Recv(t)}
		winner := roundWinner(t, round, answers)
		wins[winner]++
		checkRecord(t, sd, round, id, winner, expiry, answers[winner])
	}
	childproc.StopAll(t, racers)
	t.Logf("%d rounds in %v: the renewal won %d, the kill %d", Rounds, time.Since(start).Round(time.Millisecond), wins[writeRenew], wins[writeKill])
}

// roundWinner returns which write won the round, failing the test unless
// exactly one did and the other got ErrConflict.
func roundWinner(t *testing.T, round int, answers map[string]string) string {
	t.Helper()
	var won, lost []string
	for write, a := range answers {
		switch {
		case strings.HasPrefix(a, "won "):
			won = append(won, write)
		case a == "conflict":
			lost = append(lost, write)
		default:
			t.Fatalf("round %d: the %s: %s", round, write, a)
		}
	}
	if len(won) != 1 || len(lost) != 1 {
		t.Fatalf("round %d: %v won and %v got ErrConflict; want exactly one of each (answers %v)", round, won, lost, answers)
	}
	return won[0]
}

// checkRecord: the session ends as the winning write left it, at the
// version it was told.
func checkRecord(t *testing.T, sd lease.SessionDriver, round int, id, winner string, expiry time.Time, answer string) {
	t.Helper()
	want, _, err := armed(winner, id, "0", strconv.FormatInt(expiry.UnixMilli(), 10))
	if err != nil {
		t.Fatal(err)
	}
	wantV, err := strconv.ParseUint(strings.TrimPrefix(answer, "won "), 10, 64)
	if err != nil {
		t.Fatalf("round %d: %s: %v", round, answer, err)
	}
	got, v, err := sd.GetSession(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != want.ID || got.Owner != want.Owner || got.State != want.State || !got.ExpiresAt.Equal(want.ExpiresAt) || v != wantV {
		t.Fatalf("round %d: the %s won at version %d, but the record is %+v at version %d; want %+v", round, winner, wantV, got, v, want)
	}
}

// newID returns a fresh session id (R18: 128 random bits in hex).
func newID(t *testing.T) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}
