package mongodb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/leasekit/lease"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// This file holds the driver's session records (R18–R24). They live in
// the collection named after the key collection plus "_sessions", one
// document per session:
//
//	{_id: id, owner: string, expires: date, state: int32 (1..3), version: int64}
//
// They are written as key documents are: an insert for Precondition.Absent
// (a duplicate _id is ErrConflict: a session is never upserted), else an
// update filtered on _id, version and a guard that the document parses.

var _ lease.SessionDriver = (*mongoDriver)(nil)

// sessionCollectionSuffix names the session collection after the key
// collection: "leases" keeps its sessions in "leases_sessions".
const sessionCollectionSuffix = "_sessions"

// createIndexes makes, if missing, the index on the key documents'
// session field (RemoveSessions asks whether any key names a session)
// and the one on the session documents' expires field (it looks for
// expired sessions). Plain indexes: FerretDB v1 makes neither sparse nor
// partial ones.
func (d *mongoDriver) createIndexes(ctx context.Context) error {
	if err := ensureIndex(ctx, d.coll, "session"); err != nil {
		return err
	}
	return ensureIndex(ctx, d.sessions, "expires")
}

// ensureIndex creates the index {field: 1} on coll unless coll has one:
// listing the indexes needs only read access, so a deployment whose
// indexes were made beforehand needs no right to create them. One that
// another client creates meanwhile, under another name, is kept.
func ensureIndex(ctx context.Context, coll *mongo.Collection, field string) error {
	specs, err := coll.Indexes().ListSpecifications(ctx)
	if err != nil && !hasErrorCode(err, namespaceNotFound) {
		return fmt.Errorf("lease: mongodb list the indexes of %s: %w", coll.Name(), err)
	}
	for _, spec := range specs {
		if isAscendingIndexOn(spec.KeysDocument, field) {
			return nil
		}
	}
	_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: field, Value: 1}}})
	if err != nil && !hasErrorCode(err, indexOptionsConflict) {
		return fmt.Errorf("lease: mongodb create the index {%s: 1} on %s: %w", field, coll.Name(), err)
	}
	return nil
}

// isAscendingIndexOn reports whether keys, an index's key document, is
// {field: 1} (in any numeric type).
func isAscendingIndexOn(keys bson.Raw, field string) bool {
	elems, err := keys.Elements()
	if err != nil || len(elems) != 1 || elems[0].Key() != field {
		return false
	}
	n, ok := elems[0].Value().AsFloat64OK()
	return ok && n == 1
}

// Server error codes the driver tells apart.
const (
	namespaceNotFound    = 26 // listIndexes of a collection not made yet
	indexOptionsConflict = 85 // the index exists, under another name
)

// hasErrorCode reports whether err is a server error with code.
func hasErrorCode(err error, code int) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(code)
}

// GetSession reads session id's document from the primary: ErrNotFound
// when there is none, ErrCorrupt naming the session when it does not
// parse (R10).
func (d *mongoDriver) GetSession(ctx context.Context, id string) (rec lease.SessionRecord, version uint64, err error) {
	if err := d.usable(ctx); err != nil {
		return lease.SessionRecord{}, 0, err
	}
	err = d.withServerClock(ctx, func() (err error) {
		rec, version, err = d.getSession(ctx, id)
		return err
	})
	return rec, version, err
}

func (d *mongoDriver) getSession(ctx context.Context, id string) (lease.SessionRecord, uint64, error) {
	raw, err := d.sessions.FindOne(ctx, byID(id)).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return lease.SessionRecord{}, 0, lease.ErrNotFound
	}
	if err != nil {
		return lease.SessionRecord{}, 0, fmt.Errorf("lease: mongodb read session %q: %w", id, err)
	}
	return decodeMongoSession(raw)
}

// PutSession inserts (Absent) or updates the session's document filtered
// on _id, version and the guard (mongoSessionFilter). A duplicate _id or
// an update that matches nothing is ErrConflict; any other failure leaves
// the outcome unknown, as for Put (R9). A record that would read back as
// corrupt (lease.CheckSessionRecord) is refused, and nothing is written.
func (d *mongoDriver) PutSession(ctx context.Context, rec lease.SessionRecord, pre lease.Precondition) (version uint64, err error) {
	if err := d.usable(ctx); err != nil {
		return 0, err
	}
	if err := lease.CheckSessionRecord(rec); err != nil {
		return 0, err
	}
	err = d.withServerClock(ctx, func() (err error) {
		if pre.Absent {
			version, err = d.insertSession(ctx, rec)
		} else {
			version, err = d.updateSession(ctx, rec, pre.Version)
		}
		return err
	})
	return version, err
}

