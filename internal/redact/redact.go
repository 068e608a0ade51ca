// Package redact drops passwords from URLs before they appear in errors.
// The package lease and the driver packages share it.
package redact

import "strings"

// URL returns rawURL with the password of a scheme://user:password@host
// form replaced by "xxxxx"; any other string comes back as it is. It reads
// the userinfo as MongoDB and PostgreSQL URLs write it: up to the last "@"
// before the path or query, so a password may hold an unescaped "@".
func URL(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return rawURL
	}
	hosts, _, _ := strings.Cut(rest, "/")
	hosts, _, _ = strings.Cut(hosts, "?")
	at := strings.LastIndexByte(hosts, '@')
	if at < 0 {
		return rawURL
	}
	user, _, _ := strings.Cut(rest[:at], ":")
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}
