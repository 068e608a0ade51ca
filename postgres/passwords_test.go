package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestOpenErrorsHidePasswords (issue 26, section 3): Open's errors for a
// connection string it cannot parse, URL or key=value, quote none of it:
// pgx's own text hides a password only where its patterns find one (not
// after an escaped quote, not in a URL that net/url reads otherwise).
// They still say what is wrong, and errors.As finds pgx's error.
func TestOpenErrorsHidePasswords(t *testing.T) {
	for conn, want := range map[string]string{
		`host=127.0.0.1 password='Zx9\'Qw7 Pe5' port=x`:             "lease: postgres: cannot parse the connection string: invalid port (invalid syntax)",
		`host=127.0.0.1 password=Zx9Qw7Pe5 sslmode=bogus`:           "lease: postgres: cannot parse the connection string: failed to configure TLS (sslmode is invalid)",
		`host=127.0.0.1 password=Zx9Qw7Pe5 connect_timeout=soon`:    "lease: postgres: cannot parse the connection string: invalid connect_timeout (invalid syntax)",
		"postgres://app:Zx9Qw7Pe5@127.0.0.1:99999/app":              "lease: postgres: cannot parse the connection string: invalid port (value out of range)",
		"postgres://app:Zx9/Qw7?Pe5@db.example:5432/app":            `lease: cannot parse the postgres URL: a "/", "?" or "#" comes before the last "@"`,
		"postgres://app:Zx9%zzQw7Pe5@127.0.0.1:1/app":               `lease: cannot parse the postgres URL: a "%" in the user name or password does not start a %XX escape`,
		"postgresql:/app:Zx9Qw7Pe5@127.0.0.1:1/app":                 `lease: cannot parse the postgresql URL: want "//" after the scheme's ":"`,
		"postgres://app:Zx9 Qw7Pe5@127.0.0.1:1/app":                 "lease: cannot parse the postgres URL: invalid userinfo",
		"postgres://app:Zx9Qw7Pe5@127.0.0.1:1/app?max_conns=plenty": `lease: postgres URL: max_conns "plenty": want a whole number`,
		// A secret in the query: the errors quote no part of the URL (found by review).
		"postgres://app@127.0.0.1:1/app?password=Zx9Qw7Pe5&max_conns=0":        `lease: postgres URL: max_conns "0": want a whole number`,
		"postgres://app@127.0.0.1:1/app?sslpassword=Zx9Qw7Pe5&table=a&table=b": "lease: postgres URL: want one table parameter with a value, got 2",
		"postgres://app@127.0.0.1:1/app?password=Zx9Qw7Pe5&sslmode=bogus":      "lease: postgres: cannot parse the connection string: failed to configure TLS (sslmode is invalid)",
		"postgres://app@127.0.0.1:1/app?target_session_attrs=Zx9Qw7Pe5":        "lease: postgres: cannot parse the connection string: unknown target_session_attrs value",
		"postgres://app@127.0.0.1:1/app?service=Zx9Qw7Pe5":                     "lease: postgres: cannot parse the connection string: failed to read service",
		"postgres://app@127.0.0.1:1/app?sslmode=verify-full&sslrootcert=/nonexistent/Zx9Qw7Pe5": "lease: postgres: cannot parse the connection string: " +
			"failed to configure TLS (unable to read CA file: open: no such file or directory)",
	} {
		_, err := Open(context.Background(), conn)
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.ContainsAny(err.Error(), "\n\r") {
			t.Errorf("Open(%q) = %v;\nwant one line starting %s", conn, err, want)
			continue
		}
		for _, piece := range []string{"Zx9", "Qw7", "Pe5"} {
			if strings.Contains(err.Error(), piece) {
				t.Errorf("Open(%q) = %v: shows %q of the password", conn, err, piece)
			}
		}
		var pe *pgconn.ParseConfigError
		if strings.Contains(want, "connection string") && !errors.As(err, &pe) {
			t.Errorf("Open(%q) = %v: errors.As finds no *pgconn.ParseConfigError", conn, err)
		}
	}
}
