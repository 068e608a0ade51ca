//go:build unix && !linux

package main

import "syscall"

// sysProcAttr puts COMMAND in its own process group, so that a lost lease
// stops its children too. (Only Linux can also kill COMMAND when lease
// dies.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
