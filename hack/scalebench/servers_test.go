//go:build cluster && scale

package scalebench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/testkit"
)

// A scenario runs the policy server with policies and loads each target.
type scenario struct {
	name     string
	policies string // policies.yml; its modules are file:// URLs
	targets  []target
	// first is the target whose first answer without error ends the
	// start-up (default: the first target); it should be one that checks it
	// sees the whole population.
	first string
}

// A target is what one load run POSTs to.
type target struct {
	name    string // the policy id, or the informer's list
	path    string // the URL path (default: /validate/<name>)
	body    string // file of the AdmissionReview
	compare string // the informer target measured against it, if any
	rates   bool   // also open-loop runs at each of SCALE_RATES
}

func (tg target) urlPath() string {
	if tg.path != "" {
		return tg.path
	}
	return "/validate/" + tg.name
}

// wardenAllowed is what a successful answer of the policy server holds.
const wardenAllowed = `"allowed":true`

// runWarden runs the scenario against the policy server.
func (b *bench) runWarden(t *testing.T, sc scenario) serverResult {
	t.Helper()
	res := serverResult{Scenario: sc.name, Server: "warden"}
	dir := filepath.Join(b.work, sc.name)
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	policies := filepath.Join(dir, "policies.yml")
	if err := os.WriteFile(policies, []byte(sc.policies), 0o600); err != nil {
		t.Fatal(err)
	}
	port, readiness := testkit.FreePort(t), testkit.FreePort(t)
	args := []string{
		"--addr", "127.0.0.1", "--port", strconv.Itoa(port), "--readiness-probe-port", strconv.Itoa(readiness),
		"--policies", policies, "--policies-download-dir", dir, "--log-level", "info", "--log-no-color",
	}
	if strings.Contains(b.serverFlags, "--reflector-db-path") {
		args = append(args, "--reflector-db-path", filepath.Join(dir, "reflectors.db"))
	}
	if b.cfg.profileDir != "" {
		args = append(args, "--enable-pprof")
	}
	args = append(args, b.cfg.serverArgs...)
	env := append(environWithout("KUBECONFIG", "TMPDIR"), "KUBECONFIG="+b.kubeconfig, "TMPDIR="+tmp)

	logf("%s: starting the policy server", sc.name)
	p := startProcess(t, "policy-server", b.logPath(t, dir, sc.name+"-policy-server.log"), env, b.policyServer, args...)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	first := sc.targets[0]
	for _, tg := range sc.targets {
		if tg.name == sc.first {
			first = tg
		}
	}
	b.startup(t, p, &res, fmt.Sprintf("http://127.0.0.1:%d/readiness", readiness), base, first, wardenAllowed)
	res.DBReady = reflectorDBSize(dir)
	if b.cfg.profileDir != "" && res.FirstAnswer > 0 {
		b.saveProfile(base, "heap", sc.name+"-heap-idle.pprof")
		b.saveProfile(base, "heap?debug=1", sc.name+"-heap-idle.txt")
	}
	p.logResident("idle")
	b.loads(t, p, &res, base, sc.targets, wardenAllowed)
	res.End = p.mem.now()
	p.logResident("end")
	res.DBEnd = reflectorDBSize(dir)
	p.stop()
	res.Problems = append(res.Problems, p.problems()...)
	return res
}

// runInformer runs the informer baseline of resource (namespaces or pods)
// and loads each target.
func (b *bench) runInformer(t *testing.T, scenario, resource string, targets []target) serverResult {
	t.Helper()
	res := serverResult{Scenario: scenario, Server: "informer"}
	dir := filepath.Join(b.work, scenario)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	port := testkit.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	env := append(environWithout("KUBECONFIG", informerEnv, informerAddrEnv),
		"KUBECONFIG="+b.kubeconfig, informerEnv+"="+resource, informerAddrEnv+"="+addr)
	logf("%s: starting the informer baseline", scenario)
	p := startProcess(t, "informer", b.logPath(t, dir, scenario+"-informer.log"), env, b.self, "-test.run=^$")
	base := "http://" + addr
	b.startup(t, p, &res, base+"/readiness", base, targets[0], `"items":[`)
	b.loads(t, p, &res, base, targets, `"items":[`)
	res.End = p.mem.now()
	p.stop()
	res.Problems = append(res.Problems, p.problems()...)
	return res
}

