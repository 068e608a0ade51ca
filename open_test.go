package lease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testScheme is a scheme the tests register, opening a memory driver
// that records its Close.
const testScheme = "lease-test-scheme"

var (
	testSchemeOnce   sync.Once
	testSchemeOpened atomic.Pointer[closeRecorder]
)

// closeRecorder is a memory driver that records that it was closed.
type closeRecorder struct {
	Driver
	closed atomic.Bool
}

func (c *closeRecorder) Close() error {
	c.closed.Store(true)
	return c.Driver.Close()
}

// registerTestScheme registers testScheme once for the test binary.
func registerTestScheme(t *testing.T) {
	t.Helper()
	testSchemeOnce.Do(func() {
		RegisterScheme(testScheme, func(ctx context.Context, url string) (Driver, error) {
			if strings.Contains(url, "fail") {
				return nil, errors.New("lease: test opener refused " + url)
			}
			d := &closeRecorder{Driver: NewMemoryDriver()}
			testSchemeOpened.Store(d)
			return d, nil
		})
	})
}

// TestRegisterScheme: Open serves a registered scheme with a
// DocumentStore over the opener's driver, which the store closes on
// Close; an opener's error comes back as it is; a bad option closes the
// driver it was given.
func TestRegisterScheme(t *testing.T) {
	registerTestScheme(t)
	s, err := Open(ctxBG, testScheme+":x", WithOwner("alice"))
	if err != nil {
		t.Fatal(err)
	}
	d := testSchemeOpened.Load()
	if g := mustAcquire(t, s, "k"); g.Epoch != 1 || g.Owner != "alice" {
		t.Fatalf("grant %+v", g)
	}
	if d.closed.Load() {
		t.Fatal("the driver closed before the store")
	}
	if err := s.Close(); err != nil || !d.closed.Load() {
		t.Fatalf("Close = %v; driver closed: %v; want the store to close its driver", err, d.closed.Load())
	}
	if _, err := Open(ctxBG, testScheme+":fail"); err == nil || !strings.Contains(err.Error(), "test opener refused") {
		t.Fatalf("a failing opener: %v", err)
	}
	if _, err := Open(ctxBG, testScheme+":x", WithOwner("a b")); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("a bad owner: %v; want ErrInvalidKey", err)
	}
	if d := testSchemeOpened.Load(); !d.closed.Load() {
		t.Fatal("Open left open the driver of a store it could not build")
	}
}

// TestRegisterSchemePanics: like sql.Register, RegisterScheme panics on a
// nil opener, a bad or built-in scheme, and a second registration.
func TestRegisterSchemePanics(t *testing.T) {
	registerTestScheme(t)
	open := func(context.Context, string) (Driver, error) { return NewMemoryDriver(), nil }
	for name, call := range map[string]func(){
		"nil opener":   func() { RegisterScheme("lease-test-nil", nil) },
		"empty scheme": func() { RegisterScheme("", open) },
		"colon":        func() { RegisterScheme("a:b", open) },
		"digit first":  func() { RegisterScheme("1a", open) },
		"file":         func() { RegisterScheme("file", open) },
		"memory":       func() { RegisterScheme("memory", open) },
		"twice":        func() { RegisterScheme(testScheme, open) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Errorf("%s: RegisterScheme did not panic", name)
				} else if !strings.HasPrefix(r.(string), "lease: RegisterScheme") {
					t.Errorf("%s: panic %q; want a lease: RegisterScheme message", name, r)
				}
			}()
			call()
		}()
	}
}

// TestOpenNamesTheMissingImport: a scheme of this module's drivers whose
// package the program did not import fails with one line naming the
// import, and never shows the URL's password; an unknown scheme says
// which ones Open knows. (The check runs on a lookup without any
// registered scheme, whatever the test binary imports.)
func TestOpenNamesTheMissingImport(t *testing.T) {
	schemesMu.Lock()
	saved := schemes
	schemes = map[string]DriverOpener{}
	schemesMu.Unlock()
	t.Cleanup(func() {
		schemesMu.Lock()
		schemes = saved
		schemesMu.Unlock()
	})
	for url, want := range map[string]string{
		"postgres://u:secret@h/db":     `lease: no driver for "postgres://" URLs: import github.com/leasekit/lease/postgres`,
		"postgresql://h/db":            `lease: no driver for "postgresql://" URLs: import github.com/leasekit/lease/postgres`,
		"mongodb://u:secret@h/db":      `lease: no driver for "mongodb://" URLs: import github.com/leasekit/lease/mongodb`,
		"mongodb+srv://u:secret@h/":    `lease: no driver for "mongodb+srv://" URLs: import github.com/leasekit/lease/mongodb`,
		"sqlite:/tmp/secret/leases.db": `lease: no driver for "sqlite:" URLs: import github.com/leasekit/lease/sqlite`,
		"mysql://u:secret@h/db":        `lease: unknown store scheme "mysql"; want file:, memory:, sqlite:, mongodb:// or postgres:// (see lease.Open)`,
		"no-scheme":                    `lease: store URL has no scheme (no ":"); want file:, memory:, sqlite:, mongodb:// or postgres:// (see lease.Open)`,
	} {
		_, err := Open(ctxBG, url)
		if err == nil || err.Error() != want {
			t.Errorf("Open(%q) = %v;\nwant %s", url, err, want)
		}
	}
	if s, err := Open(ctxBG, "memory:"); err != nil {
		t.Errorf("memory: without any driver package: %v", err)
	} else {
		s.Close()
	}
}

// TestOpenLeavesCallersOptions: Open never writes into the caller's
// options slice, even when it has spare capacity, so that two Opens
// sharing one slice do not race (run under -race) and the slice's spare
// slot keeps what the caller put there (issue 9 item 9).
func TestOpenLeavesCallersOptions(t *testing.T) {
	registerTestScheme(t)
	urls := map[string]string{
		"memory": "memory:",
		"file":   "file:" + t.TempDir(),
		"opener": testScheme + ":",
	}
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			var spareRan atomic.Bool
			spare := func(*config) { spareRan.Store(true) }
			opts := make([]Option, 1, 4)
			opts[0] = WithTTL(time.Minute)
			opts[:2][1] = spare
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					s, err := Open(context.Background(), url, opts...)
					if err != nil {
						t.Errorf("Open(%q): %v", url, err)
						return
					}
					s.Close()
				})
			}
			wg.Wait()
			opts[:2][1](new(config))
			if !spareRan.Load() {
				t.Fatalf("Open(%q) wrote into the spare capacity of the caller's options slice", url)
			}
		})
	}
}
