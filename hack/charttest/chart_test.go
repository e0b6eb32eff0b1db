package charttest

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// wantRelease is what a rendering must produce.
type wantRelease struct {
	// prefix of the object names (the chart's fullname).
	prefix string
	// serviceAccount the controller runs as, and whether the chart creates it.
	serviceAccount       string
	createServiceAccount bool
	controllerImage      string
	controllerReplicas   int32
	// args of the controller container, exactly.
	args      []string
	resources corev1.ResourceRequirements
	// policyServer is the expected spec of the default PolicyServer (after
	// the CRD's defaults), nil when it must not be rendered.
	policyServer map[string]any
	// policyCache is the claim the chart creates for the policy servers'
	// shared cache, with its size and class; empty when none.
	policyCache, policyCacheSize, policyCacheClass string
	// auditScanner is what the audit scanner's objects must be; nil when
	// the chart must render none of them.
	auditScanner *wantScanner
	// reportCRDs are the report CRDs the chart installs, by file name in
	// config/crd/reports.
	reportCRDs []string
	// contextAwareRules are the rules of the policy servers' ClusterRole for
	// context-aware policies; nil when the chart must render none.
	contextAwareRules []rbacv1.PolicyRule
	// uninstallArgs are the arguments of the pre-delete hook's container;
	// nil when the chart must render no hook.
	uninstallArgs []string
}

var defaultResources = corev1.ResourceRequirements{
	Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("100m"),
		corev1.ResourceMemory: resource.MustParse("128Mi"),
	},
	Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
}

// controllerArgs returns the flags the chart always passes, for a release
// in namespace whose webhook Service is service, followed by extra.
func controllerArgs(namespace, service string, extra ...string) []string {
	return append([]string{
		"--leader-elect",
		"--deployments-namespace=" + namespace,
		"--webhook-service-name=" + service,
		"--metrics-bind-address=:8088",
		"--health-probe-bind-address=:8081",
		"--webhook-server-port=9443",
	}, extra...)
}

