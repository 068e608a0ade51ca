package lease

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
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
// wireProxy that serialises requests (see mongoproxy_test.go) and uses
// AllowUnsafeServer. What the tests prove therefore holds for a server
// with the guarantees the driver relies on: single-document atomicity of a
// conditional update, a unique _id, durable majority writes.

const mongoHowTo = "set MONGODB_URI to a MongoDB server (e.g. mongodb://127.0.0.1:27017/?replicaSet=rs0), " +
	"or let the tests build testdata/ferretdb: that needs the go command and the Go module proxy " +
	"(or a module cache holding github.com/FerretDB/FerretDB v1.24.2)"

// mongoServer is the server every MongoDB test uses.
type mongoServer struct {
	uri      string // for clients that talk to the server directly
	addr     string // host:port for a wireProxy
	ferret   bool   // FerretDB: clients must go through a serialising proxy
	external bool   // from MONGODB_URI
}

var (
	mongoOnce   sync.Once
	mongoShared mongoServer
	mongoErr    error
	mongoProxy  *wireProxy // the serialising proxy shared by tests that inject no faults
)

// fatalT is what the server helpers need of a test; *rapid.T has it too.
type fatalT interface {
	Helper()
	Fatalf(format string, args ...any)
}

// testMongo returns the server, starting it on first use. A test that
// cannot get one fails and says how to provide one.
func testMongo(t fatalT) mongoServer {
	t.Helper()
	mongoOnce.Do(func() { mongoShared, mongoErr = startMongo() })
	if mongoErr != nil {
		t.Fatalf("no MongoDB server for the tests: %v\n%s", mongoErr, mongoHowTo)
	}
	return mongoShared
}

func startMongo() (mongoServer, error) {
	if uri := os.Getenv("MONGODB_URI"); uri != "" {
		cs, err := connstring.ParseAndValidate(uri)
		if err != nil {
			return mongoServer{}, fmt.Errorf("MONGODB_URI: %w", err)
		}
		s := mongoServer{uri: uri, addr: cs.Hosts[0], external: true}
		err = probeMongo(&s)
		return s, err
	}
	bin, err := ferretBinary()
	if err != nil {
		return mongoServer{}, err
	}
	addr, err := runFerretDB(bin)
	if err != nil {
		return mongoServer{}, err
	}
	return mongoServer{uri: "mongodb://" + addr + "/?serverMonitoringMode=poll", addr: addr, ferret: true}, nil
}

// probeMongo finds whether the server is FerretDB, and the primary's
// address for the proxies of the fault-injection tests.
func probeMongo(s *mongoServer) error {
	c, err := mongo.Connect(options.Client().ApplyURI(s.uri))
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
		s.addr = hello.Primary
	}
	err = checkMongoServer(ctx, c.Database("admin"), false)
	if err != nil && strings.Contains(err.Error(), "FerretDB") {
		s.ferret, err = true, nil
	}
	return err
}

// ferretBinary builds the launcher, or finds it built already in the user
// cache under the hash of its sources and the Go version.
func ferretBinary() (string, error) {
	src, err := filepath.Abs(filepath.Join("testdata", "ferretdb"))
	if err != nil {
		return "", err
	}
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
	ferretStdin = stdin // kept open (and referenced) for the life of the process
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

var ferretStdin io.WriteCloser

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// mongoURIVia returns a URI for the server through a proxy at addr: a
// direct connection (the proxy hides the other members), polling monitors
// (see wireProxy), and the rest of MONGODB_URI (credentials, options).
func mongoURIVia(s mongoServer, addr string) string {
	if !s.external {
		return "mongodb://" + addr + "/?serverMonitoringMode=poll"
	}
	_, rest, _ := strings.Cut(s.uri, "://")
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

// testMongoClient connects a new client, through a fresh proxy when
// proxy is non-nil, else through the shared serialising proxy (FerretDB)
// or directly (MONGODB_URI). It disconnects when the test ends.
func testMongoClient(t testing.TB, proxy *wireProxy) *mongo.Client {
	t.Helper()
	s := testMongo(t)
	uri := s.uri
	switch {
	case proxy != nil:
		uri = mongoURIVia(s, proxy.Addr())
	case s.ferret:
		uri = mongoURIVia(s, sharedProxy(t, s).Addr())
	}
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetAppName("lease-test"))
	if err != nil {
		t.Fatalf("mongo connect %s: %v\n%s", uri, err, mongoHowTo)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Disconnect(ctx)
	})
	return c
}

var sharedProxyOnce sync.Once

// sharedProxy is one serialising proxy for the whole test binary.
func sharedProxy(t fatalT, s mongoServer) *wireProxy {
	sharedProxyOnce.Do(func() {
		mongoProxy = newWireProxy(noCleanup{t}, s.addr)
	})
	return mongoProxy
}

