//go:build !unix

package main

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalChild forwards sig where the platform can; SIGTERM and SIGKILL
// become Kill.
func signalChild(p *os.Process, sig os.Signal) {
	if sig == syscall.SIGTERM || sig == syscall.SIGKILL {
		_ = p.Kill()
		return
	}
	_ = p.Signal(sig)
}
