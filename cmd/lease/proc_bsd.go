//go:build unix && !linux

package main

import (
	"os"
	"syscall"
)

// parentDeathSignal is never sent here: the guard learns of lease run's
// death from its control pipe only.
const parentDeathSignal = syscall.SIGUSR1

// guardAttr starts the guard in a process group of its own; see the Linux
// version.
func guardAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// commandAttr puts COMMAND in its own process group. (Only Linux can also
// kill COMMAND when the guard dies.)
func commandAttr(foreground bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

func inForeground(fd uintptr) bool { return false }

// setSubreaper reports that this system has no child subreaper: orphans
// of COMMAND's tree go to init, out of the guard's sight.
func setSubreaper() bool { return false }

func descendants(pid int) []int { return nil }

// lockFiles finds no descriptors: there is no portable way to list them,
// so here the file: store's flocks end with lease run itself.
func lockFiles(dir string) ([]*os.File, error) { return nil, nil }

// unread would return how many bytes the pipe fd holds unread; these
// systems' FIONREAD is not in golang.org/x/sys, so it says 0, and the
// guard relies on the orders it has already read.
func unread(fd int) int { return 0 }
