package charttest

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// prometheusOperator is the module whose CRDs (example/prometheus-operator-crd)
// the ServiceMonitor, PodMonitor and PrometheusRule are validated against:
// the module proxy serves it like any Go module, and it is read from the
// module cache.
const prometheusOperator = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

var (
	chartDashboard = filepath.Join(chartDir, "files", "dashboards", "warden.json")
	chartAlerts    = filepath.Join(chartDir, "files", "alerts", "warden.rules.yaml")
)

// monitoringCRDSchemas loads the Prometheus Operator's CRDs of kind ->
// schema, downloading the module into the module cache if need be.
func monitoringCRDSchemas(t *testing.T) map[string]*crdSchema {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", prometheusOperator)
	cmd.Dir = t.TempDir() // outside this module: its go.mod does not name it
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v\n%s", prometheusOperator, err, stderr.String())
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s: no directory in %s (%v)", prometheusOperator, out, err)
	}
	dir := filepath.Join(mod.Dir, "example", "prometheus-operator-crd")
	return map[string]*crdSchema{
		"ServiceMonitor": loadCRDSchema(t, filepath.Join(dir, "monitoring.coreos.com_servicemonitors.yaml")),
		"PodMonitor":     loadCRDSchema(t, filepath.Join(dir, "monitoring.coreos.com_podmonitors.yaml")),
		"PrometheusRule": loadCRDSchema(t, filepath.Join(dir, "monitoring.coreos.com_prometheusrules.yaml")),
	}
}

// TestMonitoringOff: by default the chart renders none of the monitoring
// objects, so that it installs where the Prometheus Operator's CRDs do not
// exist.
func TestMonitoringOff(t *testing.T) {
	r := render(t, release{name: "warden", namespace: "kubewarden"}, nil)
	for _, kind := range []string{"ConfigMap", "ServiceMonitor", "PodMonitor", "PrometheusRule"} {
		if n := r.count(kind); n != 0 {
			t.Errorf("rendered %d %s objects with the default values, want 0", n, kind)
		}
	}
}

func TestMonitoring(t *testing.T) {
	schemas := monitoringCRDSchemas(t)
	tests := []struct {
		name string
		rel  release
		vals string
		// prefix is the names' prefix; namespaces is where the objects of
		// a kind go, when not in the release's namespace.
		prefix     string
		namespaces map[string]string
		// wantSMLabels and wantDashboardLabels are labels beyond the
		// chart's own.
		wantSMLabels, wantDashboardLabels, wantRuleLabels, wantAlertLabels map[string]string
		wantInterval, wantTimeout                                          string
		wantPort                                                           string
		wantRelabelings, wantMetricRelabelings                             int
	}{{
		name: "defaults",
		rel:  release{name: "warden", namespace: "kubewarden"},
		vals: `
grafanaDashboard: {enabled: true}
serviceMonitor: {enabled: true}
prometheusRule: {enabled: true}
`,
		prefix:              "warden",
		wantDashboardLabels: map[string]string{"grafana_dashboard": "1"},
		wantInterval:        "30s", wantPort: "8081",
	}, {
		name: "everything set",
		rel:  release{name: "prod", namespace: "policy-system"},
		vals: `
grafanaDashboard:
  enabled: true
  namespace: grafana
  labels: {dashboards: warden}
  annotations: {grafana_folder: Policies}
serviceMonitor:
  enabled: true
  namespace: monitoring
  labels: {release: kube-prometheus-stack}
  interval: 15s
  scrapeTimeout: 10s
  policyServerPort: 9081
  relabelings:
    - {targetLabel: cluster, replacement: east}
  metricRelabelings:
    - {sourceLabels: [__name__], regex: go_gc_.*, action: drop}
prometheusRule:
  enabled: true
  namespace: monitoring
  labels: {release: kube-prometheus-stack}
  additionalLabels: {team: platform}
`,
		prefix: "prod-warden",
		namespaces: map[string]string{
			"ConfigMap": "grafana", "ServiceMonitor": "monitoring", "PodMonitor": "monitoring", "PrometheusRule": "monitoring",
		},
		wantSMLabels:        map[string]string{"release": "kube-prometheus-stack"},
		wantDashboardLabels: map[string]string{"dashboards": "warden"},
		wantRuleLabels:      map[string]string{"release": "kube-prometheus-stack"},
		wantAlertLabels:     map[string]string{"team": "platform"},
		wantInterval:        "15s", wantTimeout: "10s", wantPort: "9081",
		wantRelabelings: 1, wantMetricRelabelings: 1,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, tc.rel, values(t, tc.vals))
			for _, o := range r.objects {
				rel := tc.rel
				if ns, ok := tc.namespaces[o.kind]; ok {
					rel.namespace = ns
				}
				checkMetadata(t, o, rel)
			}
			for kind, schema := range schemas {
				u := unstructuredObject(t, r.find(t, kind).manifest)
				if errs := schema.validateCreate(u.Object); len(errs) > 0 {
					t.Errorf("%s: the API server would refuse it: %v", kind, errs.ToAggregate())
				}
				for k, v := range tc.wantSMLabels {
					if kind != "PrometheusRule" && u.GetLabels()[k] != v {
						t.Errorf("%s: label %s = %q, want %q", kind, k, u.GetLabels()[k], v)
					}
				}
			}
			checkDashboard(t, r, tc.prefix, tc.wantDashboardLabels)
			controller := typedObject[*appsv1.Deployment](t, r, "Deployment")
			checkServiceMonitor(t, r, controller, tc.prefix, tc.rel.namespace, tc.wantInterval, tc.wantTimeout, tc.wantRelabelings, tc.wantMetricRelabelings)
			checkPodMonitor(t, r, tc.rel.namespace, tc.wantPort, tc.wantInterval, tc.wantTimeout, tc.wantRelabelings, tc.wantMetricRelabelings)
			checkPrometheusRule(t, r, tc.prefix, tc.wantRuleLabels, tc.wantAlertLabels)
		})
	}
}