var renderTests = []struct {
	name string
	rel  release
	vals string
	want wantRelease
}{
	{
		name: "defaults",
		rel:  release{"warden", "warden-system"},
		want: wantRelease{
			prefix:               "warden",
			serviceAccount:       "warden-controller",
			createServiceAccount: true,
			controllerImage:      "ghcr.io/wardenhq/warden-controller:0.1.0",
			controllerReplicas:   1,
			args: controllerArgs("warden-system", "warden-controller-webhook", "--always-accept-admission-reviews-on-deployments-namespace",
				"--audit-scanner-client-cert-secret-name=kubewarden-audit-scanner-client-cert"),
			resources: defaultResources,
			policyServer: map[string]any{
				"image":    "ghcr.io/wardenhq/warden-policy-server:0.1.0",
				"replicas": int64(1),
			},
			auditScanner: &wantScanner{
				name:                 "warden-audit-scanner",
				serviceAccount:       "warden-audit-scanner",
				createServiceAccount: true,
				image:                "ghcr.io/wardenhq/warden-audit-scanner:0.1.0",
				schedule:             "*/60 * * * *",
				clientCertSecret:     "kubewarden-audit-scanner-client-cert",
				args:                 scannerArgs("warden-system", "openreports"),
				bindView:             true,
			},
			reportCRDs:        allReportCRDs,
			contextAwareRules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}},
			uninstallArgs: []string{"uninstall", "--deployments-namespace=warden-system", "--controller-deployment=warden-controller",
				"--audit-scanner-client-cert-secret-name=kubewarden-audit-scanner-client-cert", "--grace-period=60s", "--timeout=4m"},
		},
	},
	{
		name: "overrides",
		rel:  release{"prod", "admission"},
		vals: `
commonLabels:
  team: platform
  app.kubernetes.io/part-of: something-else
imagePullSecrets:
  - name: ghcr
controller:
  image:
    repository: registry.example.com/warden/controller
    tag: v9.9.9
  replicas: 2
  alwaysAcceptAdmissionReviewsOnDeploymentsNamespace: false
  enableMetrics: true
  extraArgs: ["--enable-tracing"]
  serviceAccount:
    create: false
    name: existing-sa
  resources:
    requests: {cpu: 50m, memory: 64Mi}
    limits: null # Helm merges maps with the defaults; null removes a key
  podLabels:
    app.kubernetes.io/component: not-the-controller
    extra: "yes"
policyServer:
  image:
    repository: registry.example.com/warden/policy-server
    tag: v2.0.0
  replicas: 3
  spec:
    image: ignored
    minAvailable: 1
    requests: {cpu: 100m, memory: 256Mi}
    limits: {memory: 1Gi}
    insecureSources: ["registry.example.com:5000"]
  policyCache:
    create: true
    size: 5Gi
    storageClassName: nfs
  contextAwareRules:
    - apiGroups: [""]
      resources: [configmaps, namespaces]
      verbs: [get, list, watch]
reportCRDs:
  openReports: false
uninstall:
  gracePeriod: 30s
  timeout: 2m30s
  activeDeadlineSeconds: 180
auditScanner:
  image:
    repository: registry.example.com/warden/audit-scanner
    tag: v9.9.9
  cronJob:
    schedule: "30 2 * * *"
  reportKind: policyreport
  logLevel: debug
  parallelNamespaces: 4
  outputScan: true
  ignoreNamespaces: [kube-system, monitoring]
  extraArgs: ["--metrics-file=/tmp/audit.prom"]
  clientCertSecretName: scanner-cert
  serviceAccount:
    create: false
    name: existing-scanner
  rbac:
    bindViewClusterRole: false
    extraRules:
      - apiGroups: [""]
        resources: [pods, secrets]
        verbs: [get, list, watch]
`,
		want: wantRelease{
			prefix:             "prod-warden",
			serviceAccount:     "existing-sa",
			controllerImage:    "registry.example.com/warden/controller:v9.9.9",
			controllerReplicas: 2,
			args: controllerArgs("admission", "prod-warden-controller-webhook", "--audit-scanner-client-cert-secret-name=scanner-cert",
				"--enable-metrics", "--enable-tracing"),
			resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("50m"),
				corev1.ResourceMemory: resource.MustParse("64Mi"),
			}},
			policyServer: map[string]any{
				"image":           "registry.example.com/warden/policy-server:v2.0.0",
				"replicas":        int64(3),
				"minAvailable":    int64(1),
				"requests":        map[string]any{"cpu": "100m", "memory": "256Mi"},
				"limits":          map[string]any{"memory": "1Gi"},
				"insecureSources": []any{"registry.example.com:5000"},
				"policyCache":     map[string]any{"claimName": "prod-warden-policy-cache"},
			},
			policyCache: "prod-warden-policy-cache", policyCacheSize: "5Gi", policyCacheClass: "nfs",
			auditScanner: &wantScanner{
				name:             "prod-warden-audit-scanner",
				serviceAccount:   "existing-scanner",
				image:            "registry.example.com/warden/audit-scanner:v9.9.9",
				schedule:         "30 2 * * *",
				clientCertSecret: "scanner-cert",
				args: append(scannerArgs("admission", "policyreport", "--loglevel=debug", "--parallel-namespaces=4"),
					"--output-scan", "--ignore-namespaces=kube-system", "--ignore-namespaces=monitoring", "--metrics-file=/tmp/audit.prom"),
				extraRules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "secrets"}, Verbs: []string{"get", "list", "watch"}}},
			},
			reportCRDs:        []string{"wgpolicyk8s.io_clusterpolicyreports.yaml", "wgpolicyk8s.io_policyreports.yaml"},
			contextAwareRules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps", "namespaces"}, Verbs: []string{"get", "list", "watch"}}},
			uninstallArgs: []string{"uninstall", "--deployments-namespace=admission", "--controller-deployment=prod-warden-controller",
				"--audit-scanner-client-cert-secret-name=scanner-cert", "--grace-period=30s", "--timeout=2m30s"},
		},
	},
	{
		name: "fullnameOverride without policy server, audit scanner or report CRDs",
		rel:  release{"warden", "kube-admission"},
		vals: `
fullnameOverride: wd
commonLabels: null
controller:
  podLabels: null
policyServer:
  enabled: false
  contextAwareRules: []
auditScanner:
  enabled: false
reportCRDs:
  openReports: false
  policyReports: false
uninstall:
  enabled: false
`,
		want: wantRelease{
			prefix:               "wd",
			serviceAccount:       "wd-controller",
			createServiceAccount: true,
			controllerImage:      "ghcr.io/wardenhq/warden-controller:0.1.0",
			controllerReplicas:   1,
			args: controllerArgs("kube-admission", "wd-controller-webhook", "--always-accept-admission-reviews-on-deployments-namespace",
				"--audit-scanner-client-cert-secret-name="),
			resources: defaultResources,
		},
	},
}

