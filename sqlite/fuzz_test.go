package sqlite

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
)

// isOneLine reports an error message fit for a log line.
func isOneLine(err error) bool { return !strings.ContainsAny(err.Error(), "\n\r") }

// FuzzSQLiteRow feeds parseSQLiteRow any mix of SQLite values in the
// columns owner, epoch, expires_ms, released, version and session (kinds
// picks, three bits per column, the canonical type, NULL, an integer, a
// real, text or a blob). It must never panic; a refusal matches
// lease.ErrCorrupt, names the key and fits one line (R10); a row it
// accepts holds the canonical types only, with a session that is ” or a
// session id, and the record round-trips through the columns Put writes.
func FuzzSQLiteRow(f *testing.F) {
	f.Add("k", uint32(0), "alice", int64(4), int64(1_800_000_000_000), int64(0), int64(1), 4.5, []byte("x"), "")
	f.Add("a/b", uint32(0), "~", int64(-1), int64(-1), int64(1), int64(9), 0.0, []byte(nil), "")
	f.Add("s", uint32(0), "bob", int64(7), int64(253402214400000), int64(0), int64(3), 0.0, []byte(nil), "0123456789abcdef0123456789abcdef")
	f.Add("s", uint32(0), "bob", int64(7), int64(1), int64(0), int64(3), 0.0, []byte(nil), "0123456789ABCDEF0123456789abcdef")
	f.Fuzz(func(t *testing.T, key string, kinds uint32, owner string, epoch, expires, released, version int64, real float64, blob []byte,
		session string) {
		ints := [6]int64{epoch, epoch, expires, released, version, epoch}
		texts := [6]string{owner, owner, owner, owner, owner, session}
		var cols [6]any
		canonical := true
		for i := range cols {
			kind := kinds >> (3 * i) & 7
			canonical = canonical && kind == 0
			switch kind {
			case 0:
				if i == 0 || i == 5 {
					cols[i] = texts[i]
				} else {
					cols[i] = ints[i]
				}
			case 1:
				cols[i] = nil
			case 2:
				cols[i] = ints[i]
			case 3:
				cols[i] = real
			case 4:
				cols[i] = texts[i]
			default:
				cols[i] = blob
			}
		}
		rec, v, err := parseSQLiteRow(key, cols)
		if err != nil {
			if !errors.Is(err, lease.ErrCorrupt) || !isOneLine(err) || !strings.Contains(err.Error(), fmt.Sprintf("%q", key)) {
				t.Fatalf("parseSQLiteRow(%q, %#v) = %v; want one line matching lease.ErrCorrupt naming the key", key, cols, err)
			}
			return
		}
		for _, i := range []int{0, 5} {
			if _, isText := cols[i].(string); !isText {
				t.Fatalf("accepted column %d %#v, not text", i, cols[i])
			}
		}
		for i := 1; i < 5; i++ {
			if _, isInt := cols[i].(int64); !isInt {
				t.Fatalf("accepted column %d %#v, not an integer", i, cols[i])
			}
		}
		if rec.Session != "" && lease.ValidateSessionID(rec.Session) != nil {
			t.Fatalf("accepted session %q, neither '' nor a session id", rec.Session)
		}
		if rec.Key != key || v < 1 || rec.ExpiresAt.Location() != time.UTC {
			t.Fatalf("parseSQLiteRow(%q, %#v) = %+v v%d", key, cols, rec, v)
		}
		e, ms, rel := sqliteValues(rec)
		written := [6]any{rec.Owner, e, ms, rel, int64(v), rec.Session}
		again, v2, err := parseSQLiteRow(key, written)
		if err != nil || again != rec || v2 != v || (canonical && written != cols) {
			t.Fatalf("round trip of %+v v%d through Put's columns: %+v v%d, %v (columns %#v)", rec, v, again, v2, err, cols)
		}
	})
}
