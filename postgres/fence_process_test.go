//go:build unix

package postgres

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/childproc"
	"github.com/leasekit/lease/internal/pgserver"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// The fencing child's environment: the store's URL (with its table), the
// owner, and how far its store's clock runs ahead of the host's.
const (
	fenceEnvURL   = "LEASE_TEST_FENCE_URL"
	fenceEnvOwner = "LEASE_TEST_FENCE_OWNER"
	fenceEnvSkew  = "LEASE_TEST_FENCE_SKEW"
)

const (
	fenceProcs      = 8
	fenceIterations = 150                   // each child's attempts: an acquire or a fenced write
	fenceTTL        = 50 * time.Millisecond // short, and never renewed: grants pass on while their holders write
)

var fenceKeys = []string{"fenced/a", "fenced/b"}

// TestFenceChild is the fencing child's entry point; run directly it does
// nothing.
func TestFenceChild(t *testing.T) {
	url := os.Getenv(fenceEnvURL)
	if url == "" {
		return
	}
	skew, err := time.ParseDuration(os.Getenv(fenceEnvSkew))
	if err == nil {
		err = runFenceChild(url, os.Getenv(fenceEnvOwner), skew)
	}
	if err != nil {
		fmt.Printf("RESULT err %v\n", err)
		t.Fatal(err)
	}
}

// runFenceChild answers "ready", waits for "go", then over fenceIterations
// attempts takes a key when it holds none (never renewing it) and writes a
// row for it in a fenced transaction, until Fence says the grant is lost.
// It answers "done <commits> <losses>" and waits for its stdin to close.
func runFenceChild(url, owner string, skew time.Duration) error {
	ctx := context.Background()
	ahead := func() time.Time { return time.Now().Add(skew) }
	s, err := lease.Open(ctx, url, lease.WithOwner(owner), lease.WithTTL(fenceTTL), lease.WithClock(ahead))
	if err != nil {
		return err
	}
	defer s.Close()
	connURL, u, err := splitPostgresURL(url)
	if err != nil {
		return err
	}
	cfg, err := pgx.ParseConfig(connURL)
	if err != nil {
		return err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	in := bufio.NewScanner(os.Stdin)
	fmt.Println("RESULT ready")
	if !in.Scan() || in.Text() != "go" {
		return fmt.Errorf("want go, got %q", in.Text())
	}
	var g lease.Grant
	held := false
	commits, losses := 0, 0
	for i := range fenceIterations {
		if !held {
			g, err = s.Acquire(ctx, fenceKeys[i%len(fenceKeys)])
			if errors.Is(err, lease.ErrHeld) {
				continue
			}
			if err != nil {
				return err
			}
			held = true
		}
		switch err := fencedWrite(ctx, db, u.table, g); {
		case errors.Is(err, lease.ErrLost):
			losses++
			held = false
		case err != nil:
			return err
		default:
			commits++
		}
	}
	fmt.Printf("RESULT done %d %d\n", commits, losses)
	for in.Scan() {
	}
	return nil
}

// fencedWrite records (key, epoch, owner) in the writes table in a
// transaction fenced by g. The row's stamp comes from the commit counter,
// whose row lock the transaction holds until it commits, so that stamps
// order commits (see TestFenceProcessesWriteOnlyAsHolders).
func fencedWrite(ctx context.Context, db *sql.DB, table string, g lease.Grant) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := Fence(ctx, tx, g, Table(table)); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `WITH s AS (UPDATE `+table+`_seq SET n = n + 1 RETURNING n)
		INSERT INTO `+table+`_writes SELECT $1, $2::numeric, $3, n FROM s`, g.Key, strconv.FormatUint(g.Epoch, 10), g.Owner)
	if err != nil {
		return err
	}
	return tx.Commit()
}