// values decodes a test's values.
func values(t *testing.T, s string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(s), &vals); err != nil {
		t.Fatalf("decoding values: %v", err)
	}
	return vals
}

func TestRender(t *testing.T) {
	for _, tc := range renderTests {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, tc.rel, values(t, tc.vals))
			w := tc.want
			controller := w.prefix + "-controller"
			webhookService := w.prefix + "-controller-webhook"

			// The release's objects, in Helm's install order: custom
			// resources come after every built-in kind, so the default
			// PolicyServer is created last. Nothing is a hook.
			var wantKinds []string
			s := w.auditScanner
			if w.createServiceAccount {
				wantKinds = append(wantKinds, "ServiceAccount")
			}
			if s != nil && s.createServiceAccount {
				wantKinds = append(wantKinds, "ServiceAccount")
			}
			if w.policyCache != "" {
				wantKinds = append(wantKinds, "PersistentVolumeClaim")
			}
			for range w.reportCRDs {
				wantKinds = append(wantKinds, "CustomResourceDefinition")
			}
			// Roles: the policy servers', the audit scanner's and the
			// uninstall hook's.
			roles := 1
			if s != nil {
				roles++
			}
			if w.uninstallArgs != nil {
				roles++
			}
			// ClusterRoles: the controller's, the audit scanner's and the
			// policy servers' for context-aware policies; the bindings of
			// each, and the audit scanner's of view.
			clusterRoles, clusterBindings := 1, 1
			if s != nil {
				clusterRoles, clusterBindings = clusterRoles+1, clusterBindings+1
				if s.bindView {
					clusterBindings++
				}
			}
			if w.contextAwareRules != nil {
				clusterRoles, clusterBindings = clusterRoles+1, clusterBindings+1
			}
			for range clusterRoles {
				wantKinds = append(wantKinds, "ClusterRole")
			}
			for range clusterBindings {
				wantKinds = append(wantKinds, "ClusterRoleBinding")
			}
			for range roles {
				wantKinds = append(wantKinds, "Role")
			}
			for range roles {
				wantKinds = append(wantKinds, "RoleBinding")
			}
			wantKinds = append(wantKinds, "Service", "Deployment")
			if s != nil {
				wantKinds = append(wantKinds, "CronJob")
			}
			if w.policyServer != nil {
				wantKinds = append(wantKinds, policyServerKind)
			}
			if got := r.kinds(); !slices.Equal(got, wantKinds) {
				t.Fatalf("rendered kinds = %v, want %v", got, wantKinds)
			}
			checkUninstallHook(t, r, tc.rel, controller, w)
			checkContextAwareRBAC(t, r, tc.rel, w)

			for _, o := range r.objects {
				checkMetadata(t, o, tc.rel)
			}

			deploy := typedObject[*appsv1.Deployment](t, r, "Deployment")
			if deploy.Name != controller {
				t.Errorf("Deployment name = %q, want %q", deploy.Name, controller)
			}
			svc := typedObject[*corev1.Service](t, r, "Service")
			if svc.Name != webhookService {
				t.Errorf("Service name = %q, want %q", svc.Name, webhookService)
			}
			checkDeployment(t, deploy, w)
			checkWebhookService(t, svc, deploy)

			if w.createServiceAccount {
				named[*corev1.ServiceAccount](t, r, "ServiceAccount", w.serviceAccount)
			}
			checkRBAC(t, r, tc.rel, controller, w.serviceAccount)
			checkAuditScanner(t, r, tc.rel, deploy, s)
			checkReportCRDs(t, r, w.reportCRDs)

			if w.policyServer != nil {
				checkPolicyServer(t, r.find(t, policyServerKind), w.policyServer)
			}
			if w.policyCache != "" {
				checkPolicyCache(t, typedObject[*corev1.PersistentVolumeClaim](t, r, "PersistentVolumeClaim"), w)
			}
			checkNotes(t, r.notes, tc.rel, controller, w.policyServer != nil, w.uninstallArgs != nil)
			runNow := "create job --from=cronjob/"
			if s != nil {
				runNow += s.name
			}
			if got := strings.Contains(r.notes, runNow); got != (s != nil) {
				t.Errorf("NOTES.txt shows %q: %v, want %v", runNow, got, s != nil)
			}
		})
	}
}

