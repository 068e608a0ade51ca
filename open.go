package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/leasekit/lease/internal/redact"
)

// DriverOpener opens the document driver for a store URL of a scheme
// registered with RegisterScheme. It is given the whole URL, as Open was.
// The driver it returns belongs to the store that Open builds on it, which
// closes it on Close.
type DriverOpener func(ctx context.Context, url string) (Driver, error)

var (
	schemesMu sync.RWMutex // guards schemes
	schemes   = map[string]DriverOpener{}
)

// schemeHomes names the package that registers each scheme this module
// knows, for the error of a program that did not import it.
var schemeHomes = map[string]string{
	"sqlite":      "github.com/leasekit/lease/sqlite",
	"mongodb":     "github.com/leasekit/lease/mongodb",
	"mongodb+srv": "github.com/leasekit/lease/mongodb",
	"postgres":    "github.com/leasekit/lease/postgres",
	"postgresql":  "github.com/leasekit/lease/postgres",
}

// builtinSchemes are the schemes Open serves itself.
var builtinSchemes = []string{"file", "memory"}

// RegisterScheme makes Open accept URLs of scheme (given without the
// colon: "sqlite", "mongodb+srv"), building a DocumentStore over the driver
// that open returns. A driver package calls it from init, as database/sql
// drivers call sql.Register, so that importing the package is all a program
// does to use its URLs. It panics if open is nil, if scheme is empty, holds
// a character a URL scheme cannot, is built in ("file", "memory"), or is
// registered already.
func RegisterScheme(scheme string, open DriverOpener) {
	if open == nil {
		panic("lease: RegisterScheme: nil opener for scheme " + fmt.Sprintf("%q", scheme))
	}
	if !redact.WellFormedScheme(scheme) || slices.Contains(builtinSchemes, scheme) {
		panic(fmt.Sprintf("lease: RegisterScheme: cannot register scheme %q", scheme))
	}
	schemesMu.Lock()
	defer schemesMu.Unlock()
	if _, dup := schemes[scheme]; dup {
		panic(fmt.Sprintf("lease: RegisterScheme: scheme %q registered twice", scheme))
	}
	schemes[scheme] = open
}

// Open opens a store from a URL:
//
//	file:/path/dir                             local flock store (one host, no backend)
//	memory:                                    in-memory document store (one process only)
//	sqlite:/path/leases.db                     SQLite document store (one host, many processes)
//	mongodb://host:port/db?collection=leases   MongoDB document store (many hosts); also mongodb+srv://
//	postgres://host:port/db?table=leases       PostgreSQL document store (many hosts); also postgresql://
//
// file: and memory: are built in. The others are served by the driver
// packages, once the program imports them (their init registers the
// schemes, see RegisterScheme):
//
//	import _ "github.com/leasekit/lease/sqlite"
//	import _ "github.com/leasekit/lease/mongodb"
//	import _ "github.com/leasekit/lease/postgres"
//
// A URL of a scheme that no imported package registered fails with an
// error naming the import to add. Closing the store closes what Open opened.
//
// No error of Open shows a URL's password, nor any part of its query,
// where a parameter may carry a secret (password=, a token): an error
// names the bad parameter, and its value only when that is a name or a
// number of this library's (table, collection, max_conns). Write "/", "?",
// "#", "@", ":" and "%" in a user name or password percent-encoded (%2F,
// %3F, %23, %40, %3A, %25): a URL with a "/", "?" or "#" before its last
// "@" is refused, as a parser would take part of the password for the
// host. sqlite: and file: URLs take no query: one with a "?" is refused.
func Open(ctx context.Context, url string, opts ...Option) (Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	scheme, rest, err := splitScheme(url)
	if err != nil {
		return nil, err
	}
	// Clip: appending must never write into the caller's slice.
	owned := append(slices.Clip(opts), closeDriver())
	switch scheme {
	case "memory":
		return NewDocumentStore(NewMemoryDriver(), owned...)
	case "file":
		if err := redact.NoQuery("file", url, "file:/path/dir"); err != nil {
			return nil, err
		}
		return openLocalStore(rest, opts)
	}
	open, err := schemeOpener(scheme, url)
	if err != nil {
		return nil, err
	}
	d, err := open(ctx, url)
	if err != nil {
		return nil, err
	}
	s, err := NewDocumentStore(d, owned...)
	if err != nil {
		d.Close() // the error that matters is err
		return nil, err
	}
	return s, nil
}

// wantSchemes ends the errors of a store URL Open cannot read.
const wantSchemes = "want file:, memory:, sqlite:, mongodb:// or postgres:// (see lease.Open)"

// splitScheme takes an Open URL's scheme off, refusing a URL without one.
// The error does not quote the URL: a string without a scheme may be
// anything, a password pasted into the wrong variable among them.
func splitScheme(url string) (scheme, rest string, err error) {
	scheme, rest, ok := strings.Cut(url, ":")
	switch {
	case url == "":
		return "", "", errors.New("lease: store URL is empty; " + wantSchemes)
	case !ok:
		return "", "", errors.New("lease: store URL has no scheme (no \":\"); " + wantSchemes)
	}
	return scheme, rest, nil
}

// schemeOpener finds the registered opener of scheme. The error for a
// scheme of this module names the package to import; no error quotes
// more of url than its scheme, and that only when redact.Scheme finds it
// cannot hold a password.
func schemeOpener(scheme, url string) (DriverOpener, error) {
	schemesMu.RLock()
	open := schemes[scheme]
	schemesMu.RUnlock()
	if open != nil {
		return open, nil
	}
	if home, ok := schemeHomes[scheme]; ok {
		shown := scheme + ":"
		if strings.HasPrefix(url[len(shown):], "//") {
			shown += "//"
		}
		return nil, fmt.Errorf("lease: no driver for %q URLs: import %s", shown, home)
	}
	return nil, errors.New("lease: " + redact.UnknownScheme(url) + "; " + wantSchemes)
}
