//go:build unix

// Package pgserver gives the tests PostgreSQL servers: LEASE_POSTGRES_URL
// when it is set, else real servers of their own, started from the
// binaries of Debian's postgresql package.
package pgserver

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// The PostgreSQL tests run against LEASE_POSTGRES_URL when it is set.
// Otherwise they start a real server of their own: initdb (once per test
// binary, into a template that every server copies) and postgres on a free
// loopback port, from the binaries of Debian's postgresql package. As root
// (CI), the server runs as the postgres user, or nobody, since PostgreSQL
// refuses to run as root. The restart and failover tests start servers of
// their own in any case.
//
// Every server runs under a small sh watchdog that holds a pipe from this
// process: the tests stop servers by their pid (fast shutdown, or SIGKILL
// where a crash is the point), and if this process dies first, the pipe
// closes and the watchdog stops its server.

// HowTo says how to give the tests a server; a test that has none fails
// with it.
const HowTo = "set LEASE_POSTGRES_URL to a PostgreSQL server (e.g. postgres://user:pass@127.0.0.1:5432/db?sslmode=disable), " +
	"or install the PostgreSQL server binaries (Debian: apt-get install postgresql); the tests find them " +
	"with pg_config --bindir or under /usr/lib/postgresql/*/bin"

// EnvURL names the variable that points the tests at a server of yours.
const EnvURL = "LEASE_POSTGRES_URL"

// T is what the server helpers need of a test; *rapid.T has it too.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Server is one running server the tests started.
type Server struct {
	bin, dir string // binaries; the server's own directory (data/, sockets, log)
	port     int
	pid      int           // the postmaster's pid
	watchdog *exec.Cmd     // sh, which started the postmaster and waits for it
	stdin    *os.File      // the watchdog's pipe: closing it stops the server
	exited   chan struct{} // closed once the postmaster has exited
	extra    []string      // more -c settings
}

// URL is a connection URL for the server's postgres database.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Addr is the server's "host:port".
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

var (
	pgOnce      sync.Once
	pgSharedURL string
	pgShared    *Server // nil with LEASE_POSTGRES_URL
	pgSharedErr error

	pgTemplateOnce sync.Once
	pgTemplate     string // an initdb'd data directory the servers copy
	pgTemplateErr  error

	pgServersMu sync.Mutex
	pgServers   []*Server // every server started, for TestMain's last stop
)

// Cleanup stops every server the tests of this process started and
// removes the template. A test binary that uses the package calls it from
// TestMain, after m.Run, whatever the result.
func Cleanup() {
	if pgPool != nil {
		pgPool.Close()
	}
	pgServersMu.Lock()
	servers := slices.Clone(pgServers)
	pgServersMu.Unlock()
	for _, s := range servers {
		s.Remove()
	}
	if pgTemplate != "" {
		os.RemoveAll(filepath.Dir(pgTemplate))
	}
}

// SharedURL returns the URL of the shared server, starting it on
// first use. A test that cannot get one fails and says how to provide one.
func SharedURL(t T) string {
	t.Helper()
	pgOnce.Do(func() {
		if u := os.Getenv(EnvURL); u != "" {
			pgSharedURL = u
			return
		}
		pgShared, pgSharedErr = StartNew()
		if pgSharedErr == nil {
			pgSharedURL = pgShared.URL()
		}
	})
	if pgSharedErr != nil {
		t.Fatalf("no PostgreSQL server for the tests: %v\n%s", pgSharedErr, HowTo)
	}
	return pgSharedURL
}

// SharedServer returns the shared server when the tests started it (the
// benchmarks read its processes' CPU time); nil when LEASE_POSTGRES_URL
// points them at a server of yours.
func SharedServer(t T) *Server {
	t.Helper()
	SharedURL(t)
	return pgShared
}

var (
	pgPoolOnce sync.Once
	pgPool     *sql.DB
)

// SharedDB is one pool on the shared server for the whole test
// binary; drivers from postgres.NewDriver share it and never close it.
func SharedDB(t T) *sql.DB {
	t.Helper()
	u := SharedURL(t)
	pgPoolOnce.Do(func() {
		cfg, err := pgx.ParseConfig(u)
		if err != nil {
			t.Fatalf("%s: %v", EnvURL, err)
		}
		pgPool = stdlib.OpenDB(*cfg)
	})
	return pgPool
}

