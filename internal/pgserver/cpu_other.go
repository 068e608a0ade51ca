//go:build unix && !linux

package pgserver

import (
	"errors"
	"time"
)

// CPU is the CPU time the server's processes have used so far; only Linux
// (/proc) gives it here.
func (s *Server) CPU() (time.Duration, error) {
	return 0, errors.New("the server's CPU time is read from /proc, which only Linux has")
}
