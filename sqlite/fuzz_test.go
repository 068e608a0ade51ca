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
// columns owner, epoch, expires_ms, released and version (kinds picks,
// three bits per column, the canonical type, NULL, an integer, a real,
// text or a blob). It must never panic; a refusal matches lease.ErrCorrupt,
// names the key and fits one line (R10); a row it accepts holds the
// canonical types only, and the record round-trips through the columns
// Put writes.
func FuzzSQLiteRow(f *testing.F) {
	f.Add("k", uint16(0), "alice", int64(4), int64(1_800_000_000_000), int64(0), int64(1), 4.5, []byte("x"))
	f.Add("a/b", uint16(0), "~", int64(-1), int64(-1), int64(1), int64(9), 0.0, []byte(nil))
	f.Fuzz(func(t *testing.T, key string, kinds uint16, owner string, epoch, expires, released, version int64, real float64, blob []byte) {
		ints := [5]int64{epoch, epoch, expires, released, version}
		var cols [5]any
		canonical := true
		for i := range cols {
			kind := kinds >> (3 * i) & 7
			canonical = canonical && kind == 0
			switch kind {
			case 0:
				if i == 0 {
					cols[i] = owner
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
				cols[i] = owner
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
		if _, isText := cols[0].(string); !isText {
			t.Fatalf("accepted owner %#v, not text", cols[0])
		}
		for i := 1; i < 5; i++ {
			if _, isInt := cols[i].(int64); !isInt {
				t.Fatalf("accepted column %d %#v, not an integer", i, cols[i])
			}
		}
		if rec.Key != key || v < 1 || rec.ExpiresAt.Location() != time.UTC {
			t.Fatalf("parseSQLiteRow(%q, %#v) = %+v v%d", key, cols, rec, v)
		}
		e, ms, rel := sqliteValues(rec)
		again, v2, err := parseSQLiteRow(key, [5]any{rec.Owner, e, ms, rel, int64(v)})
		if err != nil || again != rec || v2 != v || (canonical && ([5]any{owner, e, ms, rel, int64(v)} != cols)) {
			t.Fatalf("round trip of %+v v%d through Put's columns: %+v v%d, %v (columns %#v)", rec, v, again, v2, err, cols)
		}
	})
}