// noCleanup keeps the shared proxy alive past the test that started it.
type noCleanup struct{ fatalT }

func (noCleanup) Cleanup(func()) {}

var collSeq atomic.Int64

// testCollection returns a fresh collection for one test, dropped at the
// end on an external server.
func testCollection(t testing.TB, c *mongo.Client) *mongo.Collection {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), collSeq.Add(1))
	coll := c.Database("lease_test").Collection(name)
	if testMongo(t).external {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			coll.Drop(ctx)
		})
	}
	return coll
}

// mongoDriverOpts lets the tests use FerretDB behind a serialising proxy.
func mongoDriverOpts(t fatalT) []MongoOption {
	if testMongo(t).ferret {
		return []MongoOption{AllowUnsafeServer()}
	}
	return nil
}

// newTestMongoDriver makes a driver on a fresh collection of client c
// (nil: a new client through the shared path). It closes at the end.
func newTestMongoDriver(t testing.TB, c *mongo.Client) Driver {
	t.Helper()
	if c == nil {
		c = testMongoClient(t, nil)
	}
	return newTestMongoDriverOn(t, testCollection(t, c))
}

func newTestMongoDriverOn(t testing.TB, coll *mongo.Collection) Driver {
	t.Helper()
	d, err := NewMongoDriver(coll, mongoDriverOpts(t)...)
	if err != nil {
		t.Fatalf("NewMongoDriver: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestFerretDBRacesWithoutProxy shows why the tests put FerretDB behind a
// serialising proxy: talking to it directly, 8 clients racing
// updateOne({_id, version: v}) can all match, so more than one "wins" the
// same compare-and-swap. MongoDB applies such an update atomically; on a
// server from MONGODB_URI that is not FerretDB, this test checks that
// instead: exactly one winner every round.
func TestFerretDBRacesWithoutProxy(t *testing.T) {
	const clients, maxRounds = 8, 40
	s := testMongo(t)
	direct := make([]*mongo.Collection, clients)
	name := testCollection(t, sharedMongoClient(t)).Name()
	for i := range direct {
		c, err := mongo.Connect(options.Client().ApplyURI(s.uri))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Disconnect(context.Background()) })
		direct[i] = c.Database("lease_test").Collection(name)
	}
	ctx := context.Background()
	if _, err := direct[0].InsertOne(ctx, bson.D{{Key: "_id", Value: "k"}, {Key: "version", Value: int64(1)}}); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= maxRounds; round++ {
		v := int64(round)
		var (
			mu      sync.Mutex
			winners int
			errs    []error
			start   = make(chan struct{})
			wg      sync.WaitGroup
		)
		for _, coll := range direct {
			wg.Go(func() {
				<-start
				res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "k"}, {Key: "version", Value: v}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "version", Value: v + 1}}}})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else if res.ModifiedCount == 1 {
					winners++
				}
			})
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("round %d: %v", round, errs)
		}
		switch {
		case !s.ferret && winners != 1:
			t.Fatalf("round %d: %d winners of one compare-and-swap on a server that is not FerretDB; want 1", round, winners)
		case s.ferret && winners > 1:
			t.Logf("round %d: %d of %d clients won the same updateOne({_id, version: %d}) on FerretDB without the proxy", round, winners, clients, v)
			return
		case winners == 0:
			t.Fatalf("round %d: nobody won", round)
		}
	}
	if s.ferret {
		t.Fatalf("FerretDB gave exactly one winner in each of %d rounds: the race the serialising proxy guards against did not show", maxRounds)
	}
}

// TestMongoRefusesFerretDB: NewMongoDriver refuses FerretDB, which does
// not apply a conditional update atomically, unless AllowUnsafeServer is
// given; a server that is not FerretDB is accepted as is.
func TestMongoRefusesFerretDB(t *testing.T) {
	coll := testCollection(t, sharedMongoClient(t))
	d, err := NewMongoDriver(coll)
	if !testMongo(t).ferret {
		if err != nil {
			t.Fatalf("NewMongoDriver on MONGODB_URI: %v", err)
		}
		d.Close()
		return
	}
	if err == nil || !strings.Contains(err.Error(), "FerretDB") || !strings.Contains(err.Error(), "atomic") {
		t.Fatalf("NewMongoDriver on FerretDB: %v; want a refusal naming FerretDB and atomicity", err)
	}
	d, err = NewMongoDriver(coll, AllowUnsafeServer())
	if err != nil {
		t.Fatalf("with AllowUnsafeServer: %v", err)
	}
	d.Close()
	if err := testMongoClient(t, nil).Ping(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}
