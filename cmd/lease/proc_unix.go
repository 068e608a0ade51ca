//go:build unix

package main

import (
	"os"
	"syscall"
)

// signalChild signals COMMAND's process group (sysProcAttr gives it its
// own), so that COMMAND's children get the signal too.
func signalChild(p *os.Process, sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok || syscall.Kill(-p.Pid, s) != nil {
		_ = p.Signal(sig)
	}
}
