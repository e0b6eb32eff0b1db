package dashboards

import (
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/util/teststorage"
)

// replicaGenerations is what one replica of a PolicyServer serves of a
// policy: its warden_policy_generation series.
type replicaGenerations struct {
	policyServer, pod, policy string
	generations               []int
}

// WardenPolicyGenerationBehind fires for a replica whose newest generation
// of a policy is older than another replica's of the same PolicyServer,
// and only for it; "Replicas not on the newest generation" counts those
// replicas. TestQueriesReturnData sees only replicas in step, so the
// cases where they are not are here, over series written by hand.
func TestGenerationBehind(t *testing.T) {
	tests := []struct {
		name     string
		replicas []replicaGenerations
		behind   []string // the pods the alert fires for
	}{
		{
			name: "in step",
			replicas: []replicaGenerations{
				{"default", "policy-server-default-0", "clusterwide-psp", []int{4}},
				{"default", "policy-server-default-1", "clusterwide-psp", []int{4}},
			},
		},
		{
			name: "a rollout: one replica still serves the previous generation too",
			replicas: []replicaGenerations{
				{"default", "policy-server-default-0", "clusterwide-psp", []int{3, 4}},
				{"default", "policy-server-default-1", "clusterwide-psp", []int{4}},
			},
		},
		{
			name: "one replica behind",
			replicas: []replicaGenerations{
				{"default", "policy-server-default-0", "clusterwide-psp", []int{4}},
				{"default", "policy-server-default-1", "clusterwide-psp", []int{3}},
				{"default", "policy-server-default-2", "clusterwide-psp", []int{4}},
				{"default", "policy-server-default-1", "clusterwide-labels", []int{7}},
			},
			behind: []string{"policy-server-default-1"},
		},
		{
			name: "two replicas behind on different policies",
			replicas: []replicaGenerations{
				{"default", "policy-server-default-0", "clusterwide-psp", []int{3}},
				{"default", "policy-server-default-1", "clusterwide-psp", []int{4}},
				{"default", "policy-server-default-0", "clusterwide-labels", []int{7}},
				{"default", "policy-server-default-1", "clusterwide-labels", []int{6}},
			},
			behind: []string{"policy-server-default-0", "policy-server-default-1"},
		},
		{
			name: "PolicyServers are compared apart",
			replicas: []replicaGenerations{
				{"default", "policy-server-default-0", "clusterwide-psp", []int{4}},
				{"other", "policy-server-other-0", "clusterwide-psp", []int{1}},
			},
		},
	}
	var alert string
	for _, r := range loadRules(t) {
		if r.Alert == "WardenPolicyGenerationBehind" {
			alert = r.Expr
		}
	}
	if alert == "" {
		t.Fatal("no alert WardenPolicyGenerationBehind")
	}
	panels, _ := loadDashboard(t)
	i := slices.IndexFunc(panels, func(q query) bool { return q.name == "Replicas not on the newest generation/A" })
	if i < 0 {
		t.Fatal(`no panel "Replicas not on the newest generation"`)
	}
	stat := panels[i].expr
	engine := promql.NewEngine(promql.EngineOpts{
		Logger: slog.New(slog.DiscardHandler), MaxSamples: 100_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute,
	})
	at := time.Unix(1_800_000_000, 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := teststorage.New(t)
			app := st.Appender(t.Context())
			for _, r := range tt.replicas {
				for _, g := range r.generations {
					ls := labels.FromStrings("__name__", "warden_policy_generation", "policy_server", r.policyServer,
						"pod", r.pod, "instance", r.pod+":8081", "policy_name", r.policy, "generation", strconv.Itoa(g))
					if _, err := app.Append(0, ls, at.UnixMilli(), float64(g)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := app.Commit(); err != nil {
				t.Fatal(err)
			}
			eval := func(expr string) promql.Vector {
				t.Helper()
				q, err := engine.NewInstantQuery(t.Context(), st, nil, expr, at)
				if err != nil {
					t.Fatalf("%v\n%s", err, expr)
				}
				defer q.Close()
				r := q.Exec(t.Context())
				if r.Err != nil {
					t.Fatalf("%v\n%s", r.Err, expr)
				}
				v, err := r.Vector()
				if err != nil {
					t.Fatalf("%v\n%s", err, expr)
				}
				return v
			}

			var firing []string
			for _, s := range eval(alert) {
				firing = append(firing, s.Metric.Get("pod"))
			}
			slices.Sort(firing)
			firing = slices.Compact(firing)
			if !slices.Equal(firing, tt.behind) {
				t.Errorf("the alert fires for %v, want %v", firing, tt.behind)
			}

			// With the variable policy_server at "All".
			v := eval(strings.ReplaceAll(stat, `policy_server=~"default"`, `policy_server=~".*"`))
			if len(v) != 1 || v[0].F != float64(len(tt.behind)) {
				t.Errorf("the stat shows %v, want %d", v, len(tt.behind))
			}
		})
	}
}