func (d *mongoDriver) insertSession(ctx context.Context, rec lease.SessionRecord) (uint64, error) {
	_, err := d.sessions.InsertOne(ctx, append(byID(rec.ID), mongoSessionFields(rec, 1)...))
	switch {
	case err == nil:
		return 1, nil
	case mongo.IsDuplicateKeyError(err):
		return 0, lease.ErrConflict
	}
	return 0, fmt.Errorf("lease: mongodb insert session %q: %w", rec.ID, err)
}

func (d *mongoDriver) updateSession(ctx context.Context, rec lease.SessionRecord, version uint64) (uint64, error) {
	if version == 0 { // versions start at 1: no document matches
		return 0, lease.ErrConflict
	}
	if version >= math.MaxInt64 {
		return 0, fmt.Errorf("lease: mongodb update session %q: version %d out of range", rec.ID, version)
	}
	next := version + 1
	res, err := d.sessions.UpdateOne(ctx, mongoSessionFilter(rec.ID, version),
		bson.D{{Key: "$set", Value: mongoSessionFields(rec, next)}})
	switch {
	case err != nil:
		return 0, fmt.Errorf("lease: mongodb update session %q: %w", rec.ID, err)
	case res.MatchedCount == 0:
		return 0, lease.ErrConflict
	}
	return next, nil
}

// mongoSessionFilter matches session id's document at version, and only
// if it parses: as for key documents (mongoUpdateFilter), a document
// corrupted behind its store's back is not overwritten; the conflict makes
// the store re-read it and fail with ErrCorrupt (R10).
func mongoSessionFilter(id string, version uint64) bson.D {
	return bson.D{
		{Key: "_id", Value: id},
		{Key: "version", Value: scalar(bson.E{Key: "$eq", Value: int64(version)}, bson.E{Key: "$type", Value: "long"})},
		{Key: "owner", Value: scalar(bson.E{Key: "$type", Value: "string"}, bson.E{Key: "$regex", Value: ownerPattern})},
		{Key: "expires", Value: scalar(bson.E{Key: "$type", Value: "date"})},
		{Key: "state", Value: scalar(bson.E{Key: "$type", Value: "int"},
			bson.E{Key: "$gte", Value: int32(lease.SessionLive)}, bson.E{Key: "$lte", Value: int32(lease.SessionEndedUnclean)})},
	}
}

// mongoSessionFields are a session document's fields other than _id.
func mongoSessionFields(rec lease.SessionRecord, version uint64) bson.D {
	return bson.D{
		{Key: "owner", Value: rec.Owner},
		{Key: "expires", Value: bson.NewDateTimeFromTime(rec.ExpiresAt)},
		{Key: "state", Value: int32(rec.State)},
		{Key: "version", Value: int64(version)},
	}
}

// decodeMongoSession parses a session document, refusing one with a
// missing or wrongly typed field, or one no store could have written
// (lease.CheckSessionRecord), with an error matching ErrCorrupt that
// names the session (R10).
func decodeMongoSession(raw bson.Raw) (lease.SessionRecord, uint64, error) {
	if err := raw.Validate(); err != nil {
		return lease.SessionRecord{}, 0, corrupt("mongodb session document is malformed BSON: %v", err)
	}
	field := func(name string) bson.RawValue {
		v, err := raw.LookupErr(name)
		if err != nil {
			return bson.RawValue{}
		}
		return v
	}
	var rec lease.SessionRecord
	id, ok := field("_id").StringValueOK()
	if !ok {
		return lease.SessionRecord{}, 0, corrupt("mongodb session document: _id is %s, want a string", mongoType(field("_id")))
	}
	rec.ID = id
	bad := func(name, want string) error {
		return corrupt("mongodb session %q: %s is %s, want %s", id, name, mongoType(field(name)), want)
	}
	if rec.Owner, ok = field("owner").StringValueOK(); !ok {
		return lease.SessionRecord{}, 0, bad("owner", "a string")
	}
	ms, ok := field("expires").DateTimeOK()
	if !ok {
		return lease.SessionRecord{}, 0, bad("expires", "a date")
	}
	rec.ExpiresAt = time.UnixMilli(ms).UTC()
	state, ok := field("state").Int32OK()
	if !ok || state < int32(lease.SessionLive) || state > int32(lease.SessionEndedUnclean) {
		return lease.SessionRecord{}, 0, bad("state", "a 32-bit integer from 1 to 3")
	}
	rec.State = lease.SessionState(state)
	version, ok := field("version").Int64OK()
	if !ok || version < 1 {
		return lease.SessionRecord{}, 0, bad("version", "a 64-bit integer from 1 up")
	}
	if err := lease.CheckSessionRecord(rec); err != nil {
		return lease.SessionRecord{}, 0, err
	}
	return rec, uint64(version), nil
}

