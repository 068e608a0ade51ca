package mongodb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/internal/rules"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// This file holds the driver's batched operations (R12): PutMany as
// unordered bulkWrites, GetMany as one find per chunk of keys, and List.

// mongoBatchChunk is how many writes PutMany sends in one bulkWrite, and
// how many keys GetMany asks for in one find. FerretDB v1 (a test stand-in,
// see AllowUnsafeServer) keeps every update's query open until the whole
// update command ends, each holding one of its SQLite backend's 100 pooled
// connections, so a command of about 100 updates waits for itself forever;
// PutMany sends it ferretBatchChunk writes at a time.
const (
	mongoBatchChunk  = 1000
	ferretBatchChunk = 50
)

var (
	_ lease.BatchDriver = (*mongoDriver)(nil)
	_ lease.BatchReader = (*mongoDriver)(nil)
	_ lease.ListDriver  = (*mongoDriver)(nil)
)

// PutMany applies ws as unordered bulkWrites of up to mongoBatchChunk
// (ferretBatchChunk on FerretDB) writes, with the collection's majority, journaled write concern: each
// write is an insert (Absent) or an update filtered on _id, version and
// the guard, as Put sends it, and each has its own answer.
//
// A duplicate _id on an insert is that write's ErrConflict. An update that
// matches nothing is a conflict too, but bulkWrite reports only the total
// of matched documents, not which update matched. When the total is short,
// one find reads the chunk's updated keys, and each update is judged by
// what its document shows (see judgeUpdate): since versions only grow and
// exactly one write can move a document from version v to v+1, a document
// below v+1, or at v+1 with other contents, proves the update did not
// apply (ErrConflict); one at v+1 with this write's contents proves it
// did; anything else leaves the outcome unknown, and the store re-reads.
//
// An error for the whole chunk (a lost connection, a write concern error)
// leaves each of its writes' outcome unknown; later chunks are not sent.
func (d *mongoDriver) PutMany(ctx context.Context, ws []lease.Write) (results []lease.PutResult, err error) {
	if err := d.usable(ctx); err != nil {
		return nil, err
	}
	err = d.withServerClock(ctx, func() error {
		results = d.putMany(ctx, ws)
		return nil
	})
	return results, err
}

func (d *mongoDriver) putMany(ctx context.Context, ws []lease.Write) []lease.PutResult {
	results := make([]lease.PutResult, len(ws))
	for start := 0; start < len(ws); start += d.chunk {
		end := min(start+d.chunk, len(ws))
		if err := d.putChunk(ctx, ws[start:end], results[start:end]); err != nil {
			for i := range results[end:] {
				results[end+i].Err = fmt.Errorf("lease: mongodb write %q not sent: an earlier part of the batch failed: %w",
					ws[end+i].Rec.Key, err)
			}
			break
		}
	}
	return results
}

