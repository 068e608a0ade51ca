// Package pgproxy is a PostgreSQL wire-protocol proxy for tests: it cuts
// connections around chosen statements (R9) and partitions.
package pgproxy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
)

// Proxy is a loopback TCP proxy between PostgreSQL clients and a server
// that understands enough of the protocol to break it on purpose: it
// remembers the SQL of every prepared statement (Parse), and when a
// client runs one whose text contains a given string (Bind or a simple
// Query) it can cut the connection before forwarding it, or forward it
// and cut the connection when the server says the command is done
// (ReadyForQuery: the transaction has committed), so that the client
// never learns that its write landed (R9). Partition cuts every
// connection and refuses new ones, as a network partition would.
//
// Package mongoproxy speaks another framing (OP_MSG) and
// serialises requests; this one relays each connection on its own.
type Proxy struct {
	ln      net.Listener
	backend string

	mu          sync.Mutex // guards the fields below
	faults      []pgFault
	conns       map[net.Conn]struct{}
	closed      bool
	partitioned bool

	wg sync.WaitGroup
}

type pgFault struct {
	match     string // a substring of the statement's SQL
	dropReply bool   // forward, then cut at ReadyForQuery; false: cut before forwarding
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
	p := &Proxy{ln: ln, backend: backend, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's "host:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// DropReply makes the proxy forward the next statement whose SQL contains
// match, then cut its connection once the server has finished it, instead
// of passing the reply on. The channel is closed when that happened.
func (p *Proxy) DropReply(match string) <-chan struct{} {
	return p.addFault(pgFault{match: match, dropReply: true})
}

// Cut makes the proxy cut the connection of the next statement whose SQL
// contains match, without forwarding it.
func (p *Proxy) Cut(match string) <-chan struct{} {
	return p.addFault(pgFault{match: match})
}

func (p *Proxy) addFault(f pgFault) <-chan struct{} {
	f.hit = make(chan struct{})
	p.mu.Lock()
	p.faults = append(p.faults, f)
	p.mu.Unlock()
	return f.hit
}

func (p *Proxy) takeFault(sql string) (pgFault, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, f := range p.faults {
		if strings.Contains(sql, f.match) {
			p.faults = append(p.faults[:i], p.faults[i+1:]...)
			return f, true
		}
	}
	return pgFault{}, false
}

// Partition cuts every connection and refuses new ones from then on.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partitioned = true
	for c := range p.conns {
		c.Close()
	}
}

// Close stops accepting, cuts every connection and waits for the proxy's
// goroutines.
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
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track registers c so that Close and Partition can cut it; false when
// the proxy is closed or partitioned.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.partitioned {
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

// pgProxyConn is one relayed connection.
type pgProxyConn struct {
	client, server net.Conn
	stmts          map[string]string // prepared statement name → SQL

	mu      sync.Mutex
	pending *pgFault // a forwarded statement whose reply is to be dropped
}

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
	c := &pgProxyConn{client: client, server: server, stmts: map[string]string{}}
	if !c.startup() {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.relayReplies()
	}()
	c.relayRequests(p)
	client.Close()
	server.Close()
	<-done
}

// Protocol codes of the untyped messages a client may send first.
const (
	pgSSLRequest    = 80877103
	pgGSSENCRequest = 80877104
)

// startup relays the untyped messages that open a connection: SSL or
// GSS encryption requests (answered with one byte), then the startup
// message itself.
func (c *pgProxyConn) startup() bool {
	for {
		msg, err := readPgUntyped(c.client)
		if err != nil {
			return false
		}
		if _, err := c.server.Write(msg); err != nil {
			return false
		}
		code := binary.BigEndian.Uint32(msg[4:8])
		if code != pgSSLRequest && code != pgGSSENCRequest {
			return true
		}
		var answer [1]byte
		if _, err := io.ReadFull(c.server, answer[:]); err != nil {
			return false
		}
		if _, err := c.client.Write(answer[:]); err != nil || answer[0] != 'N' {
			return false // the tests use sslmode=disable; an encrypted stream is not parsed
		}
	}
}

// relayRequests forwards the client's messages, applying faults.
func (c *pgProxyConn) relayRequests(p *Proxy) {
	for {
		msg, err := readPgTyped(c.client)
		if err != nil {
			return
		}
		if sql, ok := c.statementOf(msg); ok {
			if f, faulty := p.takeFault(sql); faulty {
				if !f.dropReply {
					close(f.hit)
					return
				}
				c.mu.Lock()
				c.pending = &f
				c.mu.Unlock()
			}
		}
		if _, err := c.server.Write(msg); err != nil {
			return
		}
	}
}

// statementOf returns the SQL a Bind or Query message runs, and records
// the SQL of a Parse.
func (c *pgProxyConn) statementOf(msg []byte) (string, bool) {
	body := msg[5:]
	switch msg[0] {
	case 'P': // Parse: statement name, query, ...
		name, rest, _ := bytes.Cut(body, []byte{0})
		query, _, _ := bytes.Cut(rest, []byte{0})
		c.stmts[string(name)] = string(query)
	case 'B': // Bind: portal name, statement name, ...
		_, rest, _ := bytes.Cut(body, []byte{0})
		name, _, _ := bytes.Cut(rest, []byte{0})
		return c.stmts[string(name)], true
	case 'Q': // simple Query
		query, _, _ := bytes.Cut(body, []byte{0})
		return string(query), true
	}
	return "", false
}

// relayReplies forwards the server's messages; once a statement whose
// reply is to be dropped has finished (ReadyForQuery), it cuts both ends.
func (c *pgProxyConn) relayReplies() {
	for {
		msg, err := readPgTyped(c.server)
		if err != nil {
			c.client.Close()
			return
		}
		if msg[0] == 'Z' {
			c.mu.Lock()
			f := c.pending
			c.mu.Unlock()
			if f != nil {
				close(f.hit) // before the client can see the cut
				c.client.Close()
				c.server.Close()
				return
			}
		}
		if _, err := c.client.Write(msg); err != nil {
			return
		}
	}
}

// readPgUntyped reads a length-prefixed message without a type byte.
func readPgUntyped(r io.Reader) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(head[:]))
	if n < 8 || n > 1<<20 {
		return nil, fmt.Errorf("proxy: startup message length %d", n)
	}
	msg := make([]byte, n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[4:])
	return msg, err
}

// readPgTyped reads one message: a type byte, then a length that counts
// itself, then the rest.
func readPgTyped(r io.Reader) ([]byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(head[1:]))
	if n < 4 || n > 1<<30 {
		return nil, fmt.Errorf("proxy: message %q length %d", head[0], n)
	}
	msg := make([]byte, 1+n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[5:])
	return msg, err
}
