package redact

import (
	"errors"
	"strings"
	"testing"
)

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
