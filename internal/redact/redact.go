// Package redact keeps passwords and other secrets out of the errors
// about store URLs. The package lease, the driver packages and the lease
// command share it. Those errors quote no part of a URL but its scheme
// (Scheme) and the names and values this library reads from it; what
// the parsers they use say is retold without the values they quote
// (Unquoted, Retold).
//
// A URL's password is the part of its user info after the first ":", up
// to the "@" that ends the user info: scheme://user:password@host. People
// paste generated passwords unescaped, so a password may hold any
// character, "/", "?", "#", "@" and ":" among them; Check refuses the URLs
// that a URL parser would read another way than up to the last "@".
package redact

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
)

// Scheme returns the scheme of rawURL, the text before its first ":", and
// whether an error may show it: when it is well formed (RFC 3986: a letter,
// then letters, digits, "+", "-" or ".") and cannot be the first half of
// a bare user:password. That holds when what follows the ":" starts with
// "/" (a path, or "//" and an authority whose user info comes after) or
// holds no "@" (no user info at all); "ab:cd@host" may be a password
// "ab:cd" pasted without its scheme and user. It returns "", false when
// the scheme may not be shown.
func Scheme(rawURL string) (scheme string, showable bool) {
	scheme, rest, ok := strings.Cut(rawURL, ":")
	if !ok || !WellFormedScheme(scheme) {
		return "", false
	}
	if !strings.HasPrefix(rest, "/") && strings.Contains(rest, "@") {
		return "", false
	}
	return scheme, true
}

// UnknownScheme says, for the error that refuses rawURL, that its scheme
// is not one the program serves, naming the scheme when Scheme finds that
// it may be shown.
func UnknownScheme(rawURL string) string {
	if scheme, ok := Scheme(rawURL); ok {
		return fmt.Sprintf("unknown store scheme %q", scheme)
	}
	return "unknown store scheme (not shown: the store URL may hold a password)"
}

// WellFormedScheme reports whether s is a URL scheme as RFC 3986 writes
// one: a letter, then letters, digits, "+", "-" or ".".
func WellFormedScheme(s string) bool {
	for i, r := range s {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || !(r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.')) {
			return false
		}
	}
	return s != ""
}

// Errors of Check. They quote nothing of the URL.
var (
	ErrNoAuthority = errors.New(`want "//" after the scheme's ":"`)
	ErrDelimiter   = errors.New(`a "/", "?" or "#" comes before the last "@": ` +
		`percent-encode "/", "?", "#", "@" and ":" in the user name and password (%2F, %3F, %23, %40, %3A)`)
	ErrEscape = errors.New(`a "%" in the user name or password does not start a %XX escape: write "%" as %25`)
)

// Check refuses a scheme://user:password@host/... URL whose user info a
// URL parser (net/url, libpq, the MongoDB driver) would not end at the
// last "@", so that neither a parser's error nor a host, port, path or
// query taken from the URL can carry a piece of the password: a "/", "?"
// or "#" before the last "@" (the parser ends the user info, and the host,
// there), or a "%" in the user info that does not start a %XX escape (the
// parser's error quotes it). Its errors quote nothing of the URL.
func Check(rawURL string) error {
	_, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return ErrNoAuthority
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return nil
	}
	userinfo := rest[:at]
	if strings.ContainsAny(userinfo, "/?#") {
		return ErrDelimiter
	}
	for i := strings.IndexByte(userinfo, '%'); i >= 0; i = strings.IndexByte(userinfo, '%') {
		if i+2 >= len(userinfo) || !isHex(userinfo[i+1]) || !isHex(userinfo[i+2]) {
			return ErrEscape
		}
		userinfo = userinfo[i+3:]
	}
	return nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Retold returns an error that reads msg in place of err's text, which
// quotes what it must not (or spans lines); errors.Is and errors.As still
// reach err.
func Retold(msg string, err error) error { return &retold{msg: msg, err: err} }

type retold struct {
	msg string
	err error
}

func (e *retold) Error() string { return e.msg }
func (e *retold) Unwrap() error { return e.err }

// quoted matches a string as %q writes it, with the ": " or spaces
// before it.
var quoted = regexp.MustCompile(`(?:: | *)"(?:[^"\\]|\\.)*"`)

// Unquoted returns a library's error text less the values it quotes:
// the strings it quotes as %q does, and the path of a *fs.PathError in
// its chain. A value taken from a URL (a host, an option's value, an
// escape, a file name) may be a piece of a password pasted unescaped.
// keep, if not nil, keeps a quoted string q (its quotes included) that
// follows the text before.
func Unquoted(err error, keep func(before, q string) bool) string {
	text := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		text = strings.Replace(text, pe.Error(), pe.Op+": "+pe.Err.Error(), 1)
	}
	var b strings.Builder
	last := 0
	for _, m := range quoted.FindAllStringIndex(text, -1) {
		b.WriteString(text[last:m[0]])
		if q := text[m[0]:m[1]]; keep != nil && keep(text[:m[0]], strings.TrimLeft(q, ": ")) {
			b.WriteString(q)
		}
		last = m[1]
	}
	b.WriteString(text[last:])
	return b.String()
}

// NoQuery refuses a URL of a scheme that takes a path and no parameters
// (sqlite:, file:) if it has a query, without quoting it: the path would
// hold it, and the errors that show the path would show a secret its
// writer meant as a parameter (sqlite:/app/leases.db?_auth_pass=...).
// want is the form the scheme takes.
func NoQuery(scheme, rawURL, want string) error {
	if !strings.Contains(rawURL, "?") {
		return nil
	}
	return fmt.Errorf(`lease: %s: the URL has a query ("?"): %s: takes no parameters; want %s`, scheme, scheme, want)
}
