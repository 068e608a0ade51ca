package lease

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeSnippetsAreExamples: every Go snippet in the README appears,
// line for line (indentation aside), in a file that `go test` compiles and
// runs: an example test or a program under examples/. A snippet edited in
// one place and not the other fails here.
func TestReadmeSnippetsAreExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	sources := []string{"example_test.go", "example_hold_test.go", "sqlite/example_test.go"}
	more, err := filepath.Glob("examples/*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var code strings.Builder
	for _, f := range append(sources, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		code.WriteString(normalizeCode(string(b)))
	}
	snippets := goSnippets(string(readme))
	if len(snippets) == 0 {
		t.Fatal("no Go snippets found in README.md: the test checks nothing")
	}
	for _, s := range snippets {
		if !strings.Contains(code.String(), normalizeCode(s)) {
			t.Errorf("README snippet is in no compiled example:\n%s", s)
		}
	}
}

// goSnippets returns the bodies of the README's ```go blocks.
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
