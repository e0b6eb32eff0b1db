package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// What the tool reads of Linux's /proc: the CPU time of processes by name
// (utime + stime of /proc/PID/stat), the machine's CPU times (/proc/stat),
// the TCP connections opened from the tool's network namespace
// (/proc/net/snmp) and the load average. Where /proc is missing the figures
// are zero.

// clockTick is the unit of the CPU times of /proc: USER_HZ, 100 on every
// Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// parseStatCPU returns utime + stime from the text of /proc/PID/stat. The
// command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so fields are counted from the last ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	fields := strings.Fields(string(stat[end+1:]))
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	const utime, stime = 14 - 3, 15 - 3
	if len(fields) <= stime {
		return 0, fmt.Errorf("%d fields after the command name, want more than %d", len(fields), stime)
	}
	u, err := strconv.ParseInt(fields[utime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	s, err := strconv.ParseInt(fields[stime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return time.Duration(u+s) * clockTick, nil
}

// processCPU returns the CPU time used so far by every process whose
// /proc/PID/comm is one of names (summed per name), and by this process
// under "admissionbench". Processes that end while it reads are skipped.
func processCPU(proc string, names []string) map[string]time.Duration {
	out := map[string]time.Duration{}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	if stat, err := os.ReadFile(filepath.Join(proc, "self", "stat")); err == nil {
		if d, err := parseStatCPU(stat); err == nil {
			out[managedBy] = d
		}
	}
	if len(want) == 0 {
		return out
	}
	entries, err := os.ReadDir(proc)
	if err != nil {
		return out
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(proc, e.Name(), "comm"))
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(comm))
		if !want[name] {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(proc, e.Name(), "stat"))
		if err != nil {
			continue
		}
		if d, err := parseStatCPU(stat); err == nil {
			out[name] += d
		}
	}
	return out
}

// machineCPU is the first line of /proc/stat: the time all CPUs spent busy
// and in total, in clock ticks.
type machineCPU struct{ busy, total int64 }

// parseMachineCPU reads the "cpu" line of /proc/stat: idle and iowait are
// idle time, every other field busy time (guest time is already counted
// in user and nice, and is left out).
func parseMachineCPU(stat []byte) (machineCPU, error) {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) < 5 || fields[0] != "cpu" {
		return machineCPU{}, fmt.Errorf("the first line of /proc/stat is %q, want the cpu totals", line)
	}
	var m machineCPU
	for i, f := range fields[1:] {
		if i >= 8 { // guest, guest_nice
			break
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return machineCPU{}, fmt.Errorf("/proc/stat field %d: %w", i+1, err)
		}
		m.total += v
		if i != 3 && i != 4 { // idle, iowait
			m.busy += v
		}
	}
	return m, nil
}

// readMachineCPU returns the machine's CPU times, or zero.
func readMachineCPU(proc string) machineCPU {
	stat, err := os.ReadFile(filepath.Join(proc, "stat"))
	if err != nil {
		return machineCPU{}
	}
	m, err := parseMachineCPU(stat)
	if err != nil {
		return machineCPU{}
	}
	return m
}

// busyShare is the share of CPU time that was busy between a and b.
func busyShare(a, b machineCPU) float64 {
	if b.total <= a.total {
		return 0
	}
	return float64(b.busy-a.busy) / float64(b.total-a.total)
}

// loadAverage returns the first three fields of /proc/loadavg, or "unknown".
func loadAverage(proc string) string {
	b, err := os.ReadFile(filepath.Join(proc, "loadavg"))
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// parseTCPActiveOpens returns Tcp ActiveOpens of /proc/net/snmp: how many
// TCP connections were opened (connect) from the network namespace so far.
// The file holds, per protocol, a line of field names and a line of values.
func parseTCPActiveOpens(snmp []byte) (int64, error) {
	var names []string
	for _, line := range strings.Split(string(snmp), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = fields
			continue
		}
		for i, name := range names {
			if name == "ActiveOpens" && i < len(fields) {
				return strconv.ParseInt(fields[i], 10, 64)
			}
		}
		break
	}
	return 0, errors.New("no Tcp ActiveOpens in /proc/net/snmp")
}

// readTCPActiveOpens returns Tcp ActiveOpens, or -1.
func readTCPActiveOpens(proc string) int64 {
	b, err := os.ReadFile(filepath.Join(proc, "net", "snmp"))
	if err != nil {
		return -1
	}
	n, err := parseTCPActiveOpens(b)
	if err != nil {
		return -1
	}
	return n
}
