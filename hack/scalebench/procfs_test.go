package scalebench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// What the benchmark reads of a process from Linux's /proc: its CPU time
// (utime + stime of /proc/<pid>/stat) and its memory (VmRSS and VmHWM of
// /proc/<pid>/status). These helpers compile in every tier, so that their
// tests run with go test ./...; only the benchmark itself needs the cluster
// and scale tags.

// clockTicks is the unit of the CPU times of /proc/<pid>/stat
// (sysconf(_SC_CLK_TCK)): 100 on every Linux this runs on, asked of getconf
// once in case it is not.
var clockTicks = sync.OnceValue(func() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return 100
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || n <= 0 {
		return 100
	}
	return n
})

// parseCPUTicks returns utime + stime, in clock ticks, from the text of
// /proc/<pid>/stat. The command name (field 2) is in parentheses and may
// hold spaces and parentheses itself, so fields are counted from the last
// ')'.
func parseCPUTicks(stat []byte) (int64, error) {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	// After ") " come field 3 (state) onwards; utime and stime are fields
	// 14 and 15.
	fields := strings.Fields(string(stat[end+1:]))
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
	return u + s, nil
}

// processCPU returns the CPU time (user and system) that process pid has
// used so far, at the resolution of a clock tick (10 ms).
func processCPU(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	ticks, err := parseCPUTicks(stat)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(ticks) * time.Second / time.Duration(clockTicks()), nil
}

// memory is what /proc/<pid>/status says of a process's memory, in bytes.
type memory struct {
	RSS int64 // VmRSS: resident now
	HWM int64 // VmHWM: the most it has been resident ("high water mark")
}

// parseMemory reads VmRSS and VmHWM from the text of /proc/<pid>/status.
func parseMemory(status []byte) (memory, error) {
	var m memory
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(value)
		if len(f) != 2 || f[1] != "kB" {
			return m, fmt.Errorf("%s: %q, want a number of kB", key, value)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("%s: %w", key, err)
		}
		if key == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.HWM = kb << 10
		}
		found++
	}
	if found != 2 {
		return m, fmt.Errorf("no VmRSS or VmHWM (a zombie process has neither)")
	}
	return m, nil
}

// processMemory returns the memory figures of process pid.
func processMemory(pid int) (memory, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, err
	}
	m, err := parseMemory(status)
	if err != nil {
		return m, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	return m, nil
}

// memorySampler reads a process's memory at a fixed interval, so that the
// peak of a phase (the initial list, a load run) is seen even after the
// memory was returned; VmHWM gives the peak of the whole life only.
// Its methods are safe for concurrent use.
type memorySampler struct {
	pid  int
	stop chan struct{}
	done chan struct{}

	mu   sync.Mutex
	last memory
	peak int64 // the highest RSS sampled since the last resetPeak
}