// checkMetadata checks an object's namespace and the chart's labels.
func checkMetadata(t *testing.T, o renderedObject, rel release) {
	isNamespaced, known := namespaced[o.kind]
	if !known {
		t.Errorf("%s %q (%s): a kind this test does not know", o.kind, o.meta.GetName(), o.template)
		return
	}
	wantNS := ""
	if isNamespaced {
		wantNS = rel.namespace
	}
	if got := o.meta.GetNamespace(); got != wantNS {
		t.Errorf("%s %q: namespace = %q, want %q", o.kind, o.meta.GetName(), got, wantNS)
	}
	if n := o.meta.GetName(); n == "" || len(n) > 63 {
		t.Errorf("%s %q: name empty or longer than 63 characters", o.kind, n)
	}
	labels := o.meta.GetLabels()
	for k, v := range map[string]string{
		"app.kubernetes.io/name":       "warden",
		"app.kubernetes.io/instance":   rel.name,
		"app.kubernetes.io/managed-by": "Helm",
		"app.kubernetes.io/part-of":    "warden",
		"app.kubernetes.io/version":    "0.1.0",
		"helm.sh/chart":                "warden-0.1.0",
	} {
		if labels[k] != v {
			t.Errorf("%s %q: label %s = %q, want %q", o.kind, o.meta.GetName(), k, labels[k], v)
		}
	}
}

func checkDeployment(t *testing.T, d *appsv1.Deployment, w wantRelease) {
	if d.Spec.Replicas == nil || *d.Spec.Replicas != w.controllerReplicas {
		t.Errorf("replicas = %v, want %d", d.Spec.Replicas, w.controllerReplicas)
	}
	if d.Spec.Selector == nil || len(d.Spec.Selector.MatchLabels) == 0 {
		t.Fatalf("Deployment has no selector")
	}
	podLabels := d.Spec.Template.Labels
	for k, v := range d.Spec.Selector.MatchLabels {
		if podLabels[k] != v {
			t.Errorf("pod label %s = %q, the selector wants %q", k, podLabels[k], v)
		}
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != w.serviceAccount {
		t.Errorf("serviceAccountName = %q, want %q", pod.ServiceAccountName, w.serviceAccount)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("containers = %d, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != w.controllerImage {
		t.Errorf("image = %q, want %q", c.Image, w.controllerImage)
	}
	if !slices.Equal(c.Args, w.args) {
		t.Errorf("args =\n\t%s\nwant\n\t%s", strings.Join(c.Args, "\n\t"), strings.Join(w.args, "\n\t"))
	}
	if !equality.Semantic.DeepEqual(c.Resources, w.resources) {
		t.Errorf("resources = %+v, want %+v", c.Resources, w.resources)
	}

	wantPorts := map[string]int32{"webhook-server": 9443, "metrics": 8088, "health": 8081}
	for name, port := range wantPorts {
		if got := containerPort(c, intstr.FromString(name)); got != port {
			t.Errorf("container port %q = %d, want %d", name, got, port)
		}
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe: want an HTTP GET", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path || containerPort(c, p.probe.HTTPGet.Port) != 8081 {
			t.Errorf("%s probe: GET %s on port %s, want %s on 8081", p.name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.String(), p.path)
		}
	}
	checkSecurity(t, pod.SecurityContext, c.SecurityContext)

	// The read-only root filesystem leaves /tmp as the only writable path.
	var tmp bool
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/tmp" {
			tmp = true
		}
	}
	if !tmp {
		t.Errorf("no volume mounted on /tmp")
	}
}

