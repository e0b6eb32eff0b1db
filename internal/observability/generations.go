package observability

import (
	"context"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// MetricPolicyGeneration is Warden's own: in cluster mode (RFC 000), one
// series per generation of a policy that the replica serves, by
// policy_name (the policy's unique name) and generation; its value is the
// generation too. A replica serves two generations of a policy during a
// rollout, so the generation is a label, which keeps their series apart,
// and the value, which PromQL can compare (max, <) where it cannot compare
// label values as numbers.
const MetricPolicyGeneration = "warden_policy_generation"

// PolicyGeneration is one generation of a policy that a replica serves.
type PolicyGeneration struct {
	// PolicyName is the policy's unique name (clusterwide-<name>,
	// namespaced-<namespace>-<name>), the policy_name of its evaluations.
	PolicyName string
	// Generation is the policy's metadata.generation the revision holds.
	Generation int64
}

// ObservePolicyGenerations makes m show MetricPolicyGeneration, read from
// served each time the metrics are collected (a scrape, an OTLP push): a
// generation that served no longer returns leaves no series behind. served must be
// safe for concurrent use and must not block on a policy load. Call it
// once; on a nil *Metrics it does nothing.
func (m *Metrics) ObservePolicyGenerations(served func() []PolicyGeneration) error {
	if m == nil {
		return nil
	}
	meter := m.provider.Meter(MeterName)
	gauge, err := meter.Int64ObservableGauge(MetricPolicyGeneration,
		metric.WithDescription("Generation of a policy that the replica serves, one series per generation served."))
	if err != nil {
		return fmt.Errorf("creating %s: %w", MetricPolicyGeneration, err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, g := range served() {
			o.ObserveInt64(gauge, g.Generation, metric.WithAttributes(
				attribute.String(attrPolicyName, g.PolicyName),
				attribute.String("generation", strconv.FormatInt(g.Generation, 10)),
			))
		}
		return nil
	}, gauge)
	if err != nil {
		return fmt.Errorf("registering %s: %w", MetricPolicyGeneration, err)
	}
	return nil
}
