package observability

import (
	"slices"
	"strings"
	"sync"
	"testing"
)

// warden_policy_generation shows, at each scrape, one series per
// generation served, with the generation as label and value, and nothing
// of a generation no longer served.
func TestPolicyGenerations(t *testing.T) {
	var mu sync.Mutex
	served := []PolicyGeneration{
		{PolicyName: "clusterwide-psp", Generation: 3},
		{PolicyName: "clusterwide-psp", Generation: 4}, // a rollout: both serve
		{PolicyName: "namespaced-shop-labels", Generation: 1},
	}
	m := newTestMetrics(t, MetricsOptions{})
	if err := m.ObservePolicyGenerations(func() []PolicyGeneration {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(served)
	}); err != nil {
		t.Fatal(err)
	}
	got := scrape(t, m)
	for _, want := range []string{
		`# TYPE warden_policy_generation gauge`,
		`warden_policy_generation{generation="3",policy_name="clusterwide-psp"} 3`,
		`warden_policy_generation{generation="4",policy_name="clusterwide-psp"} 4`,
		`warden_policy_generation{generation="1",policy_name="namespaced-shop-labels"} 1`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, got)
		}
	}

	mu.Lock()
	served = served[1:2]
	mu.Unlock()
	got = scrape(t, m)
	if strings.Contains(got, `generation="3"`) || strings.Contains(got, "namespaced-shop-labels") {
		t.Errorf("a generation no longer served is still on /metrics:\n%s", got)
	}
	if !strings.Contains(got, `warden_policy_generation{generation="4",policy_name="clusterwide-psp"} 4`+"\n") {
		t.Errorf("/metrics lacks the generation still served:\n%s", got)
	}

	if got := scrape(t, newTestMetrics(t, MetricsOptions{})); strings.Contains(got, MetricPolicyGeneration) {
		t.Errorf("warden_policy_generation without ObservePolicyGenerations (standalone mode):\n%s", got)
	}
	var none *Metrics
	if err := none.ObservePolicyGenerations(func() []PolicyGeneration { return served }); err != nil {
		t.Errorf("nil *Metrics: %v", err)
	}
}
