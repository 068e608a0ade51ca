package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"iter"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasekit/lease"
)

// This file holds the PostgreSQL driver's batched writes and reads and its
// listing (BatchDriver, BatchReader, ListDriver).

// PutMany applies ws with one statement per postgresMaxBatch writes, each
// write its own compare-and-swap (R12): inserts that do nothing on an
// existing key, updates guarded by key and version. A write that did not
// land is ErrConflict. A batch naming one key twice is applied one write
// at a time, in order, as Put would.
func (d *postgresDriver) PutMany(ctx context.Context, ws []lease.Write) ([]lease.PutResult, error) {
	if err := d.usable(ctx); err != nil {
		return nil, err
	}
	results := make([]lease.PutResult, len(ws))
	if namesAKeyTwice(ws) {
		for i, w := range ws {
			results[i].Version, results[i].Err = d.Put(ctx, w.Rec, w.Pre)
		}
		return results, nil
	}
	for start := 0; start < len(ws); start += postgresMaxBatch {
		end := min(start+postgresMaxBatch, len(ws))
		if err := d.putChunk(ctx, ws[start:end], results[start:end]); err != nil {
			if start == 0 && end == len(ws) {
				return nil, err // one statement: every outcome is unknown
			}
			for i := start; i < end; i++ {
				results[i].Err = err
			}
		}
	}
	return results, nil
}

// namesAKeyTwice reports whether ws names a key twice: by comparing
// neighbours when ws is in key order, as the keeper's renewals are, else
// through a map.
func namesAKeyTwice(ws []lease.Write) bool {
	for i := 1; i < len(ws); i++ {
		switch strings.Compare(ws[i-1].Rec.Key, ws[i].Rec.Key) {
		case 0:
			return true
		case 1:
			seen := make(map[string]bool, len(ws))
			for _, w := range ws {
				if seen[w.Rec.Key] {
					return true
				}
				seen[w.Rec.Key] = true
			}
			return false
		}
	}
	return false
}

// putChunk runs the batch statement for ws, whose keys are distinct, and
// fills results. A write refused before the statement keeps its own error;
// the others go on.
func (d *postgresDriver) putChunk(ctx context.Context, ws []lease.Write, results []lease.PutResult) error {
	sent := make([]int, 0, len(ws)) // the indices in ws of the writes sent
	joinable := true
	for i, w := range ws {
		if err := checkPostgresWrite(w.Rec, w.Pre); err != nil {
			results[i].Err = d.fail("put", err)
			continue
		}
		if !w.Pre.Absent && (w.Pre.Version == 0 || w.Pre.Version >= math.MaxInt64) {
			results[i].Err = lease.ErrConflict
			continue
		}
		sent = append(sent, i)
		joinable = joinable && strings.IndexByte(w.Rec.Key, '\n') < 0 // putJoined joins keys by newlines
	}
	if len(sent) == 0 {
		return nil
	}
	var landed func(yield func(key string) bool)
	var err error
	if joinable {
		landed, err = d.putJoinedChunk(ctx, ws, sent)
	} else {
		landed, err = d.putArrayChunk(ctx, ws, sent)
	}
	if err != nil {
		return d.fail(fmt.Sprintf("put of %d writes", len(sent)), err)
	}
	for _, i := range sent {
		results[i].Err = lease.ErrConflict // until the statement says it landed
	}
	if landed == nil {
		for _, i := range sent {
			results[i] = lease.PutResult{Version: nextVersion(ws[i].Pre)}
		}
		return nil
	}
	at := make(map[string]int, len(sent)) // not all landed: which did
	for _, i := range sent {
		at[ws[i].Rec.Key] = i
	}
	for key := range landed {
		if i, ok := at[key]; ok {
			results[i] = lease.PutResult{Version: nextVersion(ws[i].Pre)}
		}
	}
	return nil
}

// nextVersion is the version a write against pre stores when it lands.
func nextVersion(pre lease.Precondition) uint64 {
	if pre.Absent {
		return 1
	}
	return pre.Version + 1
}

