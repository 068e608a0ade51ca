package depcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The database libraries, by the import path prefixes of their packages.
var libraries = map[string]string{
	"sqlite":   "modernc.org/",
	"mongodb":  "go.mongodb.org/",
	"postgres": "github.com/jackc/",
}

// maxFileOnlySize bounds the binary of a program on the local store alone
// (about 4.5 MiB with Go 1.26): the package's own code grows by kilobytes,
// while linking a database library would add megabytes.
const maxFileOnlySize = 5 << 20 // 5 MiB

// goCmd is the go command (go test puts its own first in PATH).
func goCmd(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the dependency check needs the go command: %v", err)
	}
	return bin
}

// deps lists the packages that pkg links, itself included; with flags
// (-test) as go list takes them.
func deps(t *testing.T, pkg string, flags ...string) []string {
	t.Helper()
	args := append(append([]string{"list", "-deps"}, flags...), pkg)
	out, err := exec.Command(goCmd(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
	return strings.Fields(string(out))
}

// linked returns the database libraries that pkg links, by driver name,
// with one package of each as evidence; flags are deps'.
func linked(t *testing.T, pkg string, flags ...string) map[string]string {
	t.Helper()
	found := map[string]string{}
	for _, p := range deps(t, pkg, flags...) {
		for driver, prefix := range libraries {
			if strings.HasPrefix(p, prefix) && found[driver] == "" {
				found[driver] = p
			}
		}
	}
	return found
}

// TestCoreLinksNoDatabaseLibrary: package lease, and a program that uses
// only its built-in stores, link no database library; the program stays
// under maxFileOnlySize.
func TestCoreLinksNoDatabaseLibrary(t *testing.T) {
	for _, pkg := range []string{"github.com/leasekit/lease", "./testdata/fileonly"} {
		if found := linked(t, pkg); len(found) > 0 {
			t.Errorf("%s links database libraries: %v; package lease must import none (the drivers live in their own packages)", pkg, found)
		}
	}
	bin := filepath.Join(t.TempDir(), "fileonly")
	if out, err := exec.Command(goCmd(t), "build", "-o", bin, "./testdata/fileonly").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > maxFileOnlySize {
		t.Errorf("a file:-only program is %d bytes; want at most %d", fi.Size(), maxFileOnlySize)
	}
	t.Logf("file:-only program: %d bytes", fi.Size())
}

// TestDriverLinksOnlyItsLibrary: a program that imports one driver
// package links that driver's database library and no other's.
func TestDriverLinksOnlyItsLibrary(t *testing.T) {
	for driver, prog := range map[string]string{
		"sqlite":   "./testdata/sqliteonly",
		"mongodb":  "./testdata/mongoonly",
		"postgres": "./testdata/postgresonly",
	} {
		found := linked(t, prog)
		if found[driver] == "" {
			t.Errorf("%s does not link %s's library (%s...): is the program still what it says?", prog, driver, libraries[driver])
		}
		for other, evidence := range found {
			if other != driver {
				t.Errorf("%s, importing only package %s, links %s's library: %s", prog, driver, other, evidence)
			}
		}
	}
}
