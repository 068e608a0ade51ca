// Package mongoserver gives the tests a MongoDB server: MONGODB_URI when it
// is set, else FerretDB v1.24.2 (sqlite handler) built from the launcher
// module in testdata/ferretdb and started in a temporary directory; it
// exits when the test process does.
package mongoserver

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/mongoproxy"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"
)

// The MongoDB tests run against MONGODB_URI when it is set (a real MongoDB;
// a replica set if you have one). Otherwise they build and start FerretDB
// v1.24.2 with its sqlite handler in a temporary directory, from the
// launcher module in testdata/ferretdb, and it exits when this process does.
//
// FerretDB is a stand-in that speaks the wire protocol. It does not apply a
// conditional update atomically, so every client of it goes through a
// serialising proxy (package mongoproxy) and the driver is given
// mongodb.AllowUnsafeServer. What the tests prove therefore holds for a server
// with the guarantees the driver relies on: single-document atomicity of a
// conditional update, a unique _id, durable majority writes.

// HowTo says how to give the tests a server; a test that has none fails
// with it.
const HowTo = "set MONGODB_URI to a MongoDB server (e.g. mongodb://127.0.0.1:27017/?replicaSet=rs0), " +
	"or let the tests build internal/mongoserver/testdata/ferretdb: that needs the go command and the Go module proxy " +
	"(or a module cache holding github.com/FerretDB/FerretDB v1.24.2)"

// Server is the server every MongoDB test uses.
type Server struct {
	URI      string // for clients that talk to the server directly
	Addr     string // host:port for a mongoproxy.Proxy
	Ferret   bool   // FerretDB: clients must go through a serialising proxy (and the driver needs AllowUnsafeServer)
	External bool   // from MONGODB_URI
}

var (
	mongoOnce   sync.Once
	mongoShared Server
	mongoErr    error
	mongoProxy  *mongoproxy.Proxy // the serialising proxy shared by tests that inject no faults
)

// T is what the server helpers need of a test; *rapid.T has it too.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Shared returns the server, starting it on first use. A test that
// cannot get one fails and says how to provide one.
func Shared(t T) Server {
	t.Helper()
	mongoOnce.Do(func() { mongoShared, mongoErr = startMongo() })
	if mongoErr != nil {
		t.Fatalf("no MongoDB server for the tests: %v\n%s", mongoErr, HowTo)
	}
	return mongoShared
}

func startMongo() (Server, error) {
	if uri := os.Getenv("MONGODB_URI"); uri != "" {
		cs, err := connstring.ParseAndValidate(uri)
		if err != nil {
			return Server{}, fmt.Errorf("MONGODB_URI: %w", err)
		}
		s := Server{URI: uri, Addr: cs.Hosts[0], External: true}
		err = probeMongo(&s)
		return s, err
	}
	bin, err := ferretBinary()
	if err != nil {
		return Server{}, err
	}
	addr, err := runFerretDB(bin)
	if err != nil {
		return Server{}, err
	}
	return Server{URI: "mongodb://" + addr + "/?serverMonitoringMode=poll", Addr: addr, Ferret: true}, nil
}

// probeMongo finds whether the server is FerretDB, and the primary's
// address for the proxies of the fault-injection tests.
func probeMongo(s *Server) error {
	c, err := mongo.Connect(options.Client().ApplyURI(s.URI))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer c.Disconnect(ctx)
	var hello struct {
		Primary string `bson:"primary"`
	}
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return err
	}
	if hello.Primary != "" {
		s.Addr = hello.Primary
	}
	s.Ferret, err = isFerretDB(ctx, c)
	return err
}

// isFerretDB: FerretDB names itself in buildInfo (the driver package's
// own check, which refuses it, is the one under test; this is the
// harness's).
func isFerretDB(ctx context.Context, c *mongo.Client) (bool, error) {
	var info bson.M
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		return false, err
	}
	for k := range info {
		if strings.Contains(strings.ToLower(k), "ferretdb") {
			return true, nil
		}
	}
	return false, nil
}

// ferretBinary builds the launcher, or finds it built already in the user
// cache under the hash of its sources and the Go version.
func ferretBinary() (string, error) {
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot find the launcher's sources: no caller information")
	}
	src := filepath.Join(filepath.Dir(here), "testdata", "ferretdb")
	h := sha256.New()
	fmt.Fprintln(h, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, name := range []string{"go.mod", "go.sum", "main.go"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "leasekit-lease-test")
	bin := filepath.Join(dir, "ferretdb-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = "go"
	}
	cmd := exec.Command(goCmd, "build", "-o", tmp, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0")
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("building the FerretDB launcher in %s: %v\n%s", src, err, out)
	}
	fmt.Fprintf(os.Stderr, "built the FerretDB launcher in %v (cached at %s)\n", time.Since(start).Round(time.Second), bin)
	return bin, os.Rename(tmp, bin) // atomic: a concurrent build just replaces it
}

