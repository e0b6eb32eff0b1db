package charttest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

// wantScanner is what the audit scanner's objects must be.
type wantScanner struct {
	// name of the CronJob, its ClusterRole, Role and their bindings.
	name string
	// serviceAccount the scanner runs as, and whether the chart creates it.
	serviceAccount       string
	createServiceAccount bool
	image, schedule      string
	// clientCertSecret is the Secret of the client certificate, which the
	// controller is told to write and the CronJob mounts.
	clientCertSecret string
	// args of the scanner container, exactly.
	args []string
	// bindView: the scanner is bound to the "view" ClusterRole.
	bindView bool
	// extraRules must be in the scanner's ClusterRole besides its own.
	extraRules []rbacv1.PolicyRule
}

// scannerArgs returns the flags the chart always passes the scanner, for a
// release in namespace, with Kubewarden's defaults unless extra replaces
// them (a flag of extra replaces the default of the same name).
func scannerArgs(namespace, reportKind string, extra ...string) []string {
	args := []string{
		"--kubewarden-namespace=" + namespace,
		"--report-kind=" + reportKind,
		"--loglevel=info",
		"--parallel-namespaces=1",
		"--parallel-resources=100",
		"--parallel-policies=5",
		"--page-size=100",
		"--extra-ca=/pki/ca.crt",
		"--client-cert=/pki/tls.crt",
		"--client-key=/pki/tls.key",
	}
	for _, e := range extra {
		name, _, _ := strings.Cut(e, "=")
		for i, a := range args {
			if strings.HasPrefix(a, name+"=") {
				args[i] = e
			}
		}
	}
	return args
}

// allReportCRDs are the CRDs of config/crd/reports.
var allReportCRDs = []string{
	"openreports.io_clusterreports.yaml", "openreports.io_reports.yaml",
	"wgpolicyk8s.io_clusterpolicyreports.yaml", "wgpolicyk8s.io_policyreports.yaml",
}

// checkAuditScanner checks the CronJob, its RBAC and that the controller
// writes the client certificate the CronJob mounts; with want nil, that
// none of the scanner's objects is rendered.
func checkAuditScanner(t *testing.T, r *rendered, rel release, controller *appsv1.Deployment, want *wantScanner) {
	if want == nil {
		if n := r.count("CronJob"); n > 0 {
			t.Errorf("%d CronJobs rendered, want none", n)
		}
		return
	}
	cj := named[*batchv1.CronJob](t, r, "CronJob", want.name)
	if len(cj.Name) > 52 {
		t.Errorf("CronJob name %q is longer than 52 characters: its Jobs could not be named", cj.Name)
	}
	s := cj.Spec
	if s.Schedule != want.schedule {
		t.Errorf("schedule = %q, want %q", s.Schedule, want.schedule)
	}
	if s.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("concurrencyPolicy = %q, want Forbid: two runs would delete each other's reports", s.ConcurrencyPolicy)
	}
	if s.FailedJobsHistoryLimit == nil || *s.FailedJobsHistoryLimit != 5 || s.SuccessfulJobsHistoryLimit == nil || *s.SuccessfulJobsHistoryLimit != 3 {
		t.Errorf("history limits: failed %v, successful %v, want Kubewarden's 5 and 3", s.FailedJobsHistoryLimit, s.SuccessfulJobsHistoryLimit)
	}
	pod := s.JobTemplate.Spec.Template.Spec
	if pod.ServiceAccountName != want.serviceAccount {
		t.Errorf("serviceAccountName = %q, want %q", pod.ServiceAccountName, want.serviceAccount)
	}
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy = %q, want Never", pod.RestartPolicy)
	}
	if got := s.JobTemplate.Spec.Template.Labels["app.kubernetes.io/component"]; got != "audit-scanner" {
		t.Errorf("pod label app.kubernetes.io/component = %q, want audit-scanner", got)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("containers = %d, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != want.image {
		t.Errorf("image = %q, want %q", c.Image, want.image)
	}
	if !slices.Equal(c.Args, want.args) {
		t.Errorf("args =\n\t%s\nwant\n\t%s", strings.Join(c.Args, "\n\t"), strings.Join(want.args, "\n\t"))
	}
	checkSecurity(t, pod.SecurityContext, c.SecurityContext)

	// The files the flags name are the keys of the client certificate
	// Secret, the one the controller is told to keep.
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	files := map[string]string{} // path in the container -> Secret/key
	for _, m := range c.VolumeMounts {
		v := volumes[m.Name]
		if v.Secret == nil {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("Secret %s mounted read-write", v.Secret.SecretName)
		}
		for _, item := range v.Secret.Items {
			files[m.MountPath+"/"+item.Path] = v.Secret.SecretName + "/" + item.Key
		}
	}
	for flag, key := range map[string]string{"--extra-ca": "ca.crt", "--client-cert": "tls.crt", "--client-key": "tls.key"} {
		var path string
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				path = v
			}
		}
		if got, wantFile := files[path], want.clientCertSecret+"/"+key; got != wantFile {
			t.Errorf("%s=%s is %q, want the Secret key %s", flag, path, got, wantFile)
		}
	}
	wantFlag := "--audit-scanner-client-cert-secret-name=" + want.clientCertSecret
	if args := controller.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, wantFlag) {
		t.Errorf("controller args %q lack %q", args, wantFlag)
	}
	if want.createServiceAccount {
		named[*corev1.ServiceAccount](t, r, "ServiceAccount", want.serviceAccount)
	}
	checkScannerRBAC(t, r, rel, want)
}

