package main

import (
	"syscall"
	"unsafe"
)

// sysProcAttr puts COMMAND in its own process group, so that a lost lease
// stops its children too, and has the kernel kill it if lease dies: a
// COMMAND that outlived lease would run on after the lease expired. When
// lease runs in the foreground of a terminal on stdin, COMMAND's group
// takes the foreground over, so that it can read the terminal and gets
// the keyboard's signals itself.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Foreground: inForeground(0),
		Ctty:       0,
	}
}

// inForeground reports whether fd is a terminal whose foreground process
// group is ours.
func inForeground(fd uintptr) bool {
	var pgrp int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp)))
	return errno == 0 && int(pgrp) == syscall.Getpgrp()
}
