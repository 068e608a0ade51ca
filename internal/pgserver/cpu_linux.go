//go:build linux

package pgserver

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// clockTick is the unit of /proc/<pid>/stat's CPU times: USER_HZ, which
// Linux fixes at 100 for every architecture's user space.
const clockTick = 10 * time.Millisecond

// CPU is the CPU time, user and system, that the server's processes have
// used so far: the postmaster's own, that of its children that exited
// (its cutime and cstime: backends of closed connections), and that of
// each live child (backends, checkpointer, WAL writer, autovacuum). It
// reads /proc; the difference of two readings is the server's CPU in
// between, to a clock tick per process.
func (s *Server) CPU() (time.Duration, error) {
	own, err := procTicks(s.pid, true)
	if err != nil {
		return 0, fmt.Errorf("the postmaster %d: %w", s.pid, err)
	}
	ticks := own
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil || pid == s.pid {
			continue
		}
		if ppid, t, err := procStat(pid); err == nil && ppid == s.pid {
			ticks += t
		}
	}
	return time.Duration(ticks) * clockTick, nil
}

// procTicks is pid's utime+stime, and with children its exited
// children's cutime+cstime too, in clock ticks.
func procTicks(pid int, children bool) (int64, error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	last := 15 // stime; cutime and cstime are 16 and 17 (1-based)
	if children {
		last = 17
	}
	var sum int64
	for i := 14; i <= last; i++ {
		n, err := strconv.ParseInt(fields[i-1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat field %d: %w", pid, i, err)
		}
		sum += n
	}
	return sum, nil
}

// procStat is pid's parent and its own utime+stime in clock ticks.
func procStat(pid int) (ppid int, ticks int64, err error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, 0, err
	}
	if ppid, err = strconv.Atoi(fields[3]); err != nil {
		return 0, 0, err
	}
	ticks, err = procTicks(pid, false)
	return ppid, ticks, err
}

// statFields splits /proc/<pid>/stat into its fields, numbered from 1 as
// proc(5) numbers them (fields[0] is the pid, fields[1] the command), the
// command kept whole whatever spaces or parentheses it holds.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	end := bytes.LastIndexByte(b, ')')
	open := bytes.IndexByte(b, '(')
	if open < 0 || end < open {
		return nil, fmt.Errorf("/proc/%d/stat: no command in %q", pid, b)
	}
	rest := bytes.Fields(b[end+1:])
	fields := append([]string{string(bytes.TrimSpace(b[:open])), string(b[open : end+1])}, make([]string, 0, len(rest))...)
	for _, f := range rest {
		fields = append(fields, string(f))
	}
	if len(fields) < 17 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields, want at least 17", pid, len(fields))
	}
	return fields, nil
}
