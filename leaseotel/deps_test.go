package leaseotel_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDependencies: the adapter links nothing but the lease package, the
// OpenTelemetry API packages it imports, and what those link: never the
// SDK or an exporter, which stay the program's choice.
func TestDependencies(t *testing.T) {
	api := []string{
		"go.opentelemetry.io/otel/attribute",
		"go.opentelemetry.io/otel/codes",
		"go.opentelemetry.io/otel/metric",
		"go.opentelemetry.io/otel/trace",
	}
	ours := deps(t, "github.com/leasekit/lease/leaseotel")
	allowed := deps(t, append([]string{"github.com/leasekit/lease"}, api...)...)
	for _, p := range ours {
		if strings.Contains(p, "go.opentelemetry.io/otel/sdk") || strings.Contains(p, "/exporters/") {
			t.Errorf("leaseotel links %s", p)
		}
		if p != "github.com/leasekit/lease/leaseotel" && !slices.Contains(allowed, p) {
			t.Errorf("leaseotel links %s, which neither the lease package nor the OpenTelemetry API links", p)
		}
	}
}

// deps lists the packages outside the standard library that pkgs link,
// tests excluded.
func deps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, pkgs...)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}