// checkDashboard checks the dashboard's ConfigMap: the JSON file verbatim,
// under the sidecar's label.
func checkDashboard(t *testing.T, r *rendered, prefix string, wantLabels map[string]string) {
	t.Helper()
	cm := named[*corev1.ConfigMap](t, r, "ConfigMap", prefix+"-dashboard")
	for k, v := range wantLabels {
		if cm.Labels[k] != v {
			t.Errorf("dashboard ConfigMap: label %s = %q, want %q", k, cm.Labels[k], v)
		}
	}
	want, err := os.ReadFile(chartDashboard)
	if err != nil {
		t.Fatal(err)
	}
	got := cm.Data["warden.json"]
	if got != string(bytes.TrimRight(want, "\n")) {
		t.Errorf("dashboard ConfigMap: warden.json differs from %s", chartDashboard)
	}
	if !json.Valid([]byte(got)) {
		t.Errorf("dashboard ConfigMap: warden.json is not JSON")
	}
}

// checkServiceMonitor checks the controller's metrics Service and its
// ServiceMonitor: the Service selects the controller's pods and targets
// their metrics port; the ServiceMonitor selects the Service by its labels
// and scrapes its port by name.
func checkServiceMonitor(t *testing.T, r *rendered, controller *appsv1.Deployment, prefix, releaseNS, interval, timeout string, relabelings, metricRelabelings int) {
	t.Helper()
	svc := named[*corev1.Service](t, r, "Service", prefix+"-controller-metrics")
	pod := controller.Spec.Template
	for k, v := range svc.Spec.Selector {
		if pod.Labels[k] != v {
			t.Errorf("metrics Service selects %s=%s, which the controller's pods do not have", k, v)
		}
	}
	if len(svc.Spec.Ports) != 1 || containerPort(pod.Spec.Containers[0], svc.Spec.Ports[0].TargetPort) != 8088 {
		t.Errorf("metrics Service ports %+v: want one, to the controller's metrics port 8088 (--metrics-bind-address)", svc.Spec.Ports)
	}

	sm := unstructuredObject(t, r.find(t, "ServiceMonitor").manifest)
	if sm.GetName() != prefix+"-controller" {
		t.Errorf("ServiceMonitor name %q, want %q", sm.GetName(), prefix+"-controller")
	}
	if ns, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames"); !reflect.DeepEqual(ns, []string{releaseNS}) {
		t.Errorf("ServiceMonitor namespaceSelector %v, want [%s]", ns, releaseNS)
	}
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if len(sel) == 0 {
		t.Error("ServiceMonitor selects every Service")
	}
	for k, v := range sel {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, which the metrics Service does not have", k, v)
		}
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("ServiceMonitor has %d endpoints, want 1", len(endpoints))
	}
	ep := endpoints[0].(map[string]any)
	if ep["port"] != svc.Spec.Ports[0].Name || ep["path"] != "/metrics" || ep["scheme"] != "http" {
		t.Errorf("ServiceMonitor endpoint %v: want port %q, /metrics over http", ep, svc.Spec.Ports[0].Name)
	}
	checkScrapeSettings(t, "ServiceMonitor", ep, interval, timeout, relabelings, metricRelabelings)
}

