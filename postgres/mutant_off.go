//go:build !lease_mutants

package postgres

// mutant selects a deliberately broken variant for `make mutants`; in
// normal builds it is the empty constant and the checks compile away.
const mutant = ""
