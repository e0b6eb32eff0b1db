package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		ok     bool
		stderr string
	}{
		{args: []string{"-kubeconfig", "k"}, ok: true},
		{args: []string{"-mode", "compare", "-base", "a", "-with", "b"}, ok: true},
		{args: []string{"-mode", "first-rejection", "-kubeconfig", "k", "-since", "1764355200.25"}, ok: true},
		{args: []string{}, code: 2, stderr: "-kubeconfig is required in measure mode"},
		{args: []string{"-mode", "compare"}, code: 2, stderr: "compare mode needs -base and -with"},
		{args: []string{"-mode", "x"}, code: 2, stderr: `-mode "x"`},
		{args: []string{"-kubeconfig", "k", "-c", "1,0"}, code: 2, stderr: "want comma-separated numbers from 1 to 1000"},
		{args: []string{"-kubeconfig", "k", "-c", "10,10"}, code: 2, stderr: "10 is there twice"},
		{args: []string{"-kubeconfig", "k", "-d", "11m"}, code: 2, stderr: "-d 11m0s"},
		{args: []string{"-kubeconfig", "k", "-n", "-1"}, code: 2, stderr: "-n -1"},
		{args: []string{"-kubeconfig", "k", "-since", "yesterday"}, code: 2, stderr: `-since "yesterday"`},
		{args: []string{"-kubeconfig", "k", "extra"}, code: 2, stderr: "unexpected arguments"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var opts Options
			var stderr bytes.Buffer
			code, ok := parseArgs(append([]string{"admissionbench"}, tc.args...), &opts, &stderr)
			if code != tc.code || ok != tc.ok || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("exit %d, ok %v, stderr %q; want %d, %v and %q", code, ok, stderr.String(), tc.code, tc.ok, tc.stderr)
			}
		})
	}
	var opts Options
	if _, ok := parseArgs([]string{"admissionbench", "-kubeconfig", "k", "-since", "1764355200.25"}, &opts, &bytes.Buffer{}); !ok {
		t.Fatal("flags refused")
	}
	if want := time.Unix(1764355200, 250_000_000); !opts.SinceTime.Equal(want) || len(opts.Levels) != 3 {
		t.Errorf("-since parsed as %v, levels %v; want %v and the three default levels", opts.SinceTime, opts.Levels, want)
	}
}

func TestPercentile(t *testing.T) {
	var l LevelResult
	var lat []time.Duration
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	l.Elapsed = 2 * time.Second
	l.summarize(lat)
	if l.P50 != 50*time.Millisecond || l.P95 != 95*time.Millisecond || l.P99 != 99*time.Millisecond || l.Max != 100*time.Millisecond {
		t.Errorf("p50 %v, p95 %v, p99 %v, max %v; want 50, 95, 99 and 100 ms", l.P50, l.P95, l.P99, l.Max)
	}
	if l.Creates != 100 || l.PerSecond != 50 {
		t.Errorf("%d creates, %v/s; want 100 and 50", l.Creates, l.PerSecond)
	}
	for _, tc := range []struct {
		n    int
		p    float64
		want time.Duration
	}{{0, 50, 0}, {1, 99, 1}, {3, 50, 2}, {3, 99, 3}, {1000, 99, 990}, {1001, 99, 991}} {
		sorted := make([]time.Duration, tc.n)
		for i := range sorted {
			sorted[i] = time.Duration(i + 1)
		}
		if got := percentile(sorted, tc.p); got != tc.want {
			t.Errorf("p%v of 1..%d: %v, want %v", tc.p, tc.n, got, tc.want)
		}
	}
}