// putJoinedChunk writes ws[sent] with putJoined. It returns nil when
// every write landed, else the keys of those that did.
func (d *postgresDriver) putJoinedChunk(ctx context.Context, ws []lease.Write, sent []int) (func(func(string) bool), error) {
	var (
		keys, versions, ownerAt, epochs, expiryAt, released, sessionAt strings.Builder
		owners                                                         []string    // runs, in order
		expiries                                                       []time.Time // the same
		sessions                                                       []string    // the same
		keyBytes                                                       int
	)
	for _, i := range sent {
		keyBytes += len(ws[i].Rec.Key) + 1
	}
	keys.Grow(keyBytes)
	versions.Grow(8 * len(sent)) // most take fewer digits than that
	epochs.Grow(4 * len(sent))
	for _, b := range []*strings.Builder{&ownerAt, &expiryAt, &released, &sessionAt} {
		b.Grow(2 * len(sent))
	}
	for n, i := range sent {
		w := ws[i]
		if n > 0 {
			keys.WriteByte('\n')
			for _, b := range []*strings.Builder{&versions, &ownerAt, &epochs, &expiryAt, &released, &sessionAt} {
				b.WriteByte(',')
			}
		}
		keys.WriteString(w.Rec.Key)
		v := uint64(0) // 0: insert
		if !w.Pre.Absent {
			v = w.Pre.Version
		}
		writeUint(&versions, v)
		writeUint(&epochs, w.Rec.Epoch)
		if len(owners) == 0 || owners[len(owners)-1] != w.Rec.Owner {
			owners = append(owners, w.Rec.Owner)
		}
		writeUint(&ownerAt, uint64(len(owners))) // PostgreSQL arrays count from 1
		if len(expiries) == 0 || !expiries[len(expiries)-1].Equal(w.Rec.ExpiresAt) {
			expiries = append(expiries, w.Rec.ExpiresAt)
		}
		writeUint(&expiryAt, uint64(len(expiries)))
		if len(sessions) == 0 || sessions[len(sessions)-1] != w.Rec.Session {
			sessions = append(sessions, w.Rec.Session)
		}
		writeUint(&sessionAt, uint64(len(sessions)))
		if w.Rec.Released {
			released.WriteByte('t')
		} else {
			released.WriteByte('f')
		}
	}
	if len(owners) > maxJoinedOwners || len(sessions) > maxJoinedOwners {
		return d.putArrayChunk(ctx, ws, sent)
	}
	var (
		now   time.Time
		count int
		list  sql.NullString
	)
	err := d.db.QueryRowContext(ctx, d.putJoined, keys.String(), versions.String(), owners, ownerAt.String(),
		epochs.String(), expiries, expiryAt.String(), released.String(), len(sent), sessions, sessionAt.String()).Scan(&now, &count, &list)
	if err != nil {
		return nil, err
	}
	lease.ReportServerTime(ctx, now)
	if count == len(sent) {
		return nil, nil
	}
	return func(yield func(string) bool) {
		if !list.Valid {
			return // none landed
		}
		for key := range strings.SplitSeq(list.String, "\n") {
			if !yield(key) {
				return
			}
		}
	}, nil
}

// maxJoinedOwners is how many runs of owners, and of sessions, putJoined
// takes: a store writes its own owner and session only, and a text
// array's element is found by walking the array, so a batch of many goes
// in arrays instead.
const maxJoinedOwners = 8

func writeUint(b *strings.Builder, v uint64) {
	var buf [20]byte
	b.Write(strconv.AppendUint(buf[:0], v, 10))
}

