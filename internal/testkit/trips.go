package testkit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leasekit/lease"
)

// TripCounter counts the storage round trips of the store above it,
// batched or not. It passes PutMany and GetMany on when its Driver has
// them, and otherwise does each write or read alone, counting one round
// trip for each. It also counts the batched reads (GetMany calls: one per
// round of Hold's waiting loop), the reads of session records (GetSession
// calls: one per round that meets keys naming a session), the distinct
// keys read (every waiting Hold's key once it has looked), and, when Chunk
// is set, what the same calls cost a server that takes at most Chunk keys
// or writes a command.
type TripCounter struct {
	lease.Driver
	Chunk int // keys or writes a server takes in one command; 0: not counted

	mu          sync.Mutex // guards the fields below
	counts      Trips
	read        map[string]struct{} // keys read since the last Take
	inFlight    int
	paused      chan struct{} // non-nil while paused: closed by Resume
	busySince   time.Time     // when inFlight last went from 0 to 1
	first, last time.Time     // the start of the first call and the end of the last since the last Take
}

var (
	_ lease.BatchDriver   = (*TripCounter)(nil)
	_ lease.BatchReader   = (*TripCounter)(nil)
	_ lease.SessionDriver = (*TripCounter)(nil)
	_ lease.DriverInfo    = (*TripCounter)(nil)
)

// Trips are a TripCounter's counts since its last Take.
type Trips struct {
	Trips     int           // storage round trips
	Reads     int           // GetMany calls
	SessReads int           // GetSession calls
	Writes    int           // records written, by Put, PutMany or PutSession
	Session   int           // of which session records, by PutSession
	Kills     int           // of which a session ended unclean: a taker's kill (R21)
	Chunked   int           // round trips of a server taking Chunk keys a command (0 when Chunk is 0)
	Held      int           // calls that waited for a Resume before they started
	Span      time.Duration // from the start of the first call to the end of the last
	Busy      time.Duration // of which some call was in flight (Span less the gaps between calls)
}

// Plus adds u to t.
func (t Trips) Plus(u Trips) Trips {
	return Trips{t.Trips + u.Trips, t.Reads + u.Reads, t.SessReads + u.SessReads, t.Writes + u.Writes, t.Session + u.Session,
		t.Kills + u.Kills, t.Chunked + u.Chunked, t.Held + u.Held, t.Span + u.Span, t.Busy + u.Busy}
}

// start counts one call of items keys or writes, trips round trips,
// once the counter is not paused.
func (c *TripCounter) start(trips, items int, keys ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused != nil {
		for p := c.paused; p != nil; p = c.paused {
			c.mu.Unlock()
			<-p
			c.mu.Lock()
		}
		c.counts.Held++
	}
	c.counts.Trips += trips
	if c.Chunk > 0 {
		c.counts.Chunked += max(1, (items+c.Chunk-1)/c.Chunk) * trips
	}
	if c.read == nil {
		c.read = map[string]struct{}{}
	}
	for _, k := range keys {
		if lease.ValidateKey(k) == nil { // a key, not a waiter's place (R25)
			c.read[k] = struct{}{}
		}
	}
	now := time.Now()
	if c.first.IsZero() {
		c.first = now
	}
	if c.inFlight == 0 {
		c.busySince = now
	}
	c.inFlight++
}

func (c *TripCounter) done() {
	c.mu.Lock()
	c.inFlight--
	c.last = time.Now()
	if c.inFlight == 0 {
		c.counts.Busy += c.last.Sub(c.busySince)
	}
	c.mu.Unlock()
}

// Pause holds every call that starts from now on until Resume, whatever
// its context; a call in flight goes on. Calls held are counted
// (Trips.Held) when they start.
func (c *TripCounter) Pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused == nil {
		c.paused = make(chan struct{})
	}
}

// Resume lets the calls that Pause held start.
func (c *TripCounter) Resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused != nil {
		close(c.paused)
		c.paused = nil
	}
}

// wrote counts n records written.
func (c *TripCounter) wrote(n int) {
	c.mu.Lock()
	c.counts.Writes += n
	c.mu.Unlock()
}

// Take returns the counts since the last Take, and starts them afresh
// (the keys read too). A call in flight at a Take counts its busy time
// after the Take.
func (c *TripCounter) Take() Trips {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.peekLocked()
	c.counts, c.read, c.first, c.last = Trips{}, nil, time.Time{}, time.Time{}
	if c.inFlight > 0 {
		c.busySince = time.Now()
	}
	return n
}

