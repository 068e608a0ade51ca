//go:build !unix

package main

import "io"

// canSupervise: lease run needs process groups and signals, which this
// system does not have; lease holder and lease list work everywhere.
const canSupervise = false

func (sv supervisor) run(h holding, argv []string) int {
	return fail(sv.stderr, exitUsage, "run: supervising COMMAND needs a Unix system")
}

func cmdGuard(args []string, stderr io.Writer) int {
	return fail(stderr, exitUsage, "%s: needs a Unix system", guardCmd)
}