// checkSecurity checks the hardening the chart promises: the "restricted"
// Pod Security Standard plus a read-only root filesystem.
func checkSecurity(t *testing.T, pod *corev1.PodSecurityContext, c *corev1.SecurityContext) {
	if pod == nil || c == nil {
		t.Fatalf("pod security context %v, container security context %v: want both", pod, c)
	}
	runAsNonRoot := c.RunAsNonRoot
	if runAsNonRoot == nil {
		runAsNonRoot = pod.RunAsNonRoot
	}
	if runAsNonRoot == nil || !*runAsNonRoot {
		t.Errorf("runAsNonRoot is not true")
	}
	seccomp := c.SeccompProfile
	if seccomp == nil {
		seccomp = pod.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccomp profile = %v, want RuntimeDefault", seccomp)
	}
	if c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem {
		t.Errorf("readOnlyRootFilesystem is not true")
	}
	if c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation {
		t.Errorf("allowPrivilegeEscalation is not false")
	}
	if c.Privileged != nil && *c.Privileged {
		t.Errorf("privileged")
	}
	if c.Capabilities == nil || !slices.Equal(c.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(c.Capabilities.Add) > 0 {
		t.Errorf("capabilities = %+v, want drop [ALL] and add nothing", c.Capabilities)
	}
}

// containerPort resolves a port name or number of container c; 0 when it
// names no port of c.
func containerPort(c corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return 0
}

// checkWebhookService checks that the Service sends port 443 to the
// controller's webhook server, port 9443, and that the controller is told
// its name.
func checkWebhookService(t *testing.T, svc *corev1.Service, d *appsv1.Deployment) {
	if len(svc.Spec.Selector) == 0 {
		t.Fatalf("Service has no selector")
	}
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("Service selects %s=%q, the controller's pods have %q", k, v, d.Spec.Template.Labels[k])
		}
	}
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("Service ports = %+v, want one", svc.Spec.Ports)
	}
	p := svc.Spec.Ports[0]
	c := d.Spec.Template.Spec.Containers[0]
	if p.Port != 443 || containerPort(c, p.TargetPort) != 9443 {
		t.Errorf("Service port %d -> container port %d, want 443 -> 9443", p.Port, containerPort(c, p.TargetPort))
	}
	if want := "--webhook-service-name=" + svc.Name; !slices.Contains(c.Args, want) {
		t.Errorf("controller args %q lack %q", c.Args, want)
	}
}

// checkRBAC checks that the ClusterRole has exactly the generated rules and
// is bound to the controller's ServiceAccount.
func checkRBAC(t *testing.T, r *rendered, rel release, name, serviceAccount string) {
	role := named[*rbacv1.ClusterRole](t, r, "ClusterRole", name)
	if want := generatedRules(t); !equality.Semantic.DeepEqual(role.Rules, want) {
		gotYAML, _ := yaml.Marshal(role.Rules)
		wantYAML, _ := yaml.Marshal(want)
		t.Errorf("ClusterRole rules differ from %s; run hack/sync-chart-crds.sh\ngot:\n%s\nwant:\n%s", generatedRole, gotYAML, wantYAML)
	}
	binding := named[*rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding", name)
	wantRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}
	if binding.RoleRef != wantRef {
		t.Errorf("roleRef = %+v, want %+v", binding.RoleRef, wantRef)
	}
	wantSubjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: rel.namespace}}
	if !slices.Equal(binding.Subjects, wantSubjects) {
		t.Errorf("subjects = %+v, want %+v", binding.Subjects, wantSubjects)
	}
}

