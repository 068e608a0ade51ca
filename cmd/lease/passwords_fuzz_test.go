package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease"
)

// The store URLs of issue 26 (section 3): a password with "/" and "?"
// pasted unescaped, under a typo'd scheme and under the real ones.
var issuePasswordURLs = []string{
	"postgress://app:Zx9/Qw7?Pe5@db.example:5432/app",
	"postgres://app:Zx9/Qw7?Pe5@db.example:5432/app",
	"postgresql://app:Zx9/Qw7?Pe5@db.example:5432/app",
	"mongodb://app:Zx9/Qw7Pe5@db.example:27017/app",
	"mongodb+srv://app:Zx9/Qw7Pe5@db.example/app",
}

// passwordURLs are the store URLs the fuzz target puts each password
// into: userinfo forms of every scheme lease.Open and the command know,
// typo'd schemes, and a URL without its scheme. None reaches a network
// host: the hosts are 127.0.0.1 on port 1, where nothing listens (and
// mongodb+srv refuses a port before it looks anything up); MongoDB gives
// up selecting a server after 10 ms. No form of sqlite: or file: here
// names a path that could be created: they name a host, which the openers
// refuse.
var passwordURLs = []struct{ before, after string }{
	{"sqlite://app:", "@127.0.0.1:1/leases.db"},
	{"file://app:", "@127.0.0.1:1/leases"},
	{"memory://app:", "@127.0.0.1:1/"},
	{"postgres://app:", "@127.0.0.1:1/app"},
	{"postgresql://app:", "@127.0.0.1:1/app?table=leases&sslmode=disable"},
	{"postgres:/app:", "@127.0.0.1:1/app"},
	{"postgres://:", "@127.0.0.1:1"},
	{"mongodb://app:", "@127.0.0.1:1/app?serverSelectionTimeoutMS=10&collection=leases"},
	{"mongodb+srv://app:", "@127.0.0.1:1/app"},
	{"mongodb:app:", "@127.0.0.1:1/app"},
	{"postgress://app:", "@db.example:5432/app"},
	{"mongo://app:", "@db.example/app"},
	{"sqllite://app:", "@h/leases.db"},
	{"PostgreSQL+x://app:", "@h/app"},
	{"postgres//app:", "@127.0.0.1:1/app"},
	{"app:", "@127.0.0.1:1/app"},
}

// FuzzStorePasswords (issue 26, section 3): no error of lease.Open, with
// every driver registered, nor anything "lease holder", "lease list" and
// "lease run" print when opening a store fails, shows a piece of the
// password of the store URL, whatever characters it holds, in the user
// info or in a query parameter (queryPasswordURLs); Open's errors
// are one line with one "lease:" prefix. The fuzzer's bytes become a
// password of printable ASCII ("/", "?", "#", "@", ":", "%" and space
// among them), put into every URL of passwordURLs.
//
// What counts as a piece: a substring of the password, of 3 bytes or
// more (the whole password when it is shorter), found in the output. A
// message's own words, and the parts of the URL that are not the
// password, may hold such a substring by chance ("ase" of "lease",
// "127"), so a substring found is a leak only if it is missing from the
// output for the password's twin: the same password with every letter and
// digit changed to another of its kind (a hex digit to a hex digit, so
// that %XX escapes stay valid or invalid alike, and the URL is read the
// same way). A piece that holds a letter or digit therefore cannot hide
// behind the message; a piece made of punctuation only cannot be told
// from the message's own, and is not counted.
func FuzzStorePasswords(f *testing.F) {
	for _, pw := range []string{"Zx9/Qw7?Pe5", "Zx9/Qw7Pe5", "S3cr3tPassw0rd", "Zx9:Qw7@Pe5#Lm", "ab%zzcd", "ab%4", "p@ss w0rd",
		"12345/abc", "Zx9#Qw7", "%41Zx9/", "ab", "Q",
		"%01'Zx9Qw7", // found by this target: MongoDB's SASLprep error quoted the refused character
	} {
		f.Add(pw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		pw := printable(raw)
		for _, u := range slices.Concat(passwordURLs, queryPasswordURLs) {
			url, twinURL := u.before+pw+u.after, u.before+twin(pw)+u.after
			got := openError(url)
			if got != "" && (!strings.HasPrefix(got, "lease: ") || strings.Count(got, "lease:") != 1 || strings.ContainsAny(got, "\n\r")) {
				t.Fatalf("Open(%q) = %q; want one line with one lease: prefix", url, got)
			}
			checkNoPassword(t, url, pw, got, openError(twinURL))
			subs := []string{"holder", "list"}
			if got != "" { // lease run stops where Open fails; where it opens, it would start COMMAND
				subs = append(subs, "run")
			}
			for _, sub := range subs {
				checkNoPassword(t, sub+" --store "+url, pw, commandOutput(sub, url), commandOutput(sub, twinURL))
			}
		}
	})
}

