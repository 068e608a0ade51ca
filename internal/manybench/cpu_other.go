//go:build !unix

package manybench

import "time"

// processCPU is 0: this system gives no process CPU time here.
func processCPU() time.Duration { return 0 }
