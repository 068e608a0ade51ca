// Package mongoproxy is a MongoDB wire-protocol proxy for tests: it
// serialises requests (for FerretDB) and injects faults.
package mongoproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Proxy is a loopback TCP proxy between MongoDB clients and a server.
//
// It forwards one request at a time across all its connections and waits
// for the server's reply before it forwards the next. FerretDB v1 applies
// updateOne({_id, version: v}) as a read followed by a write, so two
// concurrent conditional updates can both succeed; serialising requests
// gives it, at the granularity the lease driver relies on (one request),
// the single-document atomicity that MongoDB has.
//
// It also injects faults into the next request that names a given command:
// forward it and drop the reply (the write lands, the client sees a cut
// connection), or cut the connection without forwarding it.
//
// Clients must use serverMonitoringMode=poll: a streaming hello would hold
// the proxy's turn while the server waits for a topology change.
type Proxy struct {
	ln      net.Listener
	backend string

	turn sync.Mutex // one request and its reply at a time, across connections

	mu     sync.Mutex // guards the fields below
	faults []proxyFault
	conns  map[net.Conn]struct{}
	closed bool
	seen   map[string]int // requests forwarded, by command name

	wg sync.WaitGroup // one per connection goroutine
}

type proxyFault struct {
	command   string // e.g. "insert", "update", "find"
	dropReply bool   // true: forward, then cut instead of replying; false: cut before forwarding
	hit       chan struct{}
}

// T is what the proxy needs of a test; *testing.T, *testing.B and
// *rapid.T (with a Cleanup) have it.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// New starts a proxy to backend ("host:port") and stops it when
// the test ends.
func New(t T, backend string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, backend: backend, conns: map[net.Conn]struct{}{}, seen: map[string]int{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's "host:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DropReply makes the proxy forward the next request for command, then cut
// its connection instead of passing the reply on. The returned channel is
// closed once that happened.
func (p *Proxy) DropReply(command string) <-chan struct{} {
	return p.addFault(proxyFault{command: command, dropReply: true})
}

// Cut makes the proxy cut the connection of the next request for command
// without forwarding it.
func (p *Proxy) Cut(command string) <-chan struct{} {
	return p.addFault(proxyFault{command: command})
}

func (p *Proxy) addFault(f proxyFault) <-chan struct{} {
	f.hit = make(chan struct{})
	p.mu.Lock()
	p.faults = append(p.faults, f)
	p.mu.Unlock()
	return f.hit
}

// Relays is how many client connections the proxy relays now: one
// goroutine each (each is tracked with its server connection).
func (p *Proxy) Relays() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// Seen returns how many requests for command the proxy has forwarded.
func (p *Proxy) Seen(command string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[command]
}

// Close stops accepting, cuts every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track registers c so that Close can cut it; false once closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// serve relays one client connection over its own server connection.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	server, err := net.Dial("tcp", p.backend)
	if err != nil {
		return
	}
	if !p.track(server) {
		server.Close()
		return
	}
	defer p.untrack(server)
	for {
		req, err := readWireMessage(client)
		if err != nil {
			return
		}
		if !p.relay(client, server, req) {
			return
		}
	}
}

// relay forwards one request and its reply; false ends the connection.
func (p *Proxy) relay(client, server net.Conn, req []byte) bool {
	cmd := wireCommand(req)
	fault, faulty := p.takeFault(cmd)
	if faulty && !fault.dropReply {
		close(fault.hit)
		return false
	}
	p.turn.Lock()
	reply, err := p.roundTrip(server, req, cmd)
	p.turn.Unlock()
	if err != nil {
		return false
	}
	if faulty {
		close(fault.hit)
		return false
	}
	_, err = client.Write(reply)
	return err == nil
}

func (p *Proxy) roundTrip(server net.Conn, req []byte, cmd string) ([]byte, error) {
	if _, err := server.Write(req); err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.seen[cmd]++
	p.mu.Unlock()
	if moreToCome(req) {
		return nil, errors.New("proxy: requests that expect no reply are not supported")
	}
	return readWireMessage(server)
}

func (p *Proxy) takeFault(cmd string) (proxyFault, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, f := range p.faults {
		if f.command == cmd {
			p.faults = append(p.faults[:i], p.faults[i+1:]...)
			return f, true
		}
	}
	return proxyFault{}, false
}

// readWireMessage reads one whole message: a little-endian int32 length
// that counts itself, then the rest.
func readWireMessage(r io.Reader) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(head[:]))
	if n < 16 || n > 64<<20 {
		return nil, fmt.Errorf("proxy: message length %d", n)
	}
	msg := make([]byte, n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[4:])
	return msg, err
}

const opMsg = 2013

// wireCommand names an OP_MSG request's command: the first key of its
// body section ("insert", "update", "find", "hello", ...).
func wireCommand(msg []byte) string {
	if len(msg) < 21 || binary.LittleEndian.Uint32(msg[12:16]) != opMsg || msg[20] != 0 {
		return ""
	}
	doc := bson.Raw(msg[21:])
	if len(doc) < 4 || int(binary.LittleEndian.Uint32(doc)) > len(doc) {
		return ""
	}
	doc = doc[:binary.LittleEndian.Uint32(doc)]
	elems, err := doc.Elements()
	if err != nil || len(elems) == 0 {
		return ""
	}
	return elems[0].Key()
}

// moreToCome reports an OP_MSG whose sender expects no reply.
func moreToCome(msg []byte) bool {
	return len(msg) >= 20 && binary.LittleEndian.Uint32(msg[12:16]) == opMsg &&
		binary.LittleEndian.Uint32(msg[16:20])&2 != 0
}
