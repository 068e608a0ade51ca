package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// parentDeathSignal is what the kernel sends the guard when lease run
// dies. The guard catches it (a SIGKILL could not be acted upon) and then
// kills COMMAND's tree before it exits itself.
const parentDeathSignal = syscall.SIGUSR1

// guardAttr starts the guard in a process group of its own, so that a
// signal to lease run's group (a shell's job control, timeout(1)) reaches
// lease run, which forwards it, and never kills the guard with it; and has
// the kernel tell the guard when lease run dies.
func guardAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: parentDeathSignal}
}

// commandAttr puts COMMAND in its own process group, so that it and its
// children can be signalled together, and has the kernel kill it if the
// guard dies. When lease runs in the foreground of a terminal on stdin,
// COMMAND's group takes the foreground over, so that it can read the
// terminal and gets the keyboard's signals itself.
func commandAttr(foreground bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Foreground: foreground,
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

// setSubreaper makes this process the child subreaper of its descendants:
// an orphan among them becomes its child, not init's, so that it can find
// and reap every process of COMMAND's tree. It reports whether that worked.
func setSubreaper() bool {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == nil
}

// descendants returns the living (not zombie) descendants of pid, from
// /proc.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := liveParent(p); ok {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// liveParent returns pid's parent from /proc/PID/stat, and false if pid
// is gone or a zombie.
func liveParent(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || string(f[0]) == "Z" || string(f[0]) == "X" {
		return 0, false
	}
	ppid, err := strconv.Atoi(string(f[1]))
	return ppid, err == nil
}

// lockFiles returns a copy of every descriptor this process has open on a
// file directly in dir: the file: store's lock files, whose flocks hold
// its leases. A flock belongs to the open file, and a copy keeps it held
// until every copy is closed or it is unlocked.
func lockFiles(dir string) ([]*os.File, error) {
	dir, err := filepath.Abs(dir)
	if err == nil {
		dir, err = filepath.EvalSymlinks(dir)
	}
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || filepath.Dir(target) != dir {
			continue
		}
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		files = append(files, os.NewFile(uintptr(dup), target))
	}
	return files, nil
}

// unread returns how many bytes the pipe fd holds that nobody has read
// yet (0 if it cannot tell).
func unread(fd int) int {
	n, err := unix.IoctlGetInt(fd, unix.TIOCINQ)
	if err != nil {
		return 0
	}
	return n
}
