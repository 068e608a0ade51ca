package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"mongodb://u:secret@h/db", "mongodb://u:xxxxx@h/db"},
		{"postgres://u:se@cret@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"mongodb://h1,h2/db?collection=x", "mongodb://h1,h2/db?collection=x"},
		{"sqlite:/tmp/a@b", "sqlite:/tmp/a@b"},
		{"memory:", "memory:"},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q; want %q", tc.in, got, tc.want)
		}
		if strings.Contains(URL(tc.in), "secret") || strings.Contains(URL(tc.in), "cret") {
			t.Errorf("URL(%q) = %q keeps the password", tc.in, URL(tc.in))
		}
	}
}
