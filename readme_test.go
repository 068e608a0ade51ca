package lease

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docPages are the pages whose Go snippets must be compiled and whose
// links must lead somewhere: the front page, the command's page, the
// contributor's and the changelog, and every page under docs/.
func docPages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages := append([]string{"README.md", "CONTRIBUTING.md", "CHANGELOG.md", "cmd/lease/README.md"}, docs...)
	for _, p := range pages {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("documentation page: %v", err)
		}
	}
	return pages
}

// TestReadmeSnippetsAreExamples: every Go snippet of the documentation
// (docPages) appears, line for line (indentation aside), in a file that
// `go test` compiles: an example test of any package of the module, or a
// program under examples/. A snippet edited in one place and not the
// other fails here.
func TestReadmeSnippetsAreExamples(t *testing.T) {
	var sources []string
	for _, pattern := range []string{"example*_test.go", "*/example*_test.go", "examples/*/*.go"} {
		more, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, more...)
	}
	var code strings.Builder
	for _, f := range sources {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		code.WriteString(normalizeCode(string(b)))
	}
	total := 0
	for _, page := range docPages(t) {
		md, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range goSnippets(string(md)) {
			total++
			if !strings.Contains(code.String(), normalizeCode(s)) {
				t.Errorf("%s: Go snippet is in no compiled example:\n%s", page, s)
			}
		}
	}
	if total == 0 {
		t.Fatal("no Go snippets found in the documentation: the test checks nothing")
	}
}

// mdLink matches a markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinksExist: every relative link of the documentation leads to a
// file or directory of the repository, and a link to a heading
// (page.md#heading, or #heading on the same page) to a heading that exists.
func TestDocLinksExist(t *testing.T) {
	for _, page := range docPages(t) {
		md, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(md), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links %s: %v", page, target, err)
					continue
				}
			}
			if anchor != "" && !hasHeading(t, path, anchor) {
				t.Errorf("%s links %s: %s has no heading %q", page, target, path, anchor)
			}
		}
	}
}

// hasHeading reports whether the markdown file at path has a heading
// whose GitHub anchor is anchor.
func hasHeading(t *testing.T, path, anchor string) bool {
	t.Helper()
	md, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	inCode := false
	for line := range strings.Lines(string(md)) {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); !inCode && ok && strings.HasPrefix(line, "#") && headingAnchor(title) == anchor {
			return true
		}
	}
	return false
}

// headingAnchor is the anchor GitHub gives a heading: lower case, spaces
// to hyphens, punctuation other than hyphens and underscores dropped.
func headingAnchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(title)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// goSnippets returns the bodies of the ```go blocks of a markdown page.
func goSnippets(md string) []string {
	var out []string
	for _, part := range strings.Split(md, "```go\n")[1:] {
		body, _, _ := strings.Cut(part, "```")
		out = append(out, body)
	}
	return out
}

// normalizeCode drops indentation and blank lines, so that a snippet
// matches the same lines inside a function.
func normalizeCode(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