// putArrayChunk writes ws[sent] with putMany, whose arrays carry any key,
// and returns the keys of the writes that landed.
func (d *postgresDriver) putArrayChunk(ctx context.Context, ws []lease.Write, sent []int) (func(func(string) bool), error) {
	n := len(sent)
	var (
		keys     = make([]string, 0, n)
		versions = make([]int64, 0, n)
		owners   = make([]string, 0, n)
		epochs   = make([]string, 0, n)
		expiries = make([]time.Time, 0, n)
		released = make([]bool, 0, n)
		sessions = make([]string, 0, n)
	)
	for _, i := range sent {
		w := ws[i]
		v := int64(0) // 0: insert
		if !w.Pre.Absent {
			v = int64(w.Pre.Version)
		}
		keys = append(keys, w.Rec.Key)
		versions = append(versions, v)
		owners = append(owners, w.Rec.Owner)
		epochs = append(epochs, strconv.FormatUint(w.Rec.Epoch, 10))
		expiries = append(expiries, w.Rec.ExpiresAt)
		released = append(released, w.Rec.Released)
		sessions = append(sessions, w.Rec.Session)
	}
	rows, err := d.db.QueryContext(ctx, d.putMany, keys, versions, owners, epochs, expiries, released, sessions)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		landed []string
		now    time.Time
	)
	for rows.Next() {
		var key sql.NullString
		if err := rows.Scan(&now, &key); err != nil {
			return nil, err
		}
		if key.Valid { // NULL: the one row of a statement that wrote none
			landed = append(landed, key.String)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	lease.ReportServerTime(ctx, now)
	return slices.Values(landed), nil
}

// GetMany reads every key in one query (key = ANY($1)). A key without a
// row is ErrNotFound; a row that does not parse is ErrCorrupt, for its key
// alone.
func (d *postgresDriver) GetMany(ctx context.Context, keys []string) ([]lease.GetResult, error) {
	if err := d.usable(ctx); err != nil {
		return nil, err
	}
	results := make([]lease.GetResult, len(keys))
	at := make(map[string][]int, len(keys))
	for i, k := range keys {
		at[k] = append(at[k], i)
		results[i].Err = lease.ErrNotFound
	}
	rows, err := d.db.QueryContext(ctx, d.getMany, keys)
	if err != nil {
		return nil, d.fail(fmt.Sprintf("get of %d keys", len(keys)), err)
	}
	defer rows.Close()
	var now time.Time
	for key, cols := range scanClockedRows(rows, &now, &err) {
		rec, version, perr := parsePostgresRow(key, cols)
		for _, i := range at[key] {
			results[i] = lease.GetResult{Rec: rec, Version: version, Err: perr}
		}
	}
	if err != nil {
		return nil, d.fail(fmt.Sprintf("get of %d keys", len(keys)), err)
	}
	lease.ReportServerTime(ctx, now)
	return results, nil
}

// List returns up to limit records whose keys begin with prefix and sort
// after `after`, in byte order: an index range on the key, whose
// collation is "C". A row that does not parse comes back as a Record with
// only its key, which the store refuses as corrupt.
func (d *postgresDriver) List(ctx context.Context, prefix, after string, limit int) ([]lease.Record, error) {
	if err := d.usable(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 || !printableASCII(prefix) {
		return nil, nil // no key (R1: printable ASCII) begins with such a prefix
	}
	var rows *sql.Rows
	var err error
	if prefix == "" {
		rows, err = d.db.QueryContext(ctx, d.list, after, prefix, limit)
	} else {
		end := prefix[:len(prefix)-1] + string(prefix[len(prefix)-1]+1) // printable ASCII: no carry
		rows, err = d.db.QueryContext(ctx, d.listTo, after, prefix, limit, end)
	}
	if err != nil {
		return nil, d.fail(fmt.Sprintf("list of %q", prefix), err)
	}
	defer rows.Close()
	var (
		recs []lease.Record
		now  time.Time
	)
	for key, cols := range scanClockedRows(rows, &now, &err) {
		rec, _, perr := parsePostgresRow(key, cols)
		if perr != nil {
			rec = lease.Record{Key: key} // owner "" and epoch 0: checkRecord refuses it (R10)
		}
		recs = append(recs, rec)
	}
	if err != nil {
		return nil, d.fail(fmt.Sprintf("list of %q", prefix), err)
	}
	lease.ReportServerTime(ctx, now)
	return recs, nil
}

// scanClockedRows yields the key and columns of each row of a read joined
// to the server's clock (see newPostgresStatements), skipping the row of
// NULLs that stands for no rows found; it sets *now to the clock and *err
// to the first error, when the rows are done.
func scanClockedRows(rows *sql.Rows, now *time.Time, err *error) iter.Seq2[string, rowColumns] {
	return func(yield func(string, rowColumns) bool) {
		for rows.Next() {
			var (
				key  sql.NullString
				cols rowColumns
			)
			if *err = rows.Scan(now, &key, &cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5]); *err != nil {
				return
			}
			if key.Valid && !yield(key.String, cols) {
				return
			}
		}
		*err = rows.Err()
	}
}