// putChunk sends ws as one unordered bulkWrite and fills results. A
// non-nil error means every write's outcome is unknown; results say so.
func (d *mongoDriver) putChunk(ctx context.Context, ws []lease.Write, results []lease.PutResult) error {
	models := make([]mongo.WriteModel, 0, len(ws))
	index := make([]int, 0, len(ws)) // models[j] is ws[index[j]]
	updates := 0
	for i, w := range ws {
		switch {
		case w.Pre.Absent:
			results[i].Version = 1
			models = append(models, mongo.NewInsertOneModel().SetDocument(append(bson.D{{Key: "_id", Value: w.Rec.Key}}, mongoFields(w.Rec, 1)...)))
		case w.Pre.Version == 0: // versions start at 1: no document matches
			results[i].Err = lease.ErrConflict
			continue
		case w.Pre.Version >= math.MaxInt64:
			results[i].Err = fmt.Errorf("lease: mongodb update %q: version %d out of range", w.Rec.Key, w.Pre.Version)
			continue
		default:
			updates++
			results[i].Version = w.Pre.Version + 1
			models = append(models, mongo.NewUpdateOneModel().SetFilter(mongoUpdateFilter(w.Rec.Key, w.Pre.Version)).
				SetUpdate(bson.D{{Key: "$set", Value: mongoFields(w.Rec, w.Pre.Version+1)}}))
		}
		index = append(index, i)
	}
	if len(models) == 0 {
		return nil
	}
	res, err := d.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	var bwe mongo.BulkWriteException
	if err != nil && (!errors.As(err, &bwe) || bwe.WriteConcernError != nil) {
		for _, i := range index {
			results[i] = lease.PutResult{Err: fmt.Errorf("lease: mongodb write %q in a batch, outcome unknown: %w", ws[i].Rec.Key, err)}
		}
		return err
	}
	failed := make(map[int]bool, len(bwe.WriteErrors))
	for _, we := range bwe.WriteErrors {
		if we.Index < 0 || we.Index >= len(index) {
			continue
		}
		i := index[we.Index]
		failed[i] = true
		switch {
		case ws[i].Pre.Absent && isDuplicateKey(we.WriteError):
			results[i] = lease.PutResult{Err: lease.ErrConflict}
		case ws[i].Pre.Absent:
			results[i] = lease.PutResult{Err: fmt.Errorf("lease: mongodb insert %q: %w", ws[i].Rec.Key, we.WriteError)}
		default:
			updates-- // it matched nothing that MatchedCount counts
			results[i] = lease.PutResult{Err: fmt.Errorf("lease: mongodb update %q: %w", ws[i].Rec.Key, we.WriteError)}
		}
	}
	if res != nil && res.MatchedCount >= int64(updates) {
		return nil // every update without a write error matched its document
	}
	return d.judgeUpdates(ctx, ws, results, failed)
}

// judgeUpdates reads the documents of the updates in ws that have no
// answer yet and judges each (see judgeUpdate). If the read fails, their
// outcome is unknown.
func (d *mongoDriver) judgeUpdates(ctx context.Context, ws []lease.Write, results []lease.PutResult, failed map[int]bool) error {
	var keys []string
	for i, w := range ws {
		if !w.Pre.Absent && results[i].Err == nil && !failed[i] {
			keys = append(keys, w.Rec.Key)
		}
	}
	docs, err := d.findRaw(ctx, keys)
	for i, w := range ws {
		if w.Pre.Absent || results[i].Err != nil || failed[i] {
			continue
		}
		if err != nil {
			results[i] = lease.PutResult{Err: fmt.Errorf("lease: mongodb update %q in a batch, outcome unknown: "+
				"not every update matched, and reading which failed: %w", w.Rec.Key, err)}
			continue
		}
		results[i] = judgeUpdate(w, docs[w.Rec.Key])
	}
	return nil
}

// judgeUpdate answers an update of a bulkWrite from its document as read
// after it (raw is nil when there is none). Versions only grow, and only
// one write can move a document from version v to v+1.
func judgeUpdate(w lease.Write, raw bson.Raw) lease.PutResult {
	want := w.Pre.Version + 1
	if raw == nil {
		return lease.PutResult{Err: lease.ErrConflict} // records are never deleted: it never existed
	}
	v, ok := raw.Lookup("version").Int64OK()
	switch {
	case ok && v >= 1 && uint64(v) < want:
		return lease.PutResult{Err: lease.ErrConflict} // it never reached v+1: the update did not apply
	case ok && uint64(v) == want:
		rec, _, err := decodeMongoRecord(raw)
		if err == nil && sameState(rec, withMillis(w.Rec)) {
			return lease.PutResult{Version: want} // this write's contents at v+1
		}
		if err == nil {
			return lease.PutResult{Err: lease.ErrConflict} // another write took v to v+1
		}
	}
	return lease.PutResult{Err: fmt.Errorf("lease: mongodb update %q in a batch, outcome unknown: "+
		"its document moved on to version %v", w.Rec.Key, raw.Lookup("version"))}
}

