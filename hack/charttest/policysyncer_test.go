package charttest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestPolicySyncer renders the policy syncer: off by default; when on, a
// Deployment with leader election in the release namespace, and roles that
// read exactly the resources and Secrets the values name.
func TestPolicySyncer(t *testing.T) {
	rel := release{"hub", "kubewarden"}
	if r := render(t, rel, nil); r.count("Deployment") != 1 {
		t.Errorf("default values render %d Deployments, want the controller's only", r.count("Deployment"))
	}

	r := render(t, rel, values(t, `
policySyncer:
  enabled: true
  resyncPeriod: 30s
  kubeconfigSecrets: [spoke-a, spoke-b]
  policiesToSync:
    - {group: policies.kubewarden.io, resource: clusteradmissionpolicies}
    - {group: example.com, resource: ratelimitpolicies}
  ocm: true
`))
	const name = "hub-warden-policy-syncer"
	deploy := named[*appsv1.Deployment](t, r, "Deployment", name)
	if deploy.Namespace != rel.namespace {
		t.Errorf("Deployment namespace = %q, want %q", deploy.Namespace, rel.namespace)
	}
	pod := deploy.Spec.Template.Spec
	if pod.ServiceAccountName != name {
		t.Errorf("serviceAccountName = %q, want %q", pod.ServiceAccountName, name)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("containers = %d, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	wantArgs := []string{"--leader-elect", "--namespace=kubewarden", "--metrics-bind-address=:8088",
		"--health-probe-bind-address=:8081", "--resync-period=30s", "--spoke-timeout=10s"}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args = %v, want %v", c.Args, wantArgs)
	}
	if want := "ghcr.io/wardenhq/warden-policy-syncer:"; len(c.Image) <= len(want) || c.Image[:len(want)] != want {
		t.Errorf("image = %q, want %s<appVersion>", c.Image, want)
	}
	checkSecurity(t, pod.SecurityContext, c.SecurityContext)

	role := named[*rbacv1.ClusterRole](t, r, "ClusterRole", name)
	for _, want := range []rbacv1.PolicyRule{
		{APIGroups: []string{"policies.kubewarden.io"}, Resources: []string{"clusteradmissionpolicies"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"example.com"}, Resources: []string{"ratelimitpolicies"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"work.open-cluster-management.io"}, Resources: []string{"manifestworks"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{APIGroups: []string{"sync.wardenhq.io"}, Resources: []string{"policysyncs/status", "policysyncs/finalizers"}, Verbs: []string{"get", "update", "patch"}},
	} {
		if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return equalRule(r, want) }) {
			t.Errorf("ClusterRole lacks %+v; has %+v", want, role.Rules)
		}
	}
	for _, rule := range role.Rules {
		if slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.APIGroups, "*") {
			t.Errorf("ClusterRole grants %+v: the syncer reads its Secrets through its Role only", rule)
		}
	}
	ns := named[*rbacv1.Role](t, r, "Role", name)
	var secrets []rbacv1.PolicyRule
	for _, rule := range ns.Rules {
		if slices.Contains(rule.Resources, "secrets") {
			secrets = append(secrets, rule)
		}
	}
	wantSecrets := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"},
		ResourceNames: []string{"spoke-a", "spoke-b"}, Verbs: []string{"get", "list", "watch"}}
	if len(secrets) != 1 || !equalRule(secrets[0], wantSecrets) {
		t.Errorf("Role's Secret rules = %+v, want only %+v", secrets, wantSecrets)
	}
	binding := named[*rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding", name)
	if binding.RoleRef.Name != name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != name || binding.Subjects[0].Namespace != rel.namespace {
		t.Errorf("ClusterRoleBinding = %+v, want %s bound to the ServiceAccount %s/%s", binding, name, rel.namespace, name)
	}

	noOCM := render(t, rel, values(t, "policySyncer: {enabled: true}"))
	for _, rule := range named[*rbacv1.ClusterRole](t, noOCM, "ClusterRole", name).Rules {
		if slices.Contains(rule.APIGroups, "work.open-cluster-management.io") {
			t.Errorf("ManifestWorks granted without policySyncer.ocm: %+v", rule)
		}
	}
	for _, rule := range named[*rbacv1.Role](t, noOCM, "Role", name).Rules {
		if slices.Contains(rule.Resources, "secrets") {
			t.Errorf("Secrets granted with no policySyncer.kubeconfigSecrets: %+v", rule)
		}
	}
}

func equalRule(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
		slices.Equal(a.ResourceNames, b.ResourceNames) && slices.Equal(a.Verbs, b.Verbs)
}

// syncerRBACFile is the policy syncer's RBAC as the chart renders it for
// the cluster test that runs the syncer with exactly these permissions
// (test/cluster's TestPolicySyncChartRBAC).
var syncerRBACFile = filepath.Join(repoRoot, "test", "cluster", "testdata", "policysync-rbac", "rbac.yaml")

// syncerRBACValues are the values that file is rendered with.
const syncerRBACValues = `
policySyncer:
  enabled: true
  kubeconfigSecrets: [spoke-a]
  policiesToSync:
    - {group: policies.kubewarden.io, resource: clusteradmissionpolicies}
`

// TestPolicySyncerRBACFile checks that the cluster test's copy of the
// syncer's RBAC is what the chart renders; WARDEN_UPDATE_RBAC=1 rewrites it.
func TestPolicySyncerRBACFile(t *testing.T) {
	r := render(t, release{"warden", "kubewarden"}, values(t, syncerRBACValues))
	var docs []string
	for _, o := range r.objects {
		if strings.HasSuffix(o.template, "policy-syncer.yaml") && o.kind != "Deployment" {
			docs = append(docs, strings.TrimSpace(o.manifest))
		}
	}
	want := "# The policy syncer's ServiceAccount and RBAC as charts/warden renders them\n" +
		"# (hack/charttest's TestPolicySyncerRBACFile keeps this copy; WARDEN_UPDATE_RBAC=1\n" +
		"# hack/chart-test.sh -run TestPolicySyncerRBACFile rewrites it).\n" +
		strings.Join(docs, "\n---\n") + "\n"
	if os.Getenv("WARDEN_UPDATE_RBAC") == "1" {
		if err := os.MkdirAll(filepath.Dir(syncerRBACFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(syncerRBACFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(syncerRBACFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s differs from the chart's rendering; run WARDEN_UPDATE_RBAC=1 hack/chart-test.sh -run TestPolicySyncerRBACFile", syncerRBACFile)
	}
}