// checkUninstallHook checks the pre-delete hook: the only hook, a Job that
// runs `controller uninstall` as the controller does (image, ServiceAccount,
// security contexts), and the Role that lets it scale the controller's
// Deployment to zero.
func checkUninstallHook(t *testing.T, r *rendered, rel release, controller string, w wantRelease) {
	t.Helper()
	if w.uninstallArgs == nil {
		if len(r.hooks) > 0 {
			t.Errorf("%d hooks, want none", len(r.hooks))
		}
		return
	}
	if len(r.hooks) != 1 || r.hooks[0].kind != "Job" {
		t.Fatalf("hooks = %v, want one Job", r.hooks)
	}
	job := r.hooks[0].typed.(*batchv1.Job)
	name := controller + "-uninstall"
	if job.Name != name || job.Namespace != rel.namespace {
		t.Errorf("hook Job %s/%s, want %s/%s", job.Namespace, job.Name, rel.namespace, name)
	}
	if got := job.Annotations["helm.sh/hook"]; got != "pre-delete" {
		t.Errorf("helm.sh/hook = %q, want pre-delete", got)
	}
	if got := job.Annotations["helm.sh/hook-delete-policy"]; got != "before-hook-creation,hook-succeeded" {
		t.Errorf("helm.sh/hook-delete-policy = %q", got)
	}
	pod := job.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever || pod.ServiceAccountName != w.serviceAccount {
		t.Errorf("hook pod: restartPolicy %q, serviceAccountName %q, want Never and %q", pod.RestartPolicy, pod.ServiceAccountName, w.serviceAccount)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("hook pod has %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != w.controllerImage || !slices.Equal(c.Args, w.uninstallArgs) {
		t.Errorf("hook container: image %q args %q, want %q %q", c.Image, c.Args, w.controllerImage, w.uninstallArgs)
	}
	deploy := typedObject[*appsv1.Deployment](t, r, "Deployment")
	if !equality.Semantic.DeepEqual(c.SecurityContext, deploy.Spec.Template.Spec.Containers[0].SecurityContext) ||
		!equality.Semantic.DeepEqual(pod.SecurityContext, deploy.Spec.Template.Spec.SecurityContext) {
		t.Errorf("the hook's security contexts differ from the controller's")
	}
	role := named[*rbacv1.Role](t, r, "Role", name)
	want := []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, ResourceNames: []string{controller}, Verbs: []string{"get", "patch"}}}
	if !equality.Semantic.DeepEqual(role.Rules, want) {
		t.Errorf("uninstall Role rules = %+v, want %+v", role.Rules, want)
	}
	binding := named[*rbacv1.RoleBinding](t, r, "RoleBinding", name)
	wantSubjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: w.serviceAccount, Namespace: rel.namespace}}
	if binding.RoleRef.Name != name || !slices.Equal(binding.Subjects, wantSubjects) {
		t.Errorf("uninstall RoleBinding: roleRef %+v, subjects %+v", binding.RoleRef, binding.Subjects)
	}
}

// checkContextAwareRBAC checks the policy servers' ClusterRole for
// context-aware policies and its binding to the release namespace's
// ServiceAccounts.
func checkContextAwareRBAC(t *testing.T, r *rendered, rel release, w wantRelease) {
	t.Helper()
	if w.contextAwareRules == nil {
		return
	}
	name := w.prefix + "-policy-server-context-aware"
	role := named[*rbacv1.ClusterRole](t, r, "ClusterRole", name)
	if !equality.Semantic.DeepEqual(role.Rules, w.contextAwareRules) {
		t.Errorf("%s rules = %+v, want %+v", name, role.Rules, w.contextAwareRules)
	}
	binding := named[*rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding", name)
	wantSubjects := []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + rel.namespace}}
	if binding.RoleRef.Name != name || !slices.Equal(binding.Subjects, wantSubjects) {
		t.Errorf("%s binding: roleRef %+v, subjects %+v", name, binding.RoleRef, binding.Subjects)
	}
}

