//go:build cluster

package dashboards

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// scraper stores what a /metrics endpoint serves as Prometheus does when
// it scrapes a target, at timestamps the test chooses.
type scraper struct {
	storage storage.Appendable
}

// scrape reads url's metrics and stores them at ts with target's labels,
// with the series up = 1. A scraped label that a target label also names is
// kept as exported_<name>, as Prometheus does without honor_labels.
func (s *scraper) scrape(t *testing.T, url string, target map[string]string, ts time.Time) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	app := s.storage.Appender(context.Background())
	ms := ts.UnixMilli()
	add := func(name string, scraped []*dto.LabelPair, extra map[string]string, v float64) {
		b := labels.NewBuilder(labels.EmptyLabels())
		for _, l := range scraped {
			n := l.GetName()
			if _, clash := target[n]; clash {
				n = "exported_" + n
			}
			b.Set(n, l.GetValue())
		}
		for k, v := range extra {
			b.Set(k, v)
		}
		for k, v := range target {
			b.Set(k, v)
		}
		b.Set(model.MetricNameLabel, name)
		if _, err := app.Append(0, b.Labels(), ms, v); err != nil {
			t.Fatalf("storing %s: %v", name, err)
		}
	}
	add("up", nil, nil, 1)
	for name, f := range families {
		for _, m := range f.GetMetric() {
			lp := m.GetLabel()
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add(name, lp, nil, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, lp, nil, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add(name, lp, nil, m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				inf := false
				for _, b := range h.GetBucket() {
					inf = inf || math.IsInf(b.GetUpperBound(), 1)
					add(name+"_bucket", lp, map[string]string{"le": formatBound(b.GetUpperBound())}, float64(b.GetCumulativeCount()))
				}
				if !inf {
					add(name+"_bucket", lp, map[string]string{"le": "+Inf"}, float64(h.GetSampleCount()))
				}
				add(name+"_sum", lp, nil, h.GetSampleSum())
				add(name+"_count", lp, nil, float64(h.GetSampleCount()))
			case dto.MetricType_SUMMARY:
				sm := m.GetSummary()
				for _, q := range sm.GetQuantile() {
					add(name, lp, map[string]string{"quantile": formatBound(q.GetQuantile())}, q.GetValue())
				}
				add(name+"_sum", lp, nil, sm.GetSampleSum())
				add(name+"_count", lp, nil, float64(sm.GetSampleCount()))
			default:
				t.Fatalf("scraping %s: %s has type %s, which the test does not store", url, name, f.GetType())
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatalf("storing the scrape of %s: %v", url, err)
	}
}

// formatBound writes a bucket bound or quantile as Prometheus does.
func formatBound(f float64) string {
	if math.IsInf(f, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// metricsURL is the /metrics URL at addr.
func metricsURL(addr fmt.Stringer) string { return "http://" + addr.String() + "/metrics" }