// Peek returns the counts since the last Take, without a Take.
func (c *TripCounter) Peek() Trips {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peekLocked()
}

func (c *TripCounter) peekLocked() Trips {
	n := c.counts
	if c.last.After(c.first) {
		n.Span = c.last.Sub(c.first)
	}
	return n
}

// KeysRead is how many distinct keys were read since the last Take.
func (c *TripCounter) KeysRead() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.read)
}

// Idle reports whether no call is in flight.
func (c *TripCounter) Idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight == 0
}

// Get counts one round trip and forwards.
func (c *TripCounter) Get(ctx context.Context, key string) (lease.Record, uint64, error) {
	c.start(1, 1, key)
	defer c.done()
	return c.Driver.Get(ctx, key)
}

// Put counts one round trip and forwards.
func (c *TripCounter) Put(ctx context.Context, rec lease.Record, pre lease.Precondition) (uint64, error) {
	c.start(1, 1)
	defer c.done()
	c.wrote(1)
	return c.Driver.Put(ctx, rec, pre)
}

// PutMany counts one round trip when the driver batches, else one a write.
func (c *TripCounter) PutMany(ctx context.Context, ws []lease.Write) ([]lease.PutResult, error) {
	if bd, ok := c.Driver.(lease.BatchDriver); ok {
		c.start(1, len(ws))
		defer c.done()
		c.wrote(len(ws))
		return bd.PutMany(ctx, ws)
	}
	out := make([]lease.PutResult, len(ws))
	for i, w := range ws {
		out[i].Version, out[i].Err = c.Put(ctx, w.Rec, w.Pre)
	}
	return out, nil
}

// GetMany counts one batched read, and one round trip when the driver
// batches, else one a key.
func (c *TripCounter) GetMany(ctx context.Context, keys []string) ([]lease.GetResult, error) {
	c.mu.Lock()
	c.counts.Reads++
	c.mu.Unlock()
	if br, ok := c.Driver.(lease.BatchReader); ok {
		c.start(1, len(keys), keys...)
		defer c.done()
		return br.GetMany(ctx, keys)
	}
	out := make([]lease.GetResult, len(keys))
	for i, key := range keys {
		out[i].Rec, out[i].Version, out[i].Err = c.Get(ctx, key)
	}
	return out, nil
}

// Capabilities states what the wrapped driver states, and Sessions only
// when the wrapped driver keeps them.
func (c *TripCounter) Capabilities() lease.Capabilities {
	caps := lease.DriverCapabilities(c.Driver)
	if _, ok := c.Driver.(lease.SessionDriver); !ok {
		caps.Sessions = false
	}
	return caps
}

// errNoSessions answers a session call when the wrapped driver keeps none.
func (c *TripCounter) errNoSessions() error {
	return fmt.Errorf("%w: the %s driver keeps no sessions", lease.ErrCorrupt, c.Driver.Name())
}

// GetSession counts one round trip and one session read, and forwards.
func (c *TripCounter) GetSession(ctx context.Context, id string) (lease.SessionRecord, uint64, error) {
	sd, ok := c.Driver.(lease.SessionDriver)
	if !ok {
		return lease.SessionRecord{}, 0, c.errNoSessions()
	}
	c.mu.Lock()
	c.counts.SessReads++
	c.mu.Unlock()
	c.start(1, 1)
	defer c.done()
	return sd.GetSession(ctx, id)
}

// PutSession counts one round trip and one session record written (a
// kill when it ends the session unclean), and forwards.
func (c *TripCounter) PutSession(ctx context.Context, rec lease.SessionRecord, pre lease.Precondition) (uint64, error) {
	sd, ok := c.Driver.(lease.SessionDriver)
	if !ok {
		return 0, c.errNoSessions()
	}
	c.start(1, 1)
	defer c.done()
	c.mu.Lock()
	c.counts.Writes++
	c.counts.Session++
	if rec.State == lease.SessionEndedUnclean {
		c.counts.Kills++
	}
	c.mu.Unlock()
	return sd.PutSession(ctx, rec, pre)
}

// RemoveSessions counts one round trip and forwards.
func (c *TripCounter) RemoveSessions(ctx context.Context, before time.Time, limit int) (int, error) {
	sd, ok := c.Driver.(lease.SessionDriver)
	if !ok {
		return 0, c.errNoSessions()
	}
	c.start(1, limit)
	defer c.done()
	return sd.RemoveSessions(ctx, before, limit)
}
