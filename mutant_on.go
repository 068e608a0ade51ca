//go:build lease_mutants

package lease

import "os"

// mutant selects a deliberately broken variant of decide, named by the
// LEASE_MUTANT environment variable. `make mutants` runs the model test
// against each one and fails unless the model catches it.
var mutant = os.Getenv("LEASE_MUTANT")
