//go:build unix

package lease

import (
	"syscall"
	"time"
)

// getrusage, for the many-keys benchmarks.
func init() {
	processCPU = rusageCPU
}

// rusageCPU is this process's user and system CPU time.
func rusageCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
