//go:build lease_mutants

package localfs

import "os"

// mutant selects a deliberately broken variant (see mutant.go), named by
// the LEASE_MUTANT environment variable, as package lease's does.
var mutant = os.Getenv("LEASE_MUTANT")
