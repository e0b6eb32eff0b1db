package auditscanner

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
)

// Metrics of a run, written with --metrics-file (Prometheus text format,
// for node_exporter's textfile collector) or pushed with
// --metrics-pushgateway-url (to a Prometheus Pushgateway, as the job
// MetricsJob). Kubewarden's scanner has none; each is a gauge holding the
// value of the last run.
const (
	// MetricsJob is the Pushgateway job the metrics are pushed under.
	MetricsJob = "warden-audit-scanner"

	metricLastRun      = "warden_audit_last_run_timestamp_seconds"
	metricDuration     = "warden_audit_last_run_duration_seconds"
	metricSuccess      = "warden_audit_last_run_success"
	metricIncomplete   = "warden_audit_incomplete_scopes"
	metricResources    = "warden_audit_resources"
	metricReused       = "warden_audit_resources_reused"
	metricReports      = "warden_audit_reports"
	metricCleanups     = "warden_audit_stale_report_cleanups"
	metricResults      = "warden_audit_policy_results"
	labelOperation     = "operation"
	labelPolicyName    = "policy_name"
	labelResult        = "result"
	operationCreated   = "created"
	operationUpdated   = "updated"
	operationUnchanged = "unchanged"
)

// runMetrics gathers the metrics of a run; safe for concurrent use.
type runMetrics struct {
	resources, created, updated, unchanged, reused, cleanups, incomplete atomic.Int64

	mu      sync.Mutex
	results map[[2]string]int // by policy and result
}

func newRunMetrics() *runMetrics {
	return &runMetrics{results: map[[2]string]int{}}
}

// addScope adds what a scope did.
func (m *runMetrics) addScope(res *scopeResult) {
	m.resources.Add(res.stats.resources.Load())
	m.created.Add(res.stats.created.Load())
	m.updated.Add(res.stats.updated.Load())
	m.unchanged.Add(res.stats.unchanged.Load())
	m.reused.Add(res.stats.reused.Load())
	if res.cleaned {
		m.cleanups.Add(1)
	}
	if res.err != nil {
		m.incomplete.Add(1)
	}
}

// addResults counts the results of a report.
func (m *runMetrics) addResults(results []result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, res := range results {
		m.results[[2]string{res.policy, res.result}]++
	}
}

// addStoredResults counts the results, policy and result, of a report
// kept from a previous run.
func (m *runMetrics) addStoredResults(results [][2]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, res := range results {
		m.results[res]++
	}
}

// registry returns the run's metrics, for a run that started at start,
// lasted duration and was complete or not.
func (m *runMetrics) registry(start time.Time, duration time.Duration, complete bool) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	gauge := func(name, help string, v float64) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		g.Set(v)
		reg.MustRegister(g)
	}
	success := 0.0
	if complete {
		success = 1
	}
	gauge(metricLastRun, "When the last audit started, in seconds since the epoch.", float64(start.Unix()))
	gauge(metricDuration, "How long the last audit took.", duration.Seconds())
	gauge(metricSuccess, "1 when every scope of the last audit was scanned completely, else 0.", success)
	gauge(metricIncomplete, "Scopes (the cluster-wide resources, namespaces) the last audit could not scan completely; their previous reports were kept.", float64(m.incomplete.Load()))
	gauge(metricResources, "Resources the last audit evaluated.", float64(m.resources.Load()))
	gauge(metricReused, "Resources whose report the last audit kept without evaluating them again: neither they nor their policies had changed.", float64(m.reused.Load()))
	gauge(metricCleanups, "Scopes whose stale reports the last audit deleted.", float64(m.cleanups.Load()))
	reports := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricReports,
		Help: "Reports the last audit wrote: created, updated, or unchanged (only their run-uid label patched)."}, []string{labelOperation})
	reports.WithLabelValues(operationCreated).Set(float64(m.created.Load()))
	reports.WithLabelValues(operationUpdated).Set(float64(m.updated.Load()))
	reports.WithLabelValues(operationUnchanged).Set(float64(m.unchanged.Load()))
	reg.MustRegister(reports)
	results := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricResults,
		Help: "Results of the last audit, by policy (unique name) and result: pass, fail or error."}, []string{labelPolicyName, labelResult})
	m.mu.Lock()
	for k, n := range m.results {
		results.WithLabelValues(k[0], k[1]).Set(float64(n))
	}
	m.mu.Unlock()
	reg.MustRegister(results)
	return reg
}

// export writes the metrics to --metrics-file and pushes them to
// --metrics-pushgateway-url, those of the two that are set.
func (m *runMetrics) export(ctx context.Context, opts *Options, start time.Time, duration time.Duration, complete bool) error {
	if opts.MetricsFile == "" && opts.MetricsPushgatewayURL == "" {
		return nil
	}
	reg := m.registry(start, duration, complete)
	if opts.MetricsFile != "" {
		if err := prometheus.WriteToTextfile(opts.MetricsFile, reg); err != nil {
			return fmt.Errorf("writing --metrics-file: %w", err)
		}
	}
	if opts.MetricsPushgatewayURL != "" {
		if err := push.New(opts.MetricsPushgatewayURL, MetricsJob).Gatherer(reg).PushContext(ctx); err != nil {
			return fmt.Errorf("pushing to --metrics-pushgateway-url: %w", err)
		}
	}
	return nil
}
