package leaseotel_test

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasekit/lease/internal/testkit"
)

// TestProfilehostServesMetrics builds examples/profilehost, its own module
// with OpenTelemetry's Prometheus exporter, against this checkout, runs it,
// and scrapes its /metrics: the Prometheus path docs/observability.md documents.
// The build downloads the exporter through the Go module proxy.
func TestProfilehostServesMetrics(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := buildProfilehost(t, root, dir)

	cmd, url, lines := startProfilehost(t, bin, "file:"+filepath.Join(dir, "leases"))

	body := scrape(t, url)
	for _, want := range []string{
		`lease_held{lease_store_kind="local",`,
		`lease_acquisitions_total{lease_store_kind="local",lease_takeover="false",`,
		`lease_storage_duration_seconds_count{lease_storage_operation="lock",lease_store_kind="local",`,
	} {
		if v, ok := sample(body, want); !ok || (v != "3" && !strings.HasPrefix(want, "lease_storage")) {
			t.Errorf("/metrics: %s… = %q (found: %v); want 3", want, v, ok)
		}
	}
	if strings.Contains(body, "lease_key") || strings.Contains(body, "profile:4") {
		t.Error("/metrics names a key")
	}

	stopProfilehost(t, cmd, lines)
}

// TestProfilehostOpensSQLite: the example imports the drivers it names,
// so "-store sqlite:…" opens an SQLite store, and it brings its profiles
// up with HoldEach: one batched write (put_many) holds all three, where
// one Hold after another would write each key alone.
func TestProfilehostOpensSQLite(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := buildProfilehost(t, root, dir)
	cmd, url, lines := startProfilehost(t, bin, "sqlite:"+filepath.Join(dir, "leases.db"))

	body := scrape(t, url)
	if v, ok := sample(body, `lease_held{lease_store_kind="sqlite",`); v != "3" {
		t.Errorf("/metrics: lease_held on sqlite = %q (found: %v); want 3", v, ok)
	}
	// Renewals (every 10 s at the default TTL) may add batched writes of
	// their own, so the counts are bounds. Confirm writes one key alone.
	batched := `lease_storage_duration_seconds_count{lease_storage_operation="put_many",lease_store_kind="sqlite",`
	if v, ok := sample(body, batched); !ok || v == "0" {
		t.Errorf("/metrics: put_many calls = %q (found: %v); want at least 1: the profiles are held by one HoldEach", v, ok)
	}
	single := `lease_storage_duration_seconds_count{lease_storage_operation="put",lease_store_kind="sqlite",`
	if v, _ := sample(body, single); v != "" && v != "1" && v != "2" {
		t.Errorf("/metrics: %s single puts; want Confirm's alone: HoldEach writes the keys in batches", v)
	}
	stopProfilehost(t, cmd, lines)
}

// startProfilehost runs bin on store and returns it with the URL of its
// metrics and the rest of its output, line by line.
func startProfilehost(t *testing.T, bin, store string) (*exec.Cmd, string, <-chan string) {
	t.Helper()
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0", "-store", store)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	patience := testkit.Patient(t) // as long as the test may run: a loaded machine starts it slowly
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("profilehost -store %s exited before serving metrics: %v", store, cmd.Wait())
			}
			if url, found := strings.CutPrefix(line, "metrics at "); found {
				return cmd, url, lines
			}
		case <-patience.Done():
			t.Fatal("profilehost never served metrics")
		}
	}
}

// stopProfilehost interrupts cmd and checks that it released its leases
// and exited cleanly.
func stopProfilehost(t *testing.T, cmd *exec.Cmd, lines <-chan string) {
	t.Helper()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	var rest strings.Builder
	for line := range lines {
		rest.WriteString(line + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("profilehost after an interrupt: %v\n%s", err, rest.String())
	}
	if !strings.Contains(rest.String(), "released: true") {
		t.Errorf("profilehost did not release at shutdown:\n%s", rest.String())
	}
}

// buildProfilehost builds the example from a copy whose replace directive
// names root, so that the checkout is left as it was.
func buildProfilehost(t *testing.T, root, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"main.go", "go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(root, "examples", "profilehost", name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "go.mod" {
			b = []byte(strings.ReplaceAll(string(b), "=> ../..", "=> "+root))
		}
		if err := os.WriteFile(filepath.Join(src, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "profilehost")
	build := exec.Command("go", "build", "-mod=mod", "-o", bin, ".")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building examples/profilehost: %v\n%s\n(it downloads OpenTelemetry's Prometheus exporter: "+
			"the Go module proxy must be reachable, see `go env GOPROXY`)", err, out)
	}
	return bin
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}

// sample returns the value of the first sample whose line begins with
// prefix.
func sample(body, prefix string) (string, bool) {
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, prefix) {
			f := strings.Fields(line)
			return f[len(f)-1], true
		}
	}
	return "", false
}