// generatedRules reads the rules of config/rbac/role.yaml.
func generatedRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	data, err := os.ReadFile(generatedRole)
	if err != nil {
		t.Fatalf("reading generated role: %v", err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(data, &role); err != nil {
		t.Fatalf("decoding %s: %v", generatedRole, err)
	}
	if len(role.Rules) == 0 {
		t.Fatalf("%s has no rules", generatedRole)
	}
	return role.Rules
}

// checkPolicyServer validates the default PolicyServer with its CRD, as the
// API server would on create, and compares its defaulted spec with want.
func checkPolicyServer(t *testing.T, o renderedObject, want map[string]any) {
	u := unstructuredObject(t, o.manifest)
	if got := u.GetAPIVersion(); got != "policies.kubewarden.io/v1" {
		t.Errorf("PolicyServer apiVersion = %q", got)
	}
	if u.GetName() != "default" {
		t.Errorf("PolicyServer name = %q, want default", u.GetName())
	}
	if errs := newCRDSchema(t, "policyservers").validateCreate(u.Object); len(errs) > 0 {
		t.Errorf("the PolicyServer is invalid:\n%v\n%s", errs.ToAggregate(), o.manifest)
	}
	spec, _ := u.Object["spec"].(map[string]any)
	if !equality.Semantic.DeepEqual(spec, want) {
		got, _ := yaml.Marshal(spec)
		wantYAML, _ := yaml.Marshal(want)
		t.Errorf("PolicyServer spec:\n%s\nwant:\n%s", got, wantYAML)
	}
}

// checkPolicyCache checks the claim of the shared policy cache: every
// replica mounts it, so it must be ReadWriteMany.
func checkPolicyCache(t *testing.T, pvc *corev1.PersistentVolumeClaim, w wantRelease) {
	if pvc.Name != w.policyCache {
		t.Errorf("PersistentVolumeClaim name = %q, want %q", pvc.Name, w.policyCache)
	}
	if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) {
		t.Errorf("access modes = %v, want [ReadWriteMany]", pvc.Spec.AccessModes)
	}
	if got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; got.Cmp(resource.MustParse(w.policyCacheSize)) != 0 {
		t.Errorf("storage request = %s, want %s", got.String(), w.policyCacheSize)
	}
	if got := ptr.Deref(pvc.Spec.StorageClassName, ""); got != w.policyCacheClass {
		t.Errorf("storageClassName = %q, want %q", got, w.policyCacheClass)
	}
}

// checkNotes checks that NOTES.txt names the release's objects, and that
// the example policy in it is valid.
func checkNotes(t *testing.T, notes string, rel release, controller string, withPolicyServer, withUninstallHook bool) {
	uninstall := "kubectl delete policyservers --all"
	if withUninstallHook {
		uninstall = "`helm uninstall` deletes every policy and PolicyServer first"
	}
	for _, want := range []string{
		"kubectl -n " + rel.namespace + " rollout status deployment/" + controller,
		uninstall,
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, notes)
		}
	}
	const start, end = "<<'POLICY'\n", "\n     POLICY\n"
	i := strings.Index(notes, start)
	if !withPolicyServer {
		if i >= 0 {
			t.Errorf("NOTES.txt shows an example policy without a policy server")
		}
		return
	}
	j := strings.Index(notes, end)
	if i < 0 || j < i {
		t.Fatalf("NOTES.txt has no example policy between %q and %q:\n%s", start, end, notes)
	}
	var example strings.Builder
	for l := range strings.SplitSeq(notes[i+len(start):j], "\n") {
		example.WriteString(strings.TrimPrefix(l, "     ") + "\n")
	}
	u := unstructuredObject(t, example.String())
	if u.GetKind() != "ClusterAdmissionPolicy" || u.GetAPIVersion() != "policies.kubewarden.io/v1" {
		t.Fatalf("example policy is a %s %s", u.GetAPIVersion(), u.GetKind())
	}
	if errs := newCRDSchema(t, "clusteradmissionpolicies").validateCreate(u.Object); len(errs) > 0 {
		t.Errorf("the example policy in NOTES.txt is invalid:\n%v\n%s", errs.ToAggregate(), example.String())
	}
	if !strings.Contains(notes, "clusteradmissionpolicy/"+u.GetName()) {
		t.Errorf("NOTES.txt does not wait for clusteradmissionpolicy/%s", u.GetName())
	}
}

