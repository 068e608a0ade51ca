package redact

import (
	"errors"
	"strings"
	"testing"
)

// TestURL: the user info is hidden up to the URL's last "@", whatever
// the password holds (issue 26: "/" and "?" in it showed it all).
func TestURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"mongodb://u:secret@h/db", "mongodb://u:xxxxx@h/db"},
		{"postgres://u:se@cret@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"postgress://app:Zx9/Qw7?Pe5@db.example:5432/app", "postgress://app:xxxxx@db.example:5432/app"},
		{"mongodb://app:Zx9/Qw7Pe5@db.example/app", "mongodb://app:xxxxx@db.example/app"},
		{"mongodb://u:sec#ret@h/db", "mongodb://u:xxxxx@h/db"},
		{"postgres://token@h/db", "postgres://xxxxx@h/db"}, // a lone user info may be a token
		{"postgres:/u:secret@h/db", "postgres:/u:xxxxx@h/db"},
		{"u:secret@h/db", "u:xxxxx@h/db"},
		{"sec@ret:x", "xxxxx@ret:x"},
		{"mongodb://h1,h2/db?collection=x", "mongodb://h1,h2/db?collection=x"},
		{"memory:", "memory:"},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// TestScheme: a scheme is shown only when it is well formed and cannot
// be the first half of a bare user:password.
func TestScheme(t *testing.T) {
	for _, tc := range []struct {
		in, scheme string
		ok         bool
	}{
		{"postgress://app:Zx9/Qw7?Pe5@db.example:5432/app", "postgress", true},
		{"sqllite:/tmp/a@b.db", "sqllite", true},
		{"memroy:", "memroy", true},
		{"sqllite:leases.db", "sqllite", true},
		{"Zx9:Qw7@db.example", "", false}, // a password pasted without scheme and user
		{"postgres//app:Zx9@h", "", false},
		{"no-colon", "", false},
		{":x", "", false},
	} {
		if scheme, ok := Scheme(tc.in); scheme != tc.scheme || ok != tc.ok {
			t.Errorf("Scheme(%q) = %q, %v; want %q, %v", tc.in, scheme, ok, tc.scheme, tc.ok)
		}
	}
}

// TestCheck: a URL whose user info a parser would end before the last
// "@", or whose user info holds a bad escape, is refused.
func TestCheck(t *testing.T) {
	for in, want := range map[string]error{
		"postgres://app:Zx9/Qw7?Pe5@db.example:5432/app": ErrDelimiter,
		"mongodb://app:Zx9/Qw7Pe5@db.example/app":        ErrDelimiter,
		"mongodb://app:Zx9#Qw7@h/app":                    ErrDelimiter,
		"postgres:///db?user=me@corp":                    ErrDelimiter, // write %40
		"postgres://app:ab%zz@h/db":                      ErrEscape,
		"postgres://app:ab%4@h/db":                       ErrEscape,
		"postgres://app:ab%@h/db":                        ErrEscape,
		"postgres:/app:x@h/db":                           ErrNoAuthority,
		"postgres://app:p%40ss@h/db?sslmode=disable":     nil,
		"postgres://me@corp:p@ss@h/db":                   nil, // the parser ends the user info at the last "@" too
		"postgresql:///db?host=/run/postgresql":          nil,
		"mongodb://h1:1,h2:2/app?replicaSet=rs0":         nil,
	} {
		if err := Check(in); !errors.Is(err, want) {
			t.Errorf("Check(%q) = %v; want %v", in, err, want)
		} else if err != nil && strings.Contains(err.Error(), "Zx9") {
			t.Errorf("Check(%q) = %v: shows the password", in, err)
		}
	}
}
