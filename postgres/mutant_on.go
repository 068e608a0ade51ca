//go:build lease_mutants

package postgres

import "os"

// mutant selects a deliberately broken variant (see mutant.go), named by
// the LEASE_MUTANT environment variable.
var mutant = os.Getenv("LEASE_MUTANT")