// logPath returns where the log of a server goes: name in SCALE_LOGS when
// set (kept after the run), else in dir.
func (b *bench) logPath(t *testing.T, dir, name string) string {
	t.Helper()
	if b.cfg.logDir == "" {
		return filepath.Join(dir, name)
	}
	if err := os.MkdirAll(b.cfg.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(b.cfg.logDir, name)
}

// startup waits until the server's readiness endpoint answers 200 and until
// the first target answers a POST with expect in its body, and records when,
// with the CPU and the peak RSS until then and the RSS a second later.
func (b *bench) startup(t *testing.T, p *process, res *serverResult, readinessURL, base string, first target, expect string) {
	t.Helper()
	body, err := os.ReadFile(first.body)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	ready := make(chan time.Duration, 1)
	readyPeak := make(chan int64, 1)
	go func() {
		ready <- p.waitFor(b.ctx, 20*time.Millisecond, func() (bool, bool) {
			resp, err := client.Get(readinessURL)
			if err != nil {
				return false, false
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, false
		})
		readyPeak <- p.mem.peakNow()
		p.logResident("ready")
	}()
	// Until the store has the whole population, the list policies reject
	// with "want at least": that is waited for. Any other wrong answer is
	// given 30 seconds to go away.
	var lastAnswer string
	var wrongSince time.Time
	res.FirstAnswer = p.waitFor(b.ctx, 100*time.Millisecond, func() (bool, bool) {
		resp, err := client.Post(base+first.urlPath(), "application/json", bytes.NewReader(body))
		if err != nil {
			lastAnswer = err.Error()
			return false, false
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		lastAnswer = fmt.Sprintf("status %d: %s", resp.StatusCode, truncate(out, 300))
		if resp.StatusCode == http.StatusOK && bytes.Contains(out, []byte(expect)) {
			return true, false
		}
		if bytes.Contains(out, []byte("want at least")) || wrongSince.IsZero() {
			wrongSince = time.Now()
		}
		return false, time.Since(wrongSince) > 30*time.Second
	})
	res.StartupCPU = p.cpu()
	res.StartupPeakRSS = p.mem.resetPeak()
	res.Ready, res.ReadyPeakRSS = <-ready, <-readyPeak
	if res.FirstAnswer <= 0 || res.Ready <= 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("never answered: ready after %v, first answer after %v; last answer: %s; %s",
			res.Ready, res.FirstAnswer, lastAnswer, p.exitState()))
		t.Errorf("%s %s: %s", res.Scenario, res.Server, res.Problems[len(res.Problems)-1])
		return
	}
	logf("%s: %s ready after %s, first answer after %s", res.Scenario, res.Server, secs(res.Ready), secs(res.FirstAnswer))
	time.Sleep(time.Second)
	res.IdleRSS = p.mem.now().RSS
}

// loads runs the load tool against each target, with each number of
// clients, then each rate when the target asks for them.
func (b *bench) loads(t *testing.T, p *process, res *serverResult, base string, targets []target, expect string) {
	t.Helper()
	if res.FirstAnswer <= 0 {
		return
	}
	for _, tg := range targets {
		for _, c := range b.cfg.clients {
			res.Loads = append(res.Loads, b.load(t, p, res, base, tg, c, 0, expect))
		}
		if tg.rates {
			for _, r := range b.cfg.rates {
				res.Loads = append(res.Loads, b.load(t, p, res, base, tg, 0, r, expect))
			}
		}
	}
}

// loadtestResult is the part of hack/loadtest's -json result read here.
type loadtestResult struct {
	Concurrency int `json:"concurrency"`
	Requests    uint64
	Errors      struct{ Transport, Status, Body uint64 }
	FirstErrors []string `json:"first_errors"`
	Warmup      uint64   `json:"warmup_requests"`
	RPS         float64  `json:"rps"`
	Latency     struct {
		P50, P95, P99 float64 // microseconds
	} `json:"latency_us"`
}

// load runs the load tool once, closed loop with clients workers or open
// loop at rate, and measures the server's CPU and memory across the run.
func (b *bench) load(t *testing.T, p *process, res *serverResult, base string, tg target, clients int, rate float64, expect string) loadResult {
	t.Helper()
	lr := loadResult{Target: tg.name, Clients: clients, Rate: rate, Compare: tg.compare}
	logf("%s: %s %s, %s", res.Scenario, res.Server, tg.name, lr.load())
	if err := p.alive(); err != nil {
		lr.FirstErrors = []string{err.Error()}
		return lr
	}
	if b.ctx.Err() != nil {
		lr.FirstErrors = []string{"interrupted"}
		return lr
	}
	args := []string{"-url", base + tg.urlPath(), "-body", tg.body, "-d", b.cfg.duration.String(), "-warmup", b.cfg.warmup.String(),
		"-timeout", "2m", "-expect-body-contains", expect, "-json"}
	if rate > 0 {
		args = append(args, "-rate", strconv.FormatFloat(rate, 'f', -1, 64))
	} else {
		args = append(args, "-c", strconv.Itoa(clients))
	}
	var profiled chan struct{}
	if b.cfg.profileDir != "" && res.Server == "warden" {
		name := fmt.Sprintf("%s-%s-%s.pprof", res.Scenario, tg.name, strings.ReplaceAll(strings.ReplaceAll(lr.load(), " ", ""), "/", "-"))
		profiled = make(chan struct{})
		go func() {
			defer close(profiled)
			// The profile covers the measured part of the run.
			time.Sleep(b.cfg.warmup)
			b.saveProfile(base, fmt.Sprintf("profile?seconds=%d", max(1, int(b.cfg.duration.Seconds()))), name)
		}()
	}
	cpu0 := p.cpu()
	p.mem.resetPeak()
	cmd := exec.CommandContext(b.ctx, b.loadtest, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	cpu1 := p.cpu()
	if profiled != nil {
		<-profiled
	}
	lr.PeakRSS = p.mem.resetPeak()
	text, last := splitLastLine(out)
	fmt.Print(indent(text))
	var r loadtestResult
	if jsonErr := json.Unmarshal(last, &r); jsonErr != nil {
		lr.FirstErrors = []string{fmt.Sprintf("the load tool failed: %v: %s%s", err, truncate(out, 300), truncate(stderr.Bytes(), 300))}
		return lr
	}
	lr.Clients = r.Concurrency
	lr.Requests, lr.RPS = r.Requests, r.RPS
	lr.Errors = r.Errors.Transport + r.Errors.Status + r.Errors.Body
	lr.FirstErrors = r.FirstErrors
	lr.P50, lr.P95, lr.P99 = micros(r.Latency.P50), micros(r.Latency.P95), micros(r.Latency.P99)
	if n := r.Requests + r.Warmup; n > 0 {
		lr.CPUPerRequest = (cpu1 - cpu0) / time.Duration(n)
	}
	logf("%s: %.1f req/s, p95 %s, %s CPU a request, %d/%d errors", tg.name, lr.RPS, ms(lr.P95), ms(lr.CPUPerRequest), lr.Errors, lr.Requests)
	return lr
}

// saveProfile saves /debug/pprof/<what> of the policy server as name in
// SCALE_PROFILES. A failure is printed, not fatal: the profile is an extra.
func (b *bench) saveProfile(base, what, name string) {
	resp, err := http.Get(base + "/debug/pprof/" + what)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s", resp.Status)
	}
	if err == nil {
		var f *os.File
		if f, err = os.Create(filepath.Join(b.cfg.profileDir, name)); err == nil {
			_, err = io.Copy(f, resp.Body)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
	}
	if resp != nil {
		resp.Body.Close()
	}
	if err != nil {
		logf("profile %s: %v", name, err)
	}
}

func micros(us float64) time.Duration { return time.Duration(us * float64(time.Microsecond)) }

// splitLastLine returns out without its last line, and the last line.
func splitLastLine(out []byte) ([]byte, []byte) {
	out = bytes.TrimRight(out, "\n")
	i := bytes.LastIndexByte(out, '\n')
	return out[:i+1], out[i+1:]
}

func indent(text []byte) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(string(text), "\n") {
		if line != "" {
			b.WriteString("    " + line)
		}
	}
	return b.String()
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// process is a server the benchmark started and measures.
type process struct {
	name    string
	cmd     *exec.Cmd
	started time.Time
	logPath string
	mem     *memorySampler
	exited  chan struct{}
	waitErr error
}

// logResident logs the process's resident memory by kind (residentBy),
// when is the phase it is in.
func (p *process) logResident(when string) {
	r, err := processResident(p.cmd.Process.Pid)
	if err != nil {
		logf("%s: resident memory, %s: %v", p.name, when, err)
		return
	}
	logf("%s: resident memory, %s: %v", p.name, when, r)
}

// startProcess starts bin with args and env, its output going to logPath,
// and samples its memory every 50 ms. It is stopped when the test ends, if
// not before.
func startProcess(t *testing.T, name, logPath string, env []string, bin string, args ...string) *process {
	t.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	p := &process{name: name, logPath: logPath, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	p.mem = sampleMemory(p.cmd.Process.Pid, 50*time.Millisecond)
	go func() {
		p.waitErr = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	t.Cleanup(p.stop)
	return p
}

// waitFor calls cond every interval until it holds, and returns how long
// after the start of the process it first held; 0 when the process exited,
// cond gave up, ctx was done, or ten minutes passed first.
func (p *process) waitFor(ctx context.Context, interval time.Duration, cond func() (ok, giveUp bool)) time.Duration {
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		ok, giveUp := cond()
		switch {
		case ok:
			return time.Since(p.started)
		case giveUp:
			return 0
		}
		select {
		case <-ctx.Done():
			return 0
		case <-p.exited:
			return 0
		case <-time.After(interval):
		}
	}
	return 0
}

// cpu returns the CPU time the process used so far (0 once it is gone).
func (p *process) cpu() time.Duration {
	d, _ := processCPU(p.cmd.Process.Pid)
	return d
}

// alive returns an error when the process has exited.
func (p *process) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s is gone: %s", p.name, p.exitState())
	default:
		return nil
	}
}

// exitState says whether the process runs, or how it ended.
func (p *process) exitState() string {
	select {
	case <-p.exited:
		return fmt.Sprintf("%s exited: %v (log: %s)", p.name, p.waitErr, p.logPath)
	default:
		return p.name + " is running"
	}
}

// stop ends the process with SIGTERM, then SIGKILL after 20 seconds, and
// stops the sampling. It may be called more than once.
func (p *process) stop() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	if p.mem != nil {
		p.mem.close()
		p.mem = nil
	}
}

// maxProblems is how many kinds of log lines problems reports.
const maxProblems = 15

// problems returns the log lines at level WARN or ERROR, Go panics and fatal
// errors, one of each kind (level and message) with how many there were,
// and how the process ended when it did not end through stop.
func (p *process) problems() []string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return []string{err.Error()}
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	out := summarizeProblems(lines, maxProblems)
	if n := len(out); n == maxProblems {
		out = append(out, "more in "+p.logPath)
	}
	if p.waitErr != nil && !isTerminated(p.waitErr) {
		out = append(out, fmt.Sprintf("%s exited: %v", p.name, p.waitErr))
	}
	return out
}

// isTerminated reports whether err is the exit of a process ended by
// stop's SIGTERM (or a clean exit after it).
func isTerminated(err error) bool {
	exit, ok := err.(*exec.ExitError)
	if !ok {
		return false
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
		return true
	}
	return false
}

// environWithout returns the environment without the named variables.
func environWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || k == n
		}
		if !drop {
			env = append(env, kv)
		}
	}
	return env
}
