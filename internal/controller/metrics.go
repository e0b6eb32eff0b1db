package controller

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// policyTotal is Kubewarden's kubewarden_policy_total, with its labels.
// Kubewarden's controller adds one to a counter each time it reconciles a
// policy, and pushes it over OTLP; here it is the number of policies in the
// cluster, by labels, computed when /metrics is scraped, which is what its
// description says it is.
var policyTotal = prometheus.NewDesc("kubewarden_policy_total",
	"How many policies are installed in the cluster",
	[]string{"name", "policy_server", "module", "mutating", "namespace", "failure_policy", "policy_status"}, nil)

// policyMetrics reports kubewarden_policy_total on the controller's metrics
// endpoint while the controller leads.
type policyMetrics struct {
	client client.Reader
}

// Start registers the collector until ctx is done: it implements
// manager.Runnable.
func (m *policyMetrics) Start(ctx context.Context) error {
	if err := metrics.Registry.Register(m); err != nil {
		return err
	}
	<-ctx.Done()
	metrics.Registry.Unregister(m)
	return nil
}

// NeedLeaderElection is true: followers would count the same policies
// again.
func (m *policyMetrics) NeedLeaderElection() bool { return true }

// Describe implements prometheus.Collector.
func (m *policyMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- policyTotal }

// Collect implements prometheus.Collector.
func (m *policyMetrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts := map[[7]string]int{}
	for _, kind := range policyKinds {
		list := newPolicyList(kind)
		if err := m.client.List(ctx, list); err != nil {
			ch <- prometheus.NewInvalidMetric(policyTotal, err)
			return
		}
		for _, p := range policiesOf(list) {
			counts[policyLabels(p)]++
		}
	}
	for labels, n := range counts {
		ch <- prometheus.MustNewConstMetric(policyTotal, prometheus.GaugeValue, float64(n), labels[:]...)
	}
}

// policyLabels are the label values of p, in policyTotal's order.
func policyLabels(p policiesv1.Policy) [7]string {
	failurePolicy := ""
	if f := p.GetFailurePolicy(); f != nil {
		failurePolicy = string(*f)
	}
	return [7]string{
		p.GetUniqueName(), p.GetPolicyServer(), p.GetModule(), strconv.FormatBool(p.IsMutating()),
		p.GetNamespace(), failurePolicy, string(p.GetStatus().PolicyStatus),
	}
}