// GetMany reads keys as Get would, with one find per mongoBatchChunk keys
// ({_id: {$in: keys}}). A key without a document is ErrNotFound in its
// result; a document that does not parse is ErrCorrupt in its result.
func (d *mongoDriver) GetMany(ctx context.Context, keys []string) (results []lease.GetResult, err error) {
	if err := d.usable(ctx); err != nil {
		return nil, err
	}
	err = d.withServerClock(ctx, func() (err error) {
		results, err = d.getMany(ctx, keys)
		return err
	})
	return results, err
}

func (d *mongoDriver) getMany(ctx context.Context, keys []string) ([]lease.GetResult, error) {
	docs := make(map[string]bson.Raw, len(keys))
	for start := 0; start < len(keys); start += mongoBatchChunk {
		chunk, err := d.findRaw(ctx, keys[start:min(start+mongoBatchChunk, len(keys))])
		if err != nil {
			return nil, err
		}
		maps.Copy(docs, chunk)
	}
	results := make([]lease.GetResult, len(keys))
	for i, k := range keys {
		raw, ok := docs[k]
		if !ok {
			results[i].Err = lease.ErrNotFound
			continue
		}
		rec, v, err := decodeMongoRecord(raw)
		results[i] = lease.GetResult{Rec: rec, Version: v, Err: err}
	}
	return results, nil
}

// findRaw reads the documents of keys in one find, by _id.
func (d *mongoDriver) findRaw(ctx context.Context, keys []string) (map[string]bson.Raw, error) {
	docs := make(map[string]bson.Raw, len(keys))
	if len(keys) == 0 {
		return docs, nil
	}
	filter := bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: keys}}}}
	// A batch one larger than the most documents the keys can match holds
	// them all and ends the cursor with the first reply: no getMore.
	cur, err := d.coll.Find(ctx, filter, options.Find().SetBatchSize(int32(len(keys)+1)))
	if err != nil {
		return nil, fmt.Errorf("lease: mongodb read %d keys: %w", len(keys), err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	for cur.Next(ctx) {
		if id, ok := cur.Current.Lookup("_id").StringValueOK(); ok {
			docs[id] = slices.Clone(cur.Current)
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("lease: mongodb read %d keys: %w", len(keys), err)
	}
	return docs, nil
}

// List returns up to limit records whose keys begin with prefix and sort
// after `after`, in ascending key order: one find over a range of _id,
// sorted by _id. MongoDB compares strings bytewise (without a collation,
// which this collection does not have), so this is byte order. A document
// that does not parse fails the call with an error matching ErrCorrupt
// that names its key (R10).
func (d *mongoDriver) List(ctx context.Context, prefix, after string, limit int) (recs []lease.Record, err error) {
	if err := d.usable(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	err = d.withServerClock(ctx, func() (err error) {
		recs, err = d.list(ctx, prefix, after, limit)
		return err
	})
	return recs, err
}

func (d *mongoDriver) list(ctx context.Context, prefix, after string, limit int) ([]lease.Record, error) {
	rng := bson.D{{Key: "$gte", Value: prefix}}
	if after >= prefix {
		rng = bson.D{{Key: "$gt", Value: after}}
	}
	// Without a valid UTF-8 successor the range stays open above, and the
	// first key past the prefix ends the listing.
	if upper, ok := rules.PrefixSuccessor(prefix); ok && utf8.ValidString(upper) {
		rng = append(rng, bson.E{Key: "$lt", Value: upper})
	}
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(limit)).SetBatchSize(int32(min(limit, math.MaxInt32-1) + 1)) // one past the limit: no getMore
	cur, err := d.coll.Find(ctx, bson.D{{Key: "_id", Value: rng}}, opts)
	if err != nil {
		return nil, fmt.Errorf("lease: mongodb list %q: %w", prefix, err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	var recs []lease.Record
	for cur.Next(ctx) {
		rec, _, err := decodeMongoRecord(cur.Current)
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(rec.Key, prefix) {
			break
		}
		recs = append(recs, rec)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("lease: mongodb list %q: %w", prefix, err)
	}
	return recs, nil
}