func TestProcfs(t *testing.T) {
	proc := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(proc, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// utime and stime (fields 14 and 15) in clock ticks; the command name
	// may hold spaces and parentheses.
	stat := func(comm string, utime, stime int) string {
		return "42 (" + comm + ") S 1 42 42 0 -1 4194560 100 0 0 0 " +
			strconv.Itoa(utime) + " " + strconv.Itoa(stime) + " 0 0 20 0 12 0 100 1000000 500\n"
	}
	write("self/stat", stat("admissionbench", 5, 1))
	write("100/comm", "kube-apiserver\n")
	write("100/stat", stat("kube-apiserver", 300, 100))
	write("200/comm", "policy-server\n")
	write("200/stat", stat("policy-server", 40, 10))
	write("201/comm", "policy-server\n")
	write("201/stat", stat("policy-server", 1, 1))
	write("300/comm", "odd) (name\n")
	write("300/stat", stat("odd) (name", 7, 0))
	write("400/comm", "etcd\n") // gone before its stat is read
	write("stat", "cpu  100 0 50 800 50 0 0 10 5 0\ncpu0 50 0 25 400 25 0 0 5 0 0\n")
	write("loadavg", "0.52 0.61 0.70 2/345 6789\n")

	got := processCPU(proc, []string{"kube-apiserver", "policy-server", "odd) (name", "etcd"})
	want := map[string]time.Duration{
		"admissionbench": 60 * time.Millisecond, "kube-apiserver": 4 * time.Second,
		"policy-server": 520 * time.Millisecond, "odd) (name": 70 * time.Millisecond,
	}
	if len(got) != len(want) {
		t.Errorf("process CPU %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("CPU of %s: %v, want %v", k, got[k], v)
		}
	}
	m := readMachineCPU(proc)
	if m.busy != 100+50+10 || m.total != 1010 {
		t.Errorf("machine CPU %+v, want busy 160 of 1010 (guest time left out)", m)
	}
	if s := busyShare(machineCPU{busy: 10, total: 100}, machineCPU{busy: 60, total: 200}); s != 0.5 {
		t.Errorf("busy share %v, want 0.5", s)
	}
	write("net/snmp", "Ip: Forwarding DefaultTTL\nIp: 2 64\n"+
		"Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails\n"+
		"Tcp: 1 200 120000 -1 4321 77 3\nUdp: InDatagrams\nUdp: 5\n")
	if n := readTCPActiveOpens(proc); n != 4321 {
		t.Errorf("TCP active opens %d, want 4321", n)
	}
	if n := readTCPActiveOpens(filepath.Join(proc, "missing")); n != -1 {
		t.Errorf("TCP active opens without /proc: %d, want -1", n)
	}

	// 50 busy ticks in the window are 500 ms, of which the processes
	// account for 350 ms.
	l := LevelResult{Creates: 100}
	l.fillCPU(
		snapshot{cpu: map[string]time.Duration{"etcd": time.Second, managedBy: 0}, machine: machineCPU{busy: 100, total: 200}, tcpOpens: 10},
		snapshot{cpu: map[string]time.Duration{"etcd": 1300 * time.Millisecond, managedBy: 50 * time.Millisecond}, machine: machineCPU{busy: 150, total: 300}, tcpOpens: 60},
	)
	if l.CPU["etcd"] != 300*time.Millisecond || l.CPU[managedBy] != 50*time.Millisecond || l.CPU[restOfMachine] != 150*time.Millisecond ||
		l.MachineBusy != 0.5 || l.TCPOpensPerCreate != 0.5 {
		t.Errorf("CPU %v, busy %v, TCP opens per create %v; want etcd 300ms, admissionbench 50ms, the rest 150ms, 0.5 and 0.5",
			l.CPU, l.MachineBusy, l.TCPOpensPerCreate)
	}
	if la := loadAverage(proc); la != "0.52 0.61 0.70" {
		t.Errorf("load average %q", la)
	}
	if la := loadAverage(filepath.Join(proc, "missing")); la != "unknown" {
		t.Errorf("load average without /proc: %q, want unknown", la)
	}
}

// metricsText is a fragment of an API server's and a policy server's
// /metrics, in the shapes they write.
const metricsText = `# HELP apiserver_admission_step_admission_duration_seconds [STABLE] Admission sub-step latency histogram in seconds, broken out for each operation and API resource and step type (validate or admit).
# TYPE apiserver_admission_step_admission_duration_seconds histogram
apiserver_admission_step_admission_duration_seconds_bucket{operation="CREATE",rejected="false",type="validate",le="0.005"} 90
apiserver_admission_step_admission_duration_seconds_bucket{operation="CREATE",rejected="false",type="validate",le="+Inf"} 100
apiserver_admission_step_admission_duration_seconds_sum{operation="CREATE",rejected="false",type="validate"} 0.5
apiserver_admission_step_admission_duration_seconds_count{operation="CREATE",rejected="false",type="validate"} 100
apiserver_admission_step_admission_duration_seconds_bucket{operation="CREATE",rejected="true",type="validate",le="+Inf"} 10
apiserver_admission_step_admission_duration_seconds_sum{operation="CREATE",rejected="true",type="validate"} 0.1
apiserver_admission_step_admission_duration_seconds_count{operation="CREATE",rejected="true",type="validate"} 10
apiserver_admission_step_admission_duration_seconds_bucket{operation="UPDATE",rejected="false",type="validate",le="+Inf"} 7
apiserver_admission_step_admission_duration_seconds_sum{operation="UPDATE",rejected="false",type="validate"} 7
apiserver_admission_step_admission_duration_seconds_count{operation="UPDATE",rejected="false",type="validate"} 7
apiserver_admission_step_admission_duration_seconds_bucket{operation="CREATE",rejected="false",type="admit",le="+Inf"} 100
apiserver_admission_step_admission_duration_seconds_sum{operation="CREATE",rejected="false",type="admit"} 9
apiserver_admission_step_admission_duration_seconds_count{operation="CREATE",rejected="false",type="admit"} 100
# HELP apiserver_admission_webhook_admission_duration_seconds [STABLE] Admission webhook latency histogram in seconds, identified by name and broken out for each operation and API resource and type (validate or admit).
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="a.kubewarden.admission",operation="CREATE",rejected="false",type="validating",le="+Inf"} 100
apiserver_admission_webhook_admission_duration_seconds_sum{name="a.kubewarden.admission",operation="CREATE",rejected="false",type="validating"} 0.2
apiserver_admission_webhook_admission_duration_seconds_count{name="a.kubewarden.admission",operation="CREATE",rejected="false",type="validating"} 100
apiserver_admission_webhook_admission_duration_seconds_bucket{name="b.kubewarden.admission",operation="CREATE",rejected="false",type="validating",le="+Inf"} 100
apiserver_admission_webhook_admission_duration_seconds_sum{name="b.kubewarden.admission",operation="CREATE",rejected="false",type="validating"} 0.2
apiserver_admission_webhook_admission_duration_seconds_count{name="b.kubewarden.admission",operation="CREATE",rejected="false",type="validating"} 100
# HELP kubewarden_policy_evaluations_total The number of policy evaluations
# TYPE kubewarden_policy_evaluations_total counter
kubewarden_policy_evaluations_total{accepted="true",policy_name="clusterwide-a",resource_kind="Pod",resource_request_operation="CREATE"} 100
kubewarden_policy_evaluations_total{accepted="false",policy_name="clusterwide-b",resource_kind="Pod",resource_request_operation="CREATE"} 32
`

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	families, err := scrape(ctx, func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(metricsText)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	a := apiServerTotals(families)
	if a.stepCount != 110 || a.stepSum != 0.6 || a.webhookCount != 200 || a.webhookSum != 0.4 {
		t.Errorf("API server totals %+v, want 110 validating steps of CREATE taking 0.6 s, 200 webhook calls taking 0.4 s", a)
	}
	n, err := evaluationsTotal(families)
	if err != nil || n != 132 {
		t.Errorf("evaluations %v (%v), want 132", n, err)
	}
	if _, err := evaluationsTotal(map[string]*dto.MetricFamily{}); err == nil {
		t.Error("no error for metrics without evaluations")
	}

	var l LevelResult
	l.Creates, l.WarmupCreates = 60, 6
	before := scrapes{apiServer: &apiServerSample{stepSum: 0.1, stepCount: 10}, evaluations: ptrTo(0.0)}
	after := scrapes{apiServer: &a, evaluations: &n}
	(&bench{}).fillMetrics(&l, before, after)
	if l.ValidatingAdmission != 5*time.Millisecond || l.Webhook != 2*time.Millisecond || l.WebhookCalls != 200 || l.EvaluationsPerCreate != 2 {
		t.Errorf("validating admission %v, webhook %v x %v, %v evaluations per create; want 5 ms, 2 ms x 200, 2",
			l.ValidatingAdmission, l.Webhook, l.WebhookCalls, l.EvaluationsPerCreate)
	}
}

func TestCompare(t *testing.T) {
	dir := t.TempDir()
	level := func(c int, p50, p99 time.Duration, rate float64) LevelResult {
		return LevelResult{Concurrency: c, P50: p50, P95: p99, P99: p99, PerSecond: rate}
	}
	base := &Result{Label: "no webhook", Levels: []LevelResult{
		level(1, 4*time.Millisecond, 8*time.Millisecond, 200), level(10, 10*time.Millisecond, 20*time.Millisecond, 900),
	}}
	with := &Result{Label: "Warden", Levels: []LevelResult{
		level(1, 5*time.Millisecond, 12*time.Millisecond, 150), level(50, time.Second, time.Second, 100),
	}}
	basePath, withPath := filepath.Join(dir, "base.json"), filepath.Join(dir, "with.json")
	for path, r := range map[string]*Result{basePath: base, withPath: with} {
		if err := writeResult(path, r); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"admissionbench", "-mode", "compare", "-base", basePath, "-with", withPath}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	want := "| clients | no webhook: p50 / p95 / p99 (ms) | Warden: p50 / p95 / p99 (ms) | p50 overhead | p99 overhead | create/s: no webhook / Warden |\n" +
		"|---:|---|---|---:|---:|---|\n" +
		"| 1 | 4.00 / 8.00 / 8.00 | 5.00 / 12.00 / 12.00 | +25% | +50% | 200 / 150 |\n"
	if stdout.String() != want {
		t.Errorf("comparison:\n%s\nwant:\n%s", stdout.String(), want)
	}

	with.Levels = with.Levels[1:]
	if err := writeResult(withPath, with); err != nil {
		t.Fatal(err)
	}
	if code := run(context.Background(), []string{"admissionbench", "-mode", "compare", "-base", basePath, "-with", withPath}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "no concurrency level in common") {
		t.Errorf("exit %d, stderr %q; want 1 for runs with no level in common", code, stderr.String())
	}
}

func ptrTo[T any](v T) *T { return &v }
