package main

import (
	"syscall"
	"unsafe"
)

// sysProcAttr puts COMMAND in its own process group, so that a lost lease
// stops its children too, and has the kernel kill it if lease dies: a
// COMMAND that outlived lease would run on after the lease expired. When
// stdin is a terminal, COMMAND's group takes the terminal's foreground,
// so that it can read it and gets the keyboard's signals itself.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Foreground: isTerminal(0),
		Ctty:       0,
	}
}

// isTerminal reports whether fd is a terminal.
func isTerminal(fd uintptr) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