// runFerretDB starts the launcher and returns its address. It runs until
// this process exits: its stdin is a pipe that only this process holds.
func runFerretDB(bin string) (string, error) {
	dir, err := os.MkdirTemp("", "lease-ferretdb-")
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin, "-dir", dir, "-cleanup")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	var stderr strings.Builder
	cmd.Stderr = &lockedWriter{w: &stderr}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	ferretStdins = append(ferretStdins, stdin) // kept open (and referenced) for the life of the process
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		cmd.Wait()
		return "", fmt.Errorf("FerretDB did not start: %s", stderr.String())
	}
	addr, ok := strings.CutPrefix(lines.Text(), "listening on ")
	if !ok {
		return "", fmt.Errorf("FerretDB said %q", lines.Text())
	}
	go io.Copy(io.Discard, stdout)
	go cmd.Wait()
	return addr, nil
}

// ferretStdins keeps the launchers' stdin pipes referenced, so that no
// finalizer closes them: a launcher exits when its pipe closes.
var ferretStdins []io.WriteCloser

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// URIVia returns a URI for the server through a proxy at addr: a
// direct connection (the proxy hides the other members), polling monitors
// (see mongoproxy.Proxy), and the rest of MONGODB_URI (credentials, options).
func URIVia(s Server, addr string) string {
	if !s.External {
		return "mongodb://" + addr + "/?serverMonitoringMode=poll"
	}
	_, rest, _ := strings.Cut(s.URI, "://")
	end := strings.IndexAny(rest+"/", "/?")
	userinfo := rest[:strings.LastIndexByte(rest[:end], '@')+1]
	u := "mongodb://" + userinfo + addr + rest[end:]
	sep := "?"
	switch {
	case strings.Contains(u, "?"):
		sep = "&"
	case !strings.Contains(u[len("mongodb://"):], "/"):
		sep = "/?"
	}
	return u + sep + "directConnection=true&serverMonitoringMode=poll"
}

// Client connects a new client, through a fresh proxy when
// proxy is non-nil, else through the shared serialising proxy (FerretDB)
// or directly (MONGODB_URI). It disconnects when the test ends.
func Client(t testing.TB, proxy *mongoproxy.Proxy) *mongo.Client {
	t.Helper()
	s := Shared(t)
	uri := s.URI
	switch {
	case proxy != nil:
		uri = URIVia(s, proxy.Addr())
	case s.Ferret:
		uri = URIVia(s, SharedProxy(t, s).Addr())
	}
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetAppName("lease-test"))
	if err != nil {
		t.Fatalf("mongo connect %s: %v\n%s", uri, err, HowTo)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Disconnect(ctx)
	})
	return c
}

var (
	sharedClientOnce sync.Once
	sharedClient     *mongo.Client
)

// SharedClient is one client for the tests that need no client of their
// own (through the shared serialising proxy on FerretDB); it lives as long
// as the test binary.
func SharedClient(t T) *mongo.Client {
	t.Helper()
	srv := Shared(t)
	sharedClientOnce.Do(func() {
		uri := srv.URI
		if srv.Ferret {
			uri = URIVia(srv, SharedProxy(t, srv).Addr())
		}
		var err error
		if sharedClient, err = mongo.Connect(options.Client().ApplyURI(uri)); err != nil {
			t.Fatalf("mongo connect %s: %v\n%s", uri, err, HowTo)
		}
	})
	return sharedClient
}

var sharedProxyOnce sync.Once

// SharedProxy is one serialising proxy for the whole test binary.
func SharedProxy(t T, s Server) *mongoproxy.Proxy {
	sharedProxyOnce.Do(func() {
		mongoProxy = mongoproxy.New(noCleanup{t}, s.Addr)
	})
	return mongoProxy
}

// noCleanup keeps the shared proxy alive past the test that started it.
type noCleanup struct{ T }

func (noCleanup) Cleanup(func()) {}

var collSeq atomic.Int64

// Collection returns a fresh collection for one test, dropped at the
// end on an external server with the driver's session collection
// (its name plus "_sessions").
func Collection(t testing.TB, c *mongo.Client) *mongo.Collection {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), collSeq.Add(1))
	coll := c.Database("lease_test").Collection(name)
	if Shared(t).External {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			coll.Drop(ctx)
			c.Database("lease_test").Collection(name + "_sessions").Drop(ctx)
		})
	}
	return coll
}
