package scalebench

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
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

// residentBy is a process's resident memory (Rss of /proc/<pid>/smaps), in
// kB, by what its mappings hold. Linux says only which mappings are
// anonymous; what they hold is inferred from their path, permissions and
// flags, which is right for the policy server:
//
//   - "guest memory": wazero's linear memories, which internal/wasm maps
//     with MAP_NORESERVE (VmFlags "nr"), and the private mappings of memory
//     snapshots over their start (memfd, "rw-p");
//   - "snapshots": the shared read-only views of the snapshots (memfd,
//     "r--s");
//   - "compiled code": anonymous executable mappings, wazero's machine code;
//   - "binary": the mappings of the executable (its text and data);
//   - "other files": every other file (shared libraries);
//   - "anonymous": the rest: the Go heap (its arenas are no longer at a
//     fixed address), the Go runtime's own metadata, modernc SQLite's
//     allocations; the MemStats of /debug/pprof/heap?debug=1 split it.
type residentBy map[string]int64

// parseSmaps reads the text of /proc/<pid>/smaps of a process running exe.
func parseSmaps(smaps []byte, exe string) (residentBy, error) {
	out := residentBy{}
	type mapping struct {
		perms, path string
		rss         int64
		noReserve   bool
	}
	var cur *mapping
	flush := func() {
		if cur != nil {
			out[mappingKind(cur.perms, cur.path, cur.noReserve, exe)] += cur.rss
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			flush()
			cur = &mapping{perms: f[1]}
			if len(f) >= 6 {
				cur.path = strings.Join(f[5:], " ")
			}
		case len(f) == 3 && f[0] == "Rss:" && f[2] == "kB":
			if cur == nil {
				return nil, fmt.Errorf("Rss before any mapping")
			}
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("Rss: %w", err)
			}
			cur.rss = kb
		case len(f) > 0 && f[0] == "VmFlags:" && cur != nil:
			cur.noReserve = slices.Contains(f[1:], "nr")
		}
	}
	flush()
	if len(out) == 0 {
		return nil, fmt.Errorf("no mapping")
	}
	return out, sc.Err()
}

func mappingKind(perms, path string, noReserve bool, exe string) string {
	memfd := strings.HasPrefix(path, "/memfd:")
	switch {
	case path == exe:
		return "binary"
	case memfd && strings.Contains(perms, "s"):
		return "snapshots"
	case memfd, path == "" && noReserve:
		return "guest memory"
	case path != "" && !strings.HasPrefix(path, "["):
		return "other files"
	case strings.Contains(perms, "x"):
		return "compiled code"
	}
	return "anonymous"
}

// processResident returns the resident memory of process pid by kind.
func processResident(pid int) (residentBy, error) {
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, err
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return nil, err
	}
	r, err := parseSmaps(smaps, exe)
	if err != nil {
		return nil, fmt.Errorf("/proc/%d/smaps: %w", pid, err)
	}
	return r, nil
}

// String lists the kinds, largest first, in MiB.
func (r residentBy) String() string {
	kinds := make([]string, 0, len(r))
	total := int64(0)
	for k, kb := range r {
		kinds = append(kinds, k)
		total += kb
	}
	slices.SortFunc(kinds, func(a, b string) int { return int(r[b] - r[a]) })
	parts := []string{fmt.Sprintf("total %.1f MiB", float64(total)/1024)}
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, float64(r[k])/1024))
	}
	return strings.Join(parts, ", ")
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

// peakNow samples at once and returns the highest RSS sampled since the
// last resetPeak, without starting a new phase.
func (s *memorySampler) peakNow() int64 {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
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
	if p := s.peakNow(); p < m.RSS {
		t.Errorf("peak %d below the RSS sampled %d", p, m.RSS)
	}
	if p := s.resetPeak(); p < m.RSS {
		t.Errorf("peak %d below the RSS sampled %d", p, m.RSS)
	}
	r, err := processResident(pid)
	if err != nil {
		t.Fatalf("processResident: %v", err)
	}
	if r["binary"] <= 0 || r["anonymous"] <= 0 {
		t.Errorf("resident by kind = %v, want some binary and some anonymous memory", r)
	}
}

func TestParseSmaps(t *testing.T) {
	const exe = "/usr/local/bin/policy-server"
	smaps := `00400000-01c00000 r-xp 00000000 08:01 123 /usr/local/bin/policy-server
Size:              24576 kB
Rss:               20000 kB
Pss:               20000 kB
VmFlags: rd ex mr mw me
01c00000-02000000 rw-p 01800000 08:01 123 /usr/local/bin/policy-server
Rss:                 300 kB
a7b21c00000-a7b25400000 rw-p 00000000 00:00 0 
Rss:               40000 kB
VmFlags: rd wr mr mw me ac
7f0000000000-7f0000400000 rw-p 00000000 00:01 77 /memfd:warden-snapshot (deleted)
Rss:                2000 kB
VmFlags: rd wr mr mw me nr
7f0000400000-7f0010000000 rw-p 00000000 00:00 0 
Rss:               50000 kB
VmFlags: rd wr mr mw me nr
7f0100000000-7f0100400000 r-xp 00000000 00:00 0 
Rss:                4000 kB
7f0100400000-7f0100800000 r--s 00000000 00:01 77 /memfd:warden-snapshot (deleted)
Rss:                3000 kB
7f0100800000-7f0100900000 r-xp 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                 900 kB
7f0100900000-7f0100a00000 rw-p 00000000 00:00 0 
Rss:                 100 kB
7ffc00000000-7ffc00100000 rw-p 00000000 00:00 0 [stack]
Rss:                  20 kB
`
	got, err := parseSmaps([]byte(smaps), exe)
	if err != nil {
		t.Fatal(err)
	}
	want := residentBy{"binary": 20300, "anonymous": 40120, "guest memory": 52000, "compiled code": 4000,
		"snapshots": 3000, "other files": 900}
	if !maps.Equal(got, want) {
		t.Errorf("parseSmaps = %v, want %v", got, want)
	}
	if s := got.String(); !strings.HasPrefix(s, "total 117.5 MiB, guest memory 50.8, anonymous 39.2, binary 19.8") {
		t.Errorf("String() = %q", s)
	}
	if _, err := parseSmaps([]byte("Rss: 4 kB\n"), exe); err == nil {
		t.Error("an Rss line before any mapping was accepted")
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