// checkPodMonitor checks the policy servers' PodMonitor: the pods the
// controller labels, scraped on their readiness port, with policy_server.
func checkPodMonitor(t *testing.T, r *rendered, releaseNS, port, interval, timeout string, relabelings, metricRelabelings int) {
	t.Helper()
	pm := unstructuredObject(t, r.find(t, "PodMonitor").manifest)
	if ns, _, _ := unstructured.NestedStringSlice(pm.Object, "spec", "namespaceSelector", "matchNames"); !reflect.DeepEqual(ns, []string{releaseNS}) {
		t.Errorf("PodMonitor namespaceSelector %v, want [%s] (the controller's --deployments-namespace)", ns, releaseNS)
	}
	// The labels internal/controller puts on every policy server pod
	// (commonLabels).
	wantSel := map[string]string{"app.kubernetes.io/component": "policy-server", "app.kubernetes.io/part-of": "kubewarden"}
	if sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels"); !maps.Equal(sel, wantSel) {
		t.Errorf("PodMonitor selector %v, want %v", sel, wantSel)
	}
	endpoints, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(endpoints) != 1 {
		t.Fatalf("PodMonitor has %d endpoints, want 1", len(endpoints))
	}
	ep := endpoints[0].(map[string]any)
	// webhook is the one port the policy server container declares.
	if ep["port"] != "webhook" || ep["path"] != "/metrics" || ep["scheme"] != "http" {
		t.Errorf("PodMonitor endpoint %v: want the pods of port webhook, /metrics over http", ep)
	}
	// The chart's three relabelings come first: they are what the
	// dashboard and the alerts rely on.
	chartRelabelings := 3
	checkScrapeSettings(t, "PodMonitor", ep, interval, timeout, chartRelabelings+relabelings, metricRelabelings)
	rl, _ := ep["relabelings"].([]any)
	want := []map[string]any{
		{"sourceLabels": []any{"__meta_kubernetes_pod_ip"}, "regex": "([^:]+)", "targetLabel": "__address__", "replacement": "${1}:" + port},
		{"sourceLabels": []any{"__meta_kubernetes_pod_ip"}, "regex": "(.+:.+)", "targetLabel": "__address__", "replacement": "[${1}]:" + port},
		{"sourceLabels": []any{"__meta_kubernetes_pod_label_kubewarden_policy_server"}, "targetLabel": "policy_server"},
	}
	for i, w := range want {
		if i >= len(rl) || !reflect.DeepEqual(rl[i], any(w)) {
			t.Errorf("PodMonitor relabeling %d: %v, want %v", i, rl, w)
			break
		}
	}
}

// checkScrapeSettings checks an endpoint's interval, scrapeTimeout and the
// number of its relabelings.
func checkScrapeSettings(t *testing.T, kind string, ep map[string]any, interval, timeout string, relabelings, metricRelabelings int) {
	t.Helper()
	if got, _ := ep["interval"].(string); got != interval {
		t.Errorf("%s interval %q, want %q", kind, got, interval)
	}
	if got, _ := ep["scrapeTimeout"].(string); got != timeout {
		t.Errorf("%s scrapeTimeout %q, want %q", kind, got, timeout)
	}
	if got, _ := ep["relabelings"].([]any); len(got) != relabelings {
		t.Errorf("%s has %d relabelings, want %d", kind, len(got), relabelings)
	}
	if got, _ := ep["metricRelabelings"].([]any); len(got) != metricRelabelings {
		t.Errorf("%s has %d metricRelabelings, want %d", kind, len(got), metricRelabelings)
	}
}

// checkPrometheusRule checks that the PrometheusRule holds the rule file's
// groups, with the additional labels on every alert.
func checkPrometheusRule(t *testing.T, r *rendered, prefix string, wantLabels, alertLabels map[string]string) {
	t.Helper()
	pr := unstructuredObject(t, r.find(t, "PrometheusRule").manifest)
	if pr.GetName() != prefix {
		t.Errorf("PrometheusRule name %q, want %q", pr.GetName(), prefix)
	}
	for k, v := range wantLabels {
		if pr.GetLabels()[k] != v {
			t.Errorf("PrometheusRule label %s = %q, want %q", k, pr.GetLabels()[k], v)
		}
	}
	data, err := os.ReadFile(chartAlerts)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string           `json:"name"`
			Rules []map[string]any `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(data, &file); err != nil {
		t.Fatalf("%s: %v", chartAlerts, err)
	}
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	if len(groups) != len(file.Groups) {
		t.Fatalf("PrometheusRule has %d groups, %s %d", len(groups), chartAlerts, len(file.Groups))
	}
	for i, g := range file.Groups {
		got, _ := groups[i].(map[string]any)["rules"].([]any)
		if len(got) != len(g.Rules) {
			t.Errorf("group %s: %d rules, want %d", g.Name, len(got), len(g.Rules))
			continue
		}
		for j, want := range g.Rules {
			rule := got[j].(map[string]any)
			labels := map[string]any{}
			if l, ok := want["labels"].(map[string]any); ok {
				maps.Copy(labels, l)
			}
			for k, v := range alertLabels {
				labels[k] = v
			}
			want["labels"] = labels
			if !reflect.DeepEqual(rule, want) {
				t.Errorf("rule %v:\n got %v\nwant %v", want["alert"], rule, want)
			}
		}
	}
}
