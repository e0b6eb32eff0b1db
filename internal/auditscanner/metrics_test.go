package auditscanner

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMetricsExport(t *testing.T) {
	m := newRunMetrics()
	complete := &scopeResult{cleaned: true}
	complete.stats.resources.Add(3)
	complete.stats.created.Add(2)
	complete.stats.unchanged.Add(1)
	complete.stats.reused.Add(1)
	incomplete := &scopeResult{err: io.ErrUnexpectedEOF}
	incomplete.stats.resources.Add(1)
	incomplete.stats.updated.Add(1)
	m.addScope(complete)
	m.addScope(incomplete)
	p := clusterPolicy("p")
	m.addResults(newReport(pod("a", "x"), "run", 0, 0, []evaluation{{policy: audited(p), verdict: verdict{allowed: true}}}, 1).results)
	m.addResults(newReport(pod("a", "y"), "run", 0, 0, []evaluation{{policy: audited(p), verdict: verdict{allowed: true}}}, 1).results)
	m.addResults(newReport(pod("a", "z"), "run", 0, 0, []evaluation{{policy: audited(p), verdict: verdict{errored: true}}}, 1).results)
	m.addStoredResults([][2]string{{"clusterwide-p", "pass"}})

	var pushed, path string
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		pushed, path = string(b), r.Method+" "+r.URL.Path
	}))
	defer gateway.Close()
	file := filepath.Join(t.TempDir(), "audit.prom")
	opts := Options{MetricsFile: file, MetricsPushgatewayURL: gateway.URL}
	if err := m.export(t.Context(), &opts, time.Unix(1700000000, 0), 90*time.Second, false); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{
		"warden_audit_last_run_timestamp_seconds 1.7e+09",
		"warden_audit_last_run_duration_seconds 90",
		"warden_audit_last_run_success 0",
		"warden_audit_incomplete_scopes 1",
		"warden_audit_resources 4",
		"warden_audit_resources_reused 1",
		"warden_audit_stale_report_cleanups 1",
		`warden_audit_reports{operation="created"} 2`,
		`warden_audit_reports{operation="updated"} 1`,
		`warden_audit_reports{operation="unchanged"} 1`,
		`warden_audit_policy_results{policy_name="clusterwide-p",result="pass"} 3`,
		`warden_audit_policy_results{policy_name="clusterwide-p",result="error"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("the metrics file lacks %q:\n%s", want, text)
		}
	}
	if path != "PUT /metrics/job/"+MetricsJob || pushed == "" {
		t.Errorf("pushed %q to %s", pushed, path)
	}
	if err := newRunMetrics().export(t.Context(), &Options{}, time.Now(), 0, true); err != nil {
		t.Errorf("exporting nowhere: %v", err)
	}
	bad := Options{MetricsFile: filepath.Join(t.TempDir(), "missing", "audit.prom")}
	if err := m.export(t.Context(), &bad, time.Now(), 0, true); err == nil || !strings.Contains(err.Error(), "writing --metrics-file") {
		t.Errorf("writing to a missing directory: %v", err)
	}
}
