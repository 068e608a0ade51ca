package redact

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
)

// TestUnquoted: the values a library's error quotes are left out, with
// the ": " before them; a quoted string that keep accepts stays, and so
// does the rest of the text (issue 26, section 3: the MongoDB driver's
// URL errors quote option values, where a token may be).
func TestUnquoted(t *testing.T) {
	onlySSL := func(before, q string) bool { return strings.HasSuffix(before, "for") && q == `"ssl"` }
	for _, tc := range []struct {
		err  error
		want string
	}{
		{errors.New(`error parsing uri: invalid value for "ssl": "Zx9Qw7"`), `error parsing uri: invalid value for "ssl"`},
		{errors.New(`error parsing uri: invalid value for "w": "Zx9Qw7"`), `error parsing uri: invalid value for`},
		{errors.New(`invalid option value "Zx9%zz": invalid URL escape "%zz"`), `invalid option value: invalid URL escape`},
		{errors.New(`bad "Zx9\"Qw7" here`), `bad here`},
		{fmt.Errorf("unable to read cert: %w", &fs.PathError{Op: "open", Path: "/etc/Zx9Qw7", Err: fs.ErrNotExist}),
			"unable to read cert: open: file does not exist"},
		{errors.New("no quotes at all"), "no quotes at all"},
	} {
		if got := Unquoted(tc.err, onlySSL); got != tc.want {
			t.Errorf("Unquoted(%q) = %q; want %q", tc.err, got, tc.want)
		}
	}
}

// TestNoQuery: a URL of a path-only scheme with a query is refused, and
// the error shows none of it.
func TestNoQuery(t *testing.T) {
	if err := NoQuery("sqlite", "sqlite:/var/lib/leases.db", "sqlite:/path/leases.db"); err != nil {
		t.Errorf("NoQuery of a URL without a query: %v", err)
	}
	err := NoQuery("sqlite", "sqlite:/var/lib/leases.db?_auth_pass=Zx9Qw7", "sqlite:/path/leases.db")
	want := `lease: sqlite: the URL has a query ("?"): sqlite: takes no parameters; want sqlite:/path/leases.db`
	if err == nil || err.Error() != want {
		t.Errorf("NoQuery of a URL with a query: %v; want %s", err, want)
	}
}
