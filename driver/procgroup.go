package driver

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killGroup kills a process group, repeating until it is empty: members of a
// fork bomb keep creating new members while the first signal is delivered.
func killGroup(pgid int) {
	for range 100 {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killGroupExcept kills every member of a process group but keep (the
// group's leader, the Python kernel), repeating until none is left: what
// an interrupted command started, a fork bomb included, goes with it, as
// with a terminal's Ctrl-C, while the kernel and its globals stay.
func killGroupExcept(pgid, keep int) {
	for range 100 {
		members := groupMembers(pgid)
		killed := 0
		for _, pid := range members {
			if pid != keep && syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		if killed == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// groupMembers lists the processes in a process group, from /proc.
func groupMembers(pgid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses and may
		// contain spaces: state, ppid, pgrp, ...
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 2 {
			if g, err := strconv.Atoi(fields[2]); err == nil && g == pgid {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