// TestFenceProcessesWriteOnlyAsHolders (R5, R8): 8 processes (this test
// binary re-executed), their store clocks up to 35 ms apart, take two keys
// with a 50 ms TTL that they never renew, and write rows for them in
// fenced transactions while others take the keys over. An independent
// check then finds that every row was committed while the lease record
// named its writer's owner and epoch.
//
// The check does not trust Fence: a deferred trigger on the lease table
// logs every write of a record at its commit, stamped from a counter row
// that the committing transaction holds locked until its commit is done;
// each fenced write takes a stamp from the same counter before it commits.
// Stamps are therefore in commit order, and the record at a write's commit
// is the last one logged with a smaller stamp.
func TestFenceProcessesWriteOnlyAsHolders(t *testing.T) {
	table := pgserver.FreshTable(t)
	d, err := NewDriver(ctxBG, pgserver.SharedDB(t), Table(table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	t.Cleanup(func() {
		pgserver.SharedDB(t).Exec(`DROP TABLE IF EXISTS ` + table + `_seq, ` + table + `_writes, ` + table + `_history`)
	})
	pgExec(t,
		`CREATE TABLE `+table+`_seq (n bigint NOT NULL)`,
		`INSERT INTO `+table+`_seq VALUES (0)`,
		`CREATE TABLE `+table+`_writes (key text, epoch numeric, owner text, stamp bigint)`,
		`CREATE TABLE `+table+`_history (key text, epoch numeric, owner text, stamp bigint)`,
		`CREATE FUNCTION `+table+`_log() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			WITH s AS (UPDATE `+table+`_seq SET n = n + 1 RETURNING n)
			INSERT INTO `+table+`_history SELECT NEW.key, NEW.epoch, NEW.owner, n FROM s;
			RETURN NULL;
		END $$`,
		`CREATE CONSTRAINT TRIGGER `+table+`_log AFTER INSERT OR UPDATE ON `+table+`
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION `+table+`_log()`)

	url := postgresStoreURL(t, table)
	children := make([]*childproc.Child, fenceProcs)
	for i := range children {
		owner := fmt.Sprintf("proc-%d", i)
		children[i] = childproc.Start(t, "TestFenceChild", owner, fenceEnvURL+"="+url, fenceEnvOwner+"="+owner,
			fmt.Sprintf("%s=%dms", fenceEnvSkew, 5*i))
	}
	for _, c := range children {
		c.Send(t, "go")
	}
	commits, losses := 0, 0
	for _, c := range children {
		var n, m int
		if _, err := fmt.Sscanf(c.Recv(t), "done %d %d", &n, &m); err != nil {
			t.Fatalf("child %s: %v\nstderr: %s", c.Name, err, c.Stderr())
		}
		commits, losses = commits+n, losses+m
	}
	childproc.StopAll(t, children)

	db := pgserver.SharedDB(t)
	var written, writers, takeovers int
	err = db.QueryRow(`SELECT count(*), count(DISTINCT owner), (SELECT count(*) FROM `+table+`_history WHERE epoch > 1)
		FROM `+table+`_writes`).Scan(&written, &writers, &takeovers)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d fenced commits by %d owners, %d losses, %d takeovers", written, writers, losses, takeovers)
	if written != commits || writers < 2 || takeovers < 1 || losses < 1 {
		t.Fatalf("%d rows written, %d commits reported, %d writers, %d takeovers, %d losses: "+
			"want every commit written, and at least 2 writers, a takeover and a loss", written, commits, writers, takeovers, losses)
	}
	rows, err := db.Query(`SELECT w.key, w.epoch::text, w.owner, w.stamp, coalesce(h.owner, ''), coalesce(h.epoch::text, 'none')
		FROM ` + table + `_writes w LEFT JOIN LATERAL (
			SELECT owner, epoch FROM ` + table + `_history h WHERE h.key = w.key AND h.stamp < w.stamp
			ORDER BY h.stamp DESC LIMIT 1) h ON true
		WHERE h.owner IS DISTINCT FROM w.owner OR h.epoch IS DISTINCT FROM w.epoch
		ORDER BY w.stamp`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var key, epoch, owner, holder, holderEpoch string
		var stamp int64
		if err := rows.Scan(&key, &epoch, &owner, &stamp, &holder, &holderEpoch); err != nil {
			t.Fatal(err)
		}
		bad = append(bad, fmt.Sprintf("%s epoch %s by %s committed (stamp %d) while the record named %q epoch %s",
			key, epoch, owner, stamp, holder, holderEpoch))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Fatalf("%d of %d fenced writes committed by a non-holder:\n%s", len(bad), written, strings.Join(bad, "\n"))
	}
}