// removePage is how many expired sessions RemoveSessions reads at a time.
const removePage = 100

// RemoveSessions deletes at most limit session documents whose expiry is
// before before and which no key document names (R22), oldest first.
// For each expired session it reads, it asks whether a key document names
// it (one indexed find), and if none does deletes it filtered on _id and
// the version it read, so that a session renewed or ended meanwhile
// stays. Without multi-document transactions (FerretDB v1 has none) the
// check and the delete are two steps: a key written between them naming
// a session already past before would be left naming a deleted session,
// which no store does, as a store attaches keys only to its own live
// session, before its expiry. A document that does not parse is left as
// it is, for GetSession to report. On an error it returns how many it
// had deleted.
func (d *mongoDriver) RemoveSessions(ctx context.Context, before time.Time, limit int) (removed int, err error) {
	if err := d.usable(ctx); err != nil {
		return 0, err
	}
	if limit <= 0 {
		return 0, nil
	}
	err = d.withServerClock(ctx, func() (err error) {
		removed, err = d.removeSessions(ctx, before, limit)
		return err
	})
	return removed, err
}

func (d *mongoDriver) removeSessions(ctx context.Context, before time.Time, limit int) (int, error) {
	removed := 0
	var last *lease.SessionRecord // the last one read: the next page starts after it
	for removed < limit {
		page, err := d.expiredSessions(ctx, before, last)
		if err != nil {
			return removed, err
		}
		for _, s := range page {
			ok, err := d.removeSession(ctx, s.rec, s.version)
			if err != nil {
				return removed, err
			}
			if ok {
				removed++
			}
			if removed == limit {
				break
			}
		}
		if len(page) < removePage {
			break
		}
		last = &page[len(page)-1].rec
	}
	return removed, nil
}

// expiredSession is a session document RemoveSessions read.
type expiredSession struct {
	rec     lease.SessionRecord
	version uint64
}

// expiredSessions reads up to removePage session documents expired before
// before, in order of expiry then id, after last (nil: from the first).
// The page holds only the documents that parse, but the next one starts
// after the last it read.
func (d *mongoDriver) expiredSessions(ctx context.Context, before time.Time, last *lease.SessionRecord) ([]expiredSession, error) {
	filter := bson.D{{Key: "expires", Value: bson.D{{Key: "$lt", Value: millisAbove(before)}}}}
	if last != nil {
		exp := bson.NewDateTimeFromTime(last.ExpiresAt)
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "expires", Value: bson.D{{Key: "$gt", Value: exp}}}},
			bson.D{{Key: "expires", Value: exp}, {Key: "_id", Value: bson.D{{Key: "$gt", Value: last.ID}}}},
		}})
	}
	opts := options.Find().SetSort(bson.D{{Key: "expires", Value: 1}, {Key: "_id", Value: 1}}).
		SetLimit(removePage).SetBatchSize(removePage + 1) // one past the limit: no getMore
	cur, err := d.sessions.Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("lease: mongodb read expired sessions: %w", err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	var page []expiredSession
	for cur.Next(ctx) {
		rec, v, err := decodeMongoSession(cur.Current)
		if err != nil {
			continue // left for GetSession to report (R10)
		}
		page = append(page, expiredSession{rec: rec, version: v})
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("lease: mongodb read expired sessions: %w", err)
	}
	return page, nil
}

// millisAbove is the BSON date that bounds the dates before t: a date in
// whole milliseconds is before t exactly when it is before t rounded up
// to a millisecond.
func millisAbove(t time.Time) bson.DateTime {
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return bson.DateTime(ms)
}

// removeSession deletes session rec at version unless a key document
// names it, and reports whether it did.
func (d *mongoDriver) removeSession(ctx context.Context, rec lease.SessionRecord, version uint64) (bool, error) {
	err := d.coll.FindOne(ctx, bson.D{{Key: "session", Value: rec.ID}},
		options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
	switch {
	case err == nil:
		return false, nil // a key names it
	case !errors.Is(err, mongo.ErrNoDocuments):
		return false, fmt.Errorf("lease: mongodb read the keys naming session %q: %w", rec.ID, err)
	}
	res, err := d.sessions.DeleteOne(ctx, mongoSessionFilter(rec.ID, version))
	if err != nil {
		return false, fmt.Errorf("lease: mongodb delete session %q, outcome unknown: %w", rec.ID, err)
	}
	return res.DeletedCount == 1, nil
}