// checkScannerRBAC checks what the scanner may do: read the namespaces, the
// policies and PolicyServers, the PolicyServers' Services in the release
// namespace, and what it audits; write the reports, and nothing else.
func checkScannerRBAC(t *testing.T, r *rendered, rel release, want *wantScanner) {
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: want.serviceAccount, Namespace: rel.namespace}}
	role := named[*rbacv1.ClusterRole](t, r, "ClusterRole", want.name)
	binding := named[*rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding", want.name)
	if binding.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}) || !slices.Equal(binding.Subjects, subjects) {
		t.Errorf("ClusterRoleBinding %s: roleRef %+v, subjects %+v", binding.Name, binding.RoleRef, binding.Subjects)
	}
	var views int
	for _, o := range r.objects {
		if b, ok := o.typed.(*rbacv1.ClusterRoleBinding); ok && b.RoleRef.Name == "view" {
			views++
			if b.RoleRef.Kind != "ClusterRole" || !slices.Equal(b.Subjects, subjects) {
				t.Errorf("ClusterRoleBinding %s: roleRef %+v, subjects %+v", b.Name, b.RoleRef, b.Subjects)
			}
		}
	}
	if wantViews := map[bool]int{true: 1, false: 0}[want.bindView]; views != wantViews {
		t.Errorf("%d bindings of the view ClusterRole, want %d", views, wantViews)
	}

	read := []string{"get", "list", "watch"}
	write := []string{"create", "patch", "deletecollection"} // what a run does to reports
	type access struct {
		group, resource string
		verbs           []string
	}
	allowed := []access{{"", "namespaces", read}}
	for _, res := range []string{"clusteradmissionpolicies", "admissionpolicies", "clusteradmissionpolicygroups", "admissionpolicygroups", "policyservers"} {
		allowed = append(allowed, access{"policies.kubewarden.io", res, read})
	}
	reports := map[string][]string{"openreports.io": {"reports", "clusterreports"}, "wgpolicyk8s.io": {"policyreports", "clusterpolicyreports"}}
	for group, resources := range reports {
		for _, res := range resources {
			allowed = append(allowed, access{group, res, append([]string{"list"}, write...)})
		}
	}
	for _, a := range allowed {
		for _, verb := range a.verbs {
			if !allows(role.Rules, a.group, a.resource, verb) {
				t.Errorf("the scanner may not %s %s.%s", verb, a.resource, a.group)
			}
		}
	}
	for _, extra := range want.extraRules {
		if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(r, extra) }) {
			t.Errorf("ClusterRole lacks the extra rule %+v", extra)
		}
	}
	// Nothing but reports is written, and no Secret is read unless an
	// extra rule says so.
	for _, rule := range role.Rules {
		if slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Resources, "*") {
			t.Errorf("wildcard rule %+v", rule)
		}
		for _, verb := range rule.Verbs {
			if slices.Contains(read, verb) {
				continue
			}
			for _, g := range rule.APIGroups {
				if len(reports[g]) == 0 {
					t.Errorf("the scanner may %s %v of the API group %q", verb, rule.Resources, g)
				}
			}
		}
	}
	secretsRead := slices.ContainsFunc(want.extraRules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "secrets") })
	if got := allows(role.Rules, "", "secrets", "list"); got != secretsRead {
		t.Errorf("the scanner may list secrets: %v, want %v", got, secretsRead)
	}

	// The PolicyServers' Services, in the release namespace only.
	nsRole := named[*rbacv1.Role](t, r, "Role", want.name)
	if nsRole.Namespace != rel.namespace || !allows(nsRole.Rules, "", "services", "list") || len(nsRole.Rules) != 1 {
		t.Errorf("Role %s/%s rules %+v, want list of services only", nsRole.Namespace, nsRole.Name, nsRole.Rules)
	}
	rb := named[*rbacv1.RoleBinding](t, r, "RoleBinding", want.name)
	if rb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: nsRole.Name}) || !slices.Equal(rb.Subjects, subjects) {
		t.Errorf("RoleBinding %s: roleRef %+v, subjects %+v", rb.Name, rb.RoleRef, rb.Subjects)
	}
}

// allows reports whether rules grant verb on resource of group.
func allows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	match := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return match(r.APIGroups, group) && match(r.Resources, resource) && match(r.Verbs, verb)
	})
}

// checkReportCRDs checks that the chart renders exactly the report CRDs of
// files (names in config/crd/reports), each the same as in config/, kept
// on uninstall.
func checkReportCRDs(t *testing.T, r *rendered, files []string) {
	if n := r.count("CustomResourceDefinition"); n != len(files) {
		t.Errorf("%d CRDs rendered, want %d (%v)", n, len(files), files)
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(reportCRDDir, f))
		if err != nil {
			t.Fatal(err)
		}
		var want apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(data, &want); err != nil {
			t.Fatalf("decoding %s: %v", f, err)
		}
		got := named[*apiextensionsv1.CustomResourceDefinition](t, r, "CustomResourceDefinition", want.Name)
		if !equality.Semantic.DeepEqual(got.Spec, want.Spec) {
			t.Errorf("CRD %s: the spec differs from %s", want.Name, f)
		}
		for k, v := range want.Annotations {
			if got.Annotations[k] != v {
				t.Errorf("CRD %s: annotation %s = %q, want %q", want.Name, k, got.Annotations[k], v)
			}
		}
		if got.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s: no helm.sh/resource-policy: keep, helm uninstall would delete every report", want.Name)
		}
	}
}