// TestValuesSchemaRejectsTypos checks that values.schema.json catches a
// misspelt or mistyped value, as helm install would.
func TestValuesSchemaRejectsTypos(t *testing.T) {
	for _, vals := range []string{
		"controller: {enableMetric: true}",
		"controller: {replicas: two}",
		"policyServer: {enable: false}",
		"policyServer: {image: {repository: \"\"}}",
		"contoller: {}",
		"auditScanner: {reportKind: openreportz}",
		"auditScanner: {enable: false}",
		"auditScanner: {pageSize: 0}",
		"reportCRDs: {openreports: false}",
		"policySyncer: {resyncPeriod: ten}",
		"policySyncer: {policiesToSync: [{group: x}]}",
		"policySyncer: {kubeconfigSecret: [a]}",
	} {
		t.Run(vals, func(t *testing.T) {
			ch := loadChart(t)
			if _, err := renderValues(ch, release{"warden", "warden-system"}, values(t, vals)); err == nil {
				t.Errorf("values %q accepted", vals)
			}
		})
	}
}

// TestServiceAccountNameRequired checks that the chart refuses to run the
// controller, the audit scanner or the policy syncer as an unnamed
// ServiceAccount it does not create.
func TestServiceAccountNameRequired(t *testing.T) {
	for component, enable := range map[string]string{"controller": "", "auditScanner": "", "policySyncer": "enabled: true, "} {
		t.Run(component, func(t *testing.T) {
			ch := loadChart(t)
			top, err := renderValues(ch, release{"warden", "warden-system"}, values(t, component+": {"+enable+"serviceAccount: {create: false}}"))
			if err != nil {
				t.Fatalf("values: %v", err)
			}
			want := component + ".serviceAccount.name is required"
			if _, err := renderFiles(ch, top); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("rendering error = %v, want %s", err, want)
			}
		})
	}
}

// TestChartFilesMatchGenerated checks that crds/ holds exactly the CRDs of
// config/crd/bases and files/report-crds/ those of config/crd/reports, byte
// for byte, and files/controller-role.yaml is config/rbac/role.yaml.
func TestChartFilesMatchGenerated(t *testing.T) {
	const fix = "run hack/sync-chart-crds.sh after make generate or hack/report-crds.sh"
	names := func(dir string) []string {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("reading %s: %v", dir, err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	pairs := [][2]string{{generatedRole, chartRoleCopy}}
	for _, dirs := range [][2]string{{generatedCRDDir, chartCRDDir}, {reportCRDDir, chartReportCRDs}} {
		generated, chart := names(dirs[0]), names(dirs[1])
		if len(generated) == 0 {
			t.Fatalf("no CRDs in %s", dirs[0])
		}
		if !slices.Equal(chart, generated) {
			t.Errorf("%s holds %v, %s holds %v: %s", dirs[1], chart, dirs[0], generated, fix)
		}
		for _, name := range generated {
			pairs = append(pairs, [2]string{filepath.Join(dirs[0], name), filepath.Join(dirs[1], name)})
		}
	}
	for _, p := range pairs {
		want, err := os.ReadFile(p[0])
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p[1])
		if err != nil {
			t.Errorf("%v: %s", err, fix)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s: %s", p[1], p[0], fix)
		}
	}
}

// TestLint runs helm lint's checks (Chart.yaml, values and their schema,
// templates rendered strictly, deprecated APIs, CRDs) and fails on any
// warning or error.
func TestLint(t *testing.T) {
	for _, tc := range renderTests {
		t.Run(tc.name, func(t *testing.T) {
			linter := lint.RunAll(chartDir, values(t, tc.vals), tc.rel.namespace)
			for _, m := range linter.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %s", m)
				} else {
					t.Logf("lint: %s", m)
				}
			}
		})
	}
}

// TestPolicyServerValidation checks that the CRD validation this test runs
// on the default PolicyServer rejects what the API server would.
func TestPolicyServerValidation(t *testing.T) {
	schema := newCRDSchema(t, "policyservers")
	for _, tc := range []struct{ spec, want string }{
		{"{minAvailable: 1, maxUnavailable: 1}", "minAvailable and maxUnavailable cannot be both set"},
		{"{webhookPort: 8081}", "readinessProbePort must differ from webhookPort"},
		{"{replica: 2}", "spec.replica: Forbidden: unknown field"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			r := render(t, release{"warden", "warden-system"}, values(t, "policyServer: {spec: "+tc.spec+"}"))
			u := unstructuredObject(t, r.find(t, policyServerKind).manifest)
			errs := schema.validateCreate(u.Object)
			if err := errs.ToAggregate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("validation errors = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