var pgTableSeq atomic.Int64

// FreshTable names a fresh table for one test, dropped at its end, with
// its sessions table, on a server the tests did not start.
func FreshTable(t interface {
	T
	Cleanup(func())
}) string {
	name := fmt.Sprintf("lease_test_%d_%d", os.Getpid(), pgTableSeq.Add(1))
	if os.Getenv(EnvURL) != "" {
		db := SharedDB(t)
		t.Cleanup(func() { db.Exec(`DROP TABLE IF EXISTS ` + name + `, ` + name + `_sessions`) })
	}
	return name
}

// postgresBin finds the directory of the server binaries.
func postgresBin() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"postgres", "initdb", "pg_basebackup"} {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); has(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { // the newest major version first
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, dir := range dirs {
		if has(dir) {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (postgres, initdb, pg_basebackup) found")
}

// pgCredential is the unprivileged user the server runs as when the
// tests run as root; nil otherwise.
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root, and neither a postgres nor a nobody user exists to run the server as")
}

// pgCommand runs a server binary as the server's user, with its output
// in the error.
func pgCommand(bin, name string, args ...string) error {
	cred, err := pgCredential()
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// pgOwnedDir makes a temporary directory the server's user owns.
func pgOwnedDir(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	cred, err := pgCredential()
	if err == nil && cred != nil {
		err = os.Chown(dir, int(cred.Uid), int(cred.Gid))
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// templateDataDir runs initdb once per test binary.
func templateDataDir(bin string) (string, error) {
	pgTemplateOnce.Do(func() {
		var dir string
		if dir, pgTemplateErr = pgOwnedDir("lease-pg-template-"); pgTemplateErr != nil {
			return
		}
		data := filepath.Join(dir, "data")
		pgTemplateErr = pgCommand(bin, "initdb", "-D", data, "-U", "postgres", "-A", "trust",
			"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
		if pgTemplateErr != nil {
			os.RemoveAll(dir)
			return
		}
		pgTemplate = data
	})
	return pgTemplate, pgTemplateErr
}

// newPostgresDir makes a server directory holding a copy of the template
// data directory, removed when the test binary's servers are stopped.
func newPostgresDir(bin string) (string, error) {
	tmpl, err := templateDataDir(bin)
	if err != nil {
		return "", err
	}
	dir, err := pgOwnedDir("lease-pg-")
	if err != nil {
		return "", err
	}
	cred, err := pgCredential()
	if err != nil {
		return "", err
	}
	cp := exec.Command("cp", "-a", tmpl, filepath.Join(dir, "data"))
	cp.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cp.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("copying the template data directory: %v\n%s", err, out)
	}
	return dir, nil
}

// StartNew starts a server on a copy of the template.
func StartNew(settings ...string) (*Server, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	dir, err := newPostgresDir(bin)
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, extra: settings}
	if err := s.Start(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// pgWatchdog starts postgres, prints its pid, stops it with SIGINT (fast
// shutdown) when its stdin closes, and prints its exit status.
const pgWatchdog = `exec 3<&0
"$0" "$@" </dev/null >&2 3<&- &
pg=$!
echo "pid $pg"
(read _ <&3; kill -INT $pg 2>/dev/null) &
w=$!
exec 3<&-
wait $pg
status=$?
kill $w 2>/dev/null
echo "exited $status"
`

// Start starts the server on its data directory (again, after Stop or
// Kill), on the same port once it has one, and waits until it accepts
// connections.
func (s *Server) Start() error {
	if s.port == 0 {
		port, err := freePort()
		if err != nil {
			return err
		}
		s.port = port
	}
	cred, err := pgCredential()
	if err != nil {
		return err
	}
	args := []string{"-c", pgWatchdog, filepath.Join(s.bin, "postgres"), "-D", filepath.Join(s.dir, "data"),
		"-p", strconv.Itoa(s.port), "-k", s.dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "max_connections=300", "-c", "fsync=on", "-c", "synchronous_commit=on",
		"-c", "log_min_messages=warning", "-c", "wal_level=replica", "-c", "max_wal_senders=4"}
	for _, kv := range s.extra {
		args = append(args, "-c", kv)
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command("/bin/sh", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Stdin, cmd.Stderr = r, log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return err
	}
	r.Close()
	s.watchdog, s.stdin, s.exited = cmd, w, make(chan struct{})
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		w.Close()
		cmd.Wait()
		return fmt.Errorf("postgres did not start: %s", s.Log())
	}
	s.pid, _ = strconv.Atoi(strings.TrimPrefix(lines.Text(), "pid "))
	exited := s.exited
	go func() {
		for lines.Scan() { // "exited N"
		}
		cmd.Wait()
		close(exited)
	}()
	pgServersMu.Lock()
	if !slices.Contains(pgServers, s) {
		pgServers = append(pgServers, s)
	}
	pgServersMu.Unlock()
	return s.waitReady()
}

// waitReady polls until the server accepts a connection.
func (s *Server) waitReady() error {
	deadline := time.Now().Add(60 * time.Second) // a guard against a server that never comes up
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := pgx.Connect(ctx, s.URL())
		cancel()
		if err == nil {
			c.Close(context.Background())
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("postgres exited while starting: %s", s.Log())
		case <-time.After(20 * time.Millisecond): // polling for readiness, not waiting for time to pass
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections in 60s: %v\n%s", err, s.Log())
		}
	}
}

// Log is the tail of the server's log.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// signal sends sig to the postmaster and waits until it has exited.
func (s *Server) signal(sig syscall.Signal) {
	if s.watchdog == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	syscall.Kill(s.pid, sig)
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second): // a guard against a server that ignores SIGINT
		syscall.Kill(s.pid, syscall.SIGKILL)
		<-s.exited
	}
	s.stdin.Close()
}

// Stop shuts the server down (fast shutdown: SIGINT to the postmaster)
// and waits for it. The data directory stays, for Start.
func (s *Server) Stop() { s.signal(syscall.SIGINT) }

// Kill SIGKILLs the postmaster and waits for it, as a crash would. Its
// backends notice their parent's death and exit on their own.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

// Remove stops the server and deletes its directory.
func (s *Server) Remove() {
	s.Stop()
	os.RemoveAll(s.dir)
}

// Start starts a server of the test's own, removed when the
// test ends.
func Start(t *testing.T, settings ...string) *Server {
	t.Helper()
	s, err := StartNew(settings...)
	if err != nil {
		t.Fatalf("starting a PostgreSQL server: %v\n%s", err, HowTo)
	}
	t.Cleanup(s.Remove)
	return s
}

// StartStandby copies the primary with pg_basebackup and starts it as a
// streaming standby named standby1, replicating through the proxy on
// 127.0.0.1:linkPort (a link the test can cut). It is removed when the
// test ends.
func StartStandby(t *testing.T, primary *Server, linkPort int) *Server {
	t.Helper()
	dir, err := pgOwnedDir("lease-pg-standby-")
	if err != nil {
		t.Fatal(err)
	}
	standby := &Server{bin: primary.bin, dir: dir}
	t.Cleanup(standby.Remove)
	data := filepath.Join(dir, "data")
	if err := pgCommand(primary.bin, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port),
		"-U", "postgres", "-D", data, "-X", "stream", "--checkpoint=fast", "--no-sync"); err != nil {
		t.Fatal(err)
	}
	signal := filepath.Join(data, "standby.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if cred, _ := pgCredential(); cred != nil {
		if err := os.Chown(signal, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	standby.extra = []string{
		fmt.Sprintf("primary_conninfo=host=127.0.0.1 port=%d user=postgres application_name=standby1 sslmode=disable", linkPort),
		"synchronous_standby_names=", // once promoted, it has no standby to wait for
		"hot_standby=on",
		"wal_receiver_status_interval=1s",
	}
	if err := standby.Start(); err != nil {
		t.Fatal(err)
	}
	return standby
}

var nameSeq atomic.Int64

// UniqueName is a name for a database object of one test: prefix, this
// process's pid and a sequence number.
func UniqueName(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), nameSeq.Add(1))
}
