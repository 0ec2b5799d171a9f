//go:build unix

package bench

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// processCPU returns this process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processRSSMB returns this process's resident set size in MiB (Linux
// /proc), or 0 when unknown.
func processRSSMB() float64 { return pidRSSMB(os.Getpid()) }

// pidRSSMB reads VmRSS of a process from /proc; 0 when unknown.
func pidRSSMB(pid int) float64 { return pidStatusMB(pid, "VmRSS:") }

// pidStatusMB reads a kB field of /proc/<pid>/status (VmRSS:, RssAnon:,
// RssFile:) in MiB; 0 when unknown.
func pidStatusMB(pid int, field string) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseFloat(f[0], 64)
				if err == nil {
					return kb / 1024
				}
			}
		}
	}
	return 0
}

// pidCPU reads a process's user+system CPU time from /proc/<pid>/stat; 0
// when unknown.
func pidCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the ")" that ends the command name: state is field 3,
	// utime 14 and stime 15 (1-based over the whole line).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clkTck
}

// childProcAttr makes benchmark children die with the benchmark where the
// platform allows it.
func childProcAttr() *syscall.SysProcAttr { return deathSignalAttr() }
