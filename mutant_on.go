//go:build lease_mutants

package lease

import "os"

// mutant selects a deliberately broken variant (see mutant.go), named by
// the LEASE_MUTANT environment variable. `make mutants` (.ci/mutants) runs
// each one's test selection and fails unless a test catches it.
var mutant = os.Getenv("LEASE_MUTANT")