// sampleMemory starts sampling process pid every interval until stop.
func sampleMemory(pid int, interval time.Duration) *memorySampler {
	s := &memorySampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	s.sample()
	go func() {
		defer close(s.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *memorySampler) sample() {
	m, err := processMemory(s.pid)
	if err != nil {
		return // the process is gone: keep the last figures
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = m
	s.peak = max(s.peak, m.RSS)
}

// now samples at once and returns the memory figures.
func (s *memorySampler) now() memory {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// resetPeak returns the highest RSS sampled since the previous call and
// starts a new phase.
func (s *memorySampler) resetPeak() int64 {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peak
	s.peak = s.last.RSS
	return p
}

// close stops the sampling.
func (s *memorySampler) close() {
	close(s.stop)
	<-s.done
}

// dbSize is the size of the reflector store's files: the SQLite database and
// its write-ahead log (the -shm index is not data and is left out).
type dbSize struct {
	DB, WAL int64
}

// reflectorDBSize adds up the files named reflectors.db and reflectors.db-wal
// under dir, at any depth: the store is either where --reflector-db-path
// put it or in the warden-reflectors-* directory the policy server makes in
// its TMPDIR.
func reflectorDBSize(dir string) dbSize {
	var s dbSize
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		switch d.Name() {
		case "reflectors.db":
			s.DB += info.Size()
		case "reflectors.db-wal":
			s.WAL += info.Size()
		}
		return nil
	})
	return s
}

// summarizeProblems returns, of the log lines at level WARN or ERROR (slog
// text) and the lines of Go panics and fatal errors, the first of each kind
// (level and message), with how many there were, at most limit kinds.
func summarizeProblems(lines []string, limit int) []string {
	var order []string
	first := map[string]string{}
	count := map[string]int{}
	for _, line := range lines {
		var key string
		switch {
		case strings.HasPrefix(line, "panic:"), strings.HasPrefix(line, "fatal error:"):
			key = line
		case strings.Contains(line, " level=WARN ") || strings.Contains(line, " level=ERROR "):
			key = line[strings.Index(line, " level=")+1:]
			if i := strings.Index(key, "msg="); i >= 0 {
				if end := strings.Index(key[i+5:], `"`); key[i+4:i+5] == `"` && end >= 0 {
					key = key[:i+5+end+1]
				} else if end := strings.IndexByte(key[i:], ' '); end >= 0 {
					key = key[:i+end]
				}
			}
		default:
			continue
		}
		if count[key] == 0 {
			order = append(order, key)
			first[key] = line
		}
		count[key]++
	}
	var out []string
	for _, key := range order[:min(len(order), limit)] {
		line := first[key]
		if len(line) > 400 {
			line = line[:400] + "..."
		}
		out = append(out, fmt.Sprintf("%d× `%s`", count[key], line))
	}
	return out
}

func TestSummarizeProblems(t *testing.T) {
	lines := []string{
		`time=2026-01-01T00:00:00Z level=INFO msg="policy loaded" policy_id=a`,
		`time=2026-01-01T00:00:01Z level=ERROR msg="policy evaluation exceeded its time limit" policy_id=a request_uid=1`,
		`time=2026-01-01T00:00:02Z level=WARN msg="not run" policy_id=a error="context deadline exceeded"`,
		`time=2026-01-01T00:00:03Z level=ERROR msg="policy evaluation exceeded its time limit" policy_id=a request_uid=2`,
		`time=2026-01-01T00:00:04Z level=WARN msg=plain policy_id=a`,
		`panic: boom`,
	}
	got := summarizeProblems(lines, 3)
	want := []string{
		"2× `" + lines[1] + "`",
		"1× `" + lines[2] + "`",
		"1× `" + lines[4] + "`",
	}
	if !slices.Equal(got, want) {
		t.Errorf("summarizeProblems() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := summarizeProblems(lines, 10); len(got) != 4 || got[3] != "1× `panic: boom`" {
		t.Errorf("summarizeProblems(10) = %q, want the panic last", got)
	}
}

func TestParseCPUTicks(t *testing.T) {
	tests := []struct {
		name    string
		stat    string
		want    int64
		wantErr bool
	}{
		{name: "plain", stat: "16667 (cat) R 16665 16665 12242 0 -1 4194304 99 0 0 0 7 3 0 0 20 0 1 0 2253510 3133440 358", want: 10},
		{name: "spaces and parentheses in the name", stat: "42 (a (b) c) S 1 1 1 0 -1 0 0 0 0 0 150 50 0 0 20 0 1 0 0 0 0", want: 200},
		{name: "no name", stat: "42 S 1", wantErr: true},
		{name: "cut short", stat: "42 (x) S 1 1 1 0", wantErr: true},
		{name: "not a number", stat: "42 (x) S 1 1 1 0 -1 0 0 0 0 0 u 5 0 0", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCPUTicks([]byte(tt.stat))
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseCPUTicks() error = %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("parseCPUTicks() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestParseMemory(t *testing.T) {
	tests := []struct {
		name    string
		status  string
		want    memory
		wantErr bool
	}{
		{name: "both", status: "Name:\tcat\nVmPeak:\t  9000 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1948 kB\nThreads:\t1\n",
			want: memory{RSS: 1948 << 10, HWM: 2048 << 10}},
		{name: "zombie", status: "Name:\tx\nState:\tZ (zombie)\n", wantErr: true},
		{name: "bad unit", status: "VmHWM:\t1 MB\nVmRSS:\t1 kB\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMemory([]byte(tt.status))
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseMemory() error = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Errorf("parseMemory() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestOwnProcess reads this test process's own figures, as the benchmark
// reads the servers'.
func TestOwnProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	pid := os.Getpid()
	if _, err := processCPU(pid); err != nil {
		t.Errorf("processCPU: %v", err)
	}
	s := sampleMemory(pid, time.Millisecond)
	defer s.close()
	m := s.now()
	if m.RSS <= 0 || m.HWM < m.RSS {
		t.Errorf("memory = %+v, want 0 < RSS <= HWM", m)
	}
	if p := s.resetPeak(); p < m.RSS {
		t.Errorf("peak %d below the RSS sampled %d", p, m.RSS)
	}
}

func TestReflectorDBSize(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "tmp", "warden-reflectors-1")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int{"reflectors.db": 4096, "reflectors.db-wal": 1000, "reflectors.db-shm": 32768, "policies.yml": 10} {
		if err := os.WriteFile(filepath.Join(sub, name), make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := reflectorDBSize(dir), (dbSize{DB: 4096, WAL: 1000}); got != want {
		t.Errorf("reflectorDBSize() = %+v, want %+v", got, want)
	}
}