// TestIssuePasswordURLs: the store URLs of issue 26 give errors that
// show no piece of their password, and still say what is wrong.
func TestIssuePasswordURLs(t *testing.T) {
	want := map[string]string{
		"postgress":    `lease: unknown store scheme "postgress"; want file:, memory:, sqlite:, mongodb:// or postgres:// (see lease.Open)`,
		"postgres":     `lease: cannot parse the postgres URL: a "/", "?" or "#" comes before the last "@"`,
		"postgresql":   `lease: cannot parse the postgresql URL: a "/", "?" or "#" comes before the last "@"`,
		"mongodb":      `lease: cannot parse the mongodb URL: a "/", "?" or "#" comes before the last "@"`,
		"mongodb+srv":  `lease: cannot parse the mongodb+srv URL: a "/", "?" or "#" comes before the last "@"`,
		"postgress/69": `lease: unknown store scheme "postgress"; want sqlite:, mongodb://, postgres://, file: or memory: (see lease.Open)`,
	}
	for _, url := range issuePasswordURLs {
		scheme, _, _ := strings.Cut(url, ":")
		got := openError(url)
		if !strings.HasPrefix(got, want[scheme]) || strings.Count(got, "lease:") != 1 || strings.ContainsAny(got, "\n\r") {
			t.Errorf("Open(%q) = %s;\nwant one line starting %s", url, got, want[scheme])
		}
		for _, sub := range []string{"holder", "list"} {
			got := commandOutput(sub, url)
			wantCmd := want[scheme]
			if scheme == "postgress" {
				wantCmd = want["postgress/69"] // a usage error, before any store is opened
			}
			if !strings.HasPrefix(got, wantCmd) || strings.Count(got, "lease:") != 1 || strings.Count(got, "\n") != 1 {
				t.Errorf("lease %s --store %q printed %q;\nwant one line starting %s", sub, url, got, wantCmd)
			}
		}
		for _, piece := range []string{"Zx9", "Qw7", "Pe5"} {
			if strings.Contains(got, piece) {
				t.Errorf("Open(%q) = %s: shows %q of the password", url, got, piece)
			}
		}
	}
}

// openError is the text of lease.Open's error for url ("" if it opened).
// Its context ends soon: nothing listens where the URLs point.
func openError(url string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := lease.Open(ctx, url)
	if err != nil {
		return err.Error()
	}
	s.Close()
	return ""
}

// commandOutput is what "lease SUB --store url k" prints, on both streams
// ("lease list" takes no KEY, "lease run" a COMMAND).
func commandOutput(sub, url string) string {
	var out bytes.Buffer
	args := []string{sub, "--store", url, "k"}
	switch sub {
	case "list":
		args = args[:3]
	case "run":
		args = append(args, "--", "true")
	}
	mainArgs(args, &out, &out)
	return out.String()
}

// timingText is the part of MongoDB's server selection error that one
// run may have and the next not (the last error of the server's monitor,
// which may not have run yet): a piece of the password found only there
// is the message's own words.
const timingText = "Last error: dial tcp 127.0.0.1:1: connect: connection refused"

// checkNoPassword fails if got, the output for a URL with password pw,
// shows a piece of pw that the output for its twin (twinGot) does not.
func checkNoPassword(t *testing.T, what, pw, got, twinGot string) {
	t.Helper()
	twinGot += "\n" + timingText
	n := min(3, len(pw))
	for i := 0; n > 0 && i+n <= len(pw); i++ {
		for j := i + n; j <= len(pw); j++ {
			piece := pw[i:j]
			if !strings.Contains(got, piece) {
				break // no longer piece from i is there either
			}
			if !strings.Contains(twinGot, piece) {
				t.Fatalf("%s: shows %q of the password:\n%s", what, piece, got)
			}
		}
	}
}

// printable maps the fuzzer's bytes onto printable ASCII, " " to "~",
// keeping those that are printable already.
func printable(raw string) string {
	b := []byte(raw)
	for i, c := range b {
		if c < ' ' || c > '~' {
			b[i] = ' ' + c%('~'-' '+1)
		}
	}
	return string(b)
}

// twin changes every letter and digit of pw to another of its kind: a
// hex digit to a hex digit, any other letter to another non-hex letter of
// its case. Punctuation stays, so the URL is read the same way.
func twin(pw string) string {
	b := []byte(pw)
	for i, c := range b {
		switch {
		case '0' <= c && c <= '9':
			b[i] = '0' + (c-'0'+5)%10
		case 'a' <= c && c <= 'f':
			b[i] = 'a' + (c-'a'+3)%6
		case 'A' <= c && c <= 'F':
			b[i] = 'A' + (c-'A'+3)%6
		case 'g' <= c && c <= 'z':
			b[i] = 'g' + (c-'g'+10)%20
		case 'G' <= c && c <= 'Z':
			b[i] = 'G' + (c-'G'+10)%20
		}
	}
	return string(b)
}
