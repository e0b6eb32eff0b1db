package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The metrics the tool reads. The API server's are histograms in seconds:
// the validating admission step of each request (built-in plugins and
// webhooks together) and each call of a validating webhook. The policy
// server's counts evaluations, one per policy per request.
const (
	metricAdmissionStep      = "apiserver_admission_step_admission_duration_seconds"
	metricWebhookAdmission   = "apiserver_admission_webhook_admission_duration_seconds"
	metricPolicyEvaluations  = "kubewarden_policy_evaluations_total"
	maxMetricsBytes          = 64 << 20
	policyServerScrapeExpiry = 10 * time.Second
)

// apiServerSample is what one scrape of the API server's /metrics says
// about validating admission of CREATE requests so far.
type apiServerSample struct {
	stepSum, webhookSum     float64 // seconds
	stepCount, webhookCount uint64
}

// parseMetrics parses the Prometheus text format.
func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(io.LimitReader(r, maxMetricsBytes))
}

// hasLabels reports whether m has every label of want with its value.
func hasLabels(m *dto.Metric, want map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if l.GetValue() != v {
				return false
			}
			found++
		}
	}
	return found == len(want)
}

// histogramTotals sums the sums and counts of the histogram family's
// series that carry labels.
func histogramTotals(f *dto.MetricFamily, labels map[string]string) (sum float64, count uint64) {
	for _, m := range f.GetMetric() {
		if h := m.GetHistogram(); h != nil && hasLabels(m, labels) {
			sum += h.GetSampleSum()
			count += h.GetSampleCount()
		}
	}
	return sum, count
}

// apiServerTotals reads the validating admission of CREATE requests from
// the API server's metrics.
func apiServerTotals(families map[string]*dto.MetricFamily) apiServerSample {
	var s apiServerSample
	if f := families[metricAdmissionStep]; f != nil {
		s.stepSum, s.stepCount = histogramTotals(f, map[string]string{"type": "validate", "operation": "CREATE"})
	}
	if f := families[metricWebhookAdmission]; f != nil {
		s.webhookSum, s.webhookCount = histogramTotals(f, map[string]string{"type": "validating", "operation": "CREATE"})
	}
	return s
}

// evaluationsTotal sums every series of the policy server's evaluation
// counter.
func evaluationsTotal(families map[string]*dto.MetricFamily) (float64, error) {
	var total float64
	found := false
	for _, name := range []string{metricPolicyEvaluations, strings.TrimSuffix(metricPolicyEvaluations, "_total")} {
		f := families[name]
		if f == nil {
			continue
		}
		found = true
		for _, m := range f.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	if !found {
		return 0, fmt.Errorf("no %s in the policy server's metrics", metricPolicyEvaluations)
	}
	return total, nil
}

// metricsGetter fetches a text exposition.
type metricsGetter func(ctx context.Context) (io.ReadCloser, error)

// httpMetrics returns a getter of url over plain HTTP.
func httpMetrics(url string) metricsGetter {
	client := &http.Client{Timeout: policyServerScrapeExpiry}
	return func(ctx context.Context) (io.ReadCloser, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "text/plain")
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return resp.Body, nil
	}
}

// scrape parses what get returns.
func scrape(ctx context.Context, get metricsGetter) (map[string]*dto.MetricFamily, error) {
	body, err := get(ctx)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return parseMetrics(body)
}
