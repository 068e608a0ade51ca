package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/rules"
)

// This file holds the SQLite driver's batched writes and reads and its
// listing (BatchDriver, BatchReader, ListDriver).

// sqliteBatchChunk is how many writes PutMany commits in one transaction,
// and how many keys GetMany reads in one query. An UPDATE by primary key
// costs a few microseconds, so a full chunk holds the write lock for about
// 10 ms plus its fsync, and other processes' writes are not starved by one
// large batch; 10,000 renewals take 4 transactions.
const sqliteBatchChunk = 2500

// PutMany applies ws in transactions of up to sqliteBatchChunk writes,
// each write with its own precondition as Put: a write whose precondition
// fails is ErrConflict in its result and does not stop the others. Each
// chunk is one commit, so one fsync. If a chunk fails before its commit,
// it is rolled back and each of its writes reports the error (nothing of
// it was written); if the commit itself fails, each of its writes reports
// an error saying the outcome is unknown, and the store re-reads (R9).
// The chunks after a failed one are not attempted.
func (d *sqliteDriver) PutMany(ctx context.Context, ws []lease.Write) ([]lease.PutResult, error) {
	if d.closed.Load() {
		return nil, lease.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqlite %s put many: %w", d.path, err)
	}
	results := make([]lease.PutResult, len(ws))
	for start := 0; start < len(ws); start += sqliteBatchChunk {
		end := min(start+sqliteBatchChunk, len(ws))
		if err := d.putChunk(ctx, ws[start:end], results[start:end]); err != nil {
			for i := range results[end:] {
				results[end+i].Err = d.fail("put", ws[end+i].Rec.Key,
					fmt.Errorf("not written: an earlier chunk of the batch failed: %w", err))
			}
			break
		}
	}
	return results, nil
}

// putChunk applies ws in one transaction and fills results. A non-nil
// error means the chunk failed; results then say so per write.
func (d *sqliteDriver) putChunk(ctx context.Context, ws []lease.Write, results []lease.PutResult) (err error) {
	fail := func(what string, err error) error {
		for i, w := range ws {
			results[i] = lease.PutResult{Err: d.fail("put", w.Rec.Key, fmt.Errorf("%s: %w", what, err))}
		}
		return err
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fail("not written", err)
	}
	// The writes run on a context that does not end: on one that can,
	// the SQLite driver starts a goroutine per statement to watch it. The
	// write lock is already taken (BEGIN IMMEDIATE, which ctx can end), no
	// statement waits for another process, and ctx is checked between
	// statements, so a batch still stops soon after ctx ends.
	stmtCtx := context.WithoutCancel(ctx)
	insert, update := tx.StmtContext(stmtCtx, d.insert), tx.StmtContext(stmtCtx, d.update)
	for i, w := range ws {
		v, err := d.putWith(stmtCtx, insert, update, w.Rec, w.Pre)
		if err == nil {
			err = ctx.Err() // this write stays uncommitted: the rollback below ends the batch
		}
		switch {
		case err == nil || errors.Is(err, lease.ErrConflict):
			results[i] = lease.PutResult{Version: v, Err: err}
		case w.Pre.Version == math.MaxInt64:
			results[i] = lease.PutResult{Err: d.fail("put", w.Rec.Key, err)} // refused before the database: the others go on
		default:
			_ = tx.Rollback() // an uncommitted transaction is never durable, whatever Rollback says
			return fail("not written, the batch's transaction was rolled back", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fail("outcome unknown, the batch's commit failed", err)
	}
	d.commits.Add(1)
	return nil
}

// GetMany reads keys as Get would, with one query per sqliteBatchChunk
// keys. A key without a row is ErrNotFound in its result; a row that does
// not parse is ErrCorrupt in its result (R10).
func (d *sqliteDriver) GetMany(ctx context.Context, keys []string) ([]lease.GetResult, error) {
	if d.closed.Load() {
		return nil, lease.ErrClosed
	}
	results := make([]lease.GetResult, len(keys))
	at := make(map[string][]int, len(keys)) // a key may be asked for twice
	for i, k := range keys {
		at[k] = append(at[k], i)
		results[i].Err = lease.ErrNotFound
	}
	for start := 0; start < len(keys); start += sqliteBatchChunk {
		chunk := keys[start:min(start+sqliteBatchChunk, len(keys))]
		args := make([]any, len(chunk))
		for i, k := range chunk {
			args[i] = k
		}
		var stmt *sql.Stmt // prepared for one key (a lone Hold's look); a longer query is prepared as it runs
		query := ""
		if len(chunk) == 1 {
			stmt = d.getOne
		} else {
			query = fmt.Sprintf(sqliteRowsIn, strings.TrimSuffix(strings.Repeat("?,", len(chunk)), ","))
		}
		err := d.eachRow(ctx, func(key string, rec lease.Record, version uint64, err error) error {
			for _, i := range at[key] {
				results[i] = lease.GetResult{Rec: rec, Version: version, Err: err}
			}
			return nil
		}, stmt, query, args...)
		if err != nil {
			return nil, d.fail("get many", chunk[0], err)
		}
	}
	return results, nil
}

// List returns up to limit records whose keys begin with prefix and sort
// after `after`, in ascending byte order of key, from one range query on
// the primary key. A row that does not parse fails the whole call with an
// error matching ErrCorrupt that names its key (R10).
func (d *sqliteDriver) List(ctx context.Context, prefix, after string, limit int) ([]lease.Record, error) {
	if d.closed.Load() {
		return nil, lease.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqlite %s list %q: %w", d.path, prefix, err)
	}
	if limit <= 0 {
		return nil, nil // SQLite reads LIMIT -1 as no limit
	}
	var upper any // NULL: no key sorts after every key with this prefix
	if s, ok := rules.PrefixSuccessor(prefix); ok {
		upper = s
	}
	var recs []lease.Record
	err := d.eachRow(ctx, func(key string, rec lease.Record, _ uint64, err error) error {
		if err != nil {
			return err
		}
		recs = append(recs, rec)
		return nil
	}, d.list, "", prefix, upper, after, limit)
	if errors.Is(err, lease.ErrCorrupt) {
		return nil, err
	}
	if err != nil {
		return nil, d.fail("list", prefix, err)
	}
	return recs, nil
}

// eachRow runs a query for the columns key, owner, epoch, expires_ms,
// released, version and session (stmt, or query on the read pool if stmt
// is nil) and calls fn with each row parsed; a row that does not parse
// comes with its ErrCorrupt.
// An error from fn stops the rows and is returned.
func (d *sqliteDriver) eachRow(ctx context.Context, fn func(key string, rec lease.Record, version uint64, err error) error,
	stmt *sql.Stmt, query string, args ...any) error {
	var rows *sql.Rows
	var err error
	if stmt != nil {
		rows, err = stmt.QueryContext(ctx, args...)
	} else {
		rows, err = d.rdb.QueryContext(ctx, query, args...)
	}
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var key any
		var cols [6]any
		if err := rows.Scan(&key, &cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5]); err != nil {
			return err
		}
		k, ok := key.(string)
		if !ok {
			if err := fn("", lease.Record{}, 0, corruptColumn(fmt.Sprint(key), "key", key, "text")); err != nil {
				return err
			}
			continue
		}
		rec, version, err := parseSQLiteRow(k, cols)
		if err := fn(k, rec, version, err); err != nil {
			return err
		}
	}
	return rows.Err()
}
