package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/wardenctl"
)

const (
	policiesFile   = "pss-policies.yaml"
	groupFile      = "pss-group.yaml"
	groupMessage   = "the pod breaks the Pod Security Standards (restricted)"
	policyPrefix   = "admissionbench-pss-"
	firstRejection = "admissionbench/first-rejection"
	// privilegedMessage is what hack/admission-bench.sh waits for
	// (-expect-message) once it has created the policy labelled
	// firstRejection.
	privilegedMessage = "privileged containers are not allowed"
)

// checks are the 16 policies of pss-policies.yaml, by name without
// policyPrefix, in the file's order.
var checks = []string{
	"host-process", "host-namespaces", "privileged", "capabilities-baseline", "host-path", "host-ports",
	"apparmor", "selinux", "proc-mount", "seccomp", "sysctls", "volume-types", "privilege-escalation",
	"run-as-non-root", "run-as-user", "capabilities-restricted",
}

// readPolicies decodes pss-policies.yaml strictly into the CRD's Go type.
func readPolicies(t *testing.T) []policiesv1.ClusterAdmissionPolicy {
	t.Helper()
	doc, err := os.ReadFile(policiesFile)
	if err != nil {
		t.Fatal(err)
	}
	var out []policiesv1.ClusterAdmissionPolicy
	for i, d := range strings.Split(string(doc), "\n---\n") {
		var p policiesv1.ClusterAdmissionPolicy
		if err := yaml.UnmarshalStrict([]byte(d), &p); err != nil {
			t.Fatalf("%s, document %d: %v", policiesFile, i+1, err)
		}
		out = append(out, p)
	}
	return out
}

// TestPolicyResources checks what the API server and the controller read
// of the 16 resources: one per check, native CEL, enforcing, on pod
// creations and updates, in the benchmark's namespace and no other.
func TestPolicyResources(t *testing.T) {
	policies := readPolicies(t)
	var names []string
	var first []string
	for _, p := range policies {
		names = append(names, strings.TrimPrefix(p.Name, policyPrefix))
		if p.Labels[firstRejection] == "true" {
			first = append(first, p.Name)
		}
		t.Run(p.Name, func(t *testing.T) {
			s := p.Spec
			if s.Module != "builtin://cel" || s.Mode != policiesv1.PolicyModeProtect || s.Mutating || s.PolicyServer != "default" {
				t.Errorf("module %q, mode %q, mutating %v, policy server %q: want builtin://cel, protect, false, default",
					s.Module, s.Mode, s.Mutating, s.PolicyServer)
			}
			want := []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}}
			if got, _ := json.Marshal(s.Rules); !bytes.Equal(got, must(json.Marshal(want))) {
				t.Errorf("rules %s, want %s", got, must(json.Marshal(want)))
			}
			sel, err := metav1.LabelSelectorAsSelector(s.NamespaceSelector)
			if err != nil || s.NamespaceSelector == nil {
				t.Fatalf("namespaceSelector %v: %v", s.NamespaceSelector, err)
			}
			for ns, want := range map[string]bool{"admissionbench": true, "default": false, "kube-system": false, "warden-system": false} {
				if got := sel.Matches(labels.Set{corev1.LabelMetadataName: ns}); got != want {
					t.Errorf("namespace %s selected: %v, want %v", ns, got, want)
				}
			}
		})
	}
	if !slices.Equal(names, checks) {
		t.Errorf("policies %v, want %v", names, checks)
	}
	if !slices.Equal(first, []string{policyPrefix + "privileged"}) {
		t.Errorf("policies labelled %s: %v, want only %sprivileged", firstRejection, first, policyPrefix)
	}
}

// memberName is the name of a check's member in the group.
func memberName(check string) string { return strings.ReplaceAll(check, "-", "_") }

// TestGroupResource checks that the group holds the 16 policies as they
// are: the same settings under the members' names, all of them called by
// the expression, the same requests and namespace.
func TestGroupResource(t *testing.T) {
	doc, err := os.ReadFile(groupFile)
	if err != nil {
		t.Fatal(err)
	}
	var g policiesv1.ClusterAdmissionPolicyGroup
	if err := yaml.UnmarshalStrict(doc, &g); err != nil {
		t.Fatalf("%s: %v", groupFile, err)
	}
	policies := readPolicies(t)
	p := policies[0].Spec
	if got, want := must(json.Marshal(g.Spec.Rules)), must(json.Marshal(p.Rules)); !bytes.Equal(got, want) {
		t.Errorf("rules %s, want the policies' %s", got, want)
	}
	if got, want := must(json.Marshal(g.Spec.NamespaceSelector)), must(json.Marshal(p.NamespaceSelector)); !bytes.Equal(got, want) {
		t.Errorf("namespaceSelector %s, want the policies' %s", got, want)
	}
	if g.Spec.Mode != policiesv1.PolicyModeProtect || g.Spec.PolicyServer != "default" || g.Spec.Message != groupMessage {
		t.Errorf("mode %q, policy server %q, message %q", g.Spec.Mode, g.Spec.PolicyServer, g.Spec.Message)
	}
	if len(g.Spec.Policies) != len(policies) {
		t.Errorf("%d members, want %d", len(g.Spec.Policies), len(policies))
	}
	var calls []string
	for _, pol := range policies {
		name := memberName(strings.TrimPrefix(pol.Name, policyPrefix))
		calls = append(calls, name+"()")
		m, ok := g.Spec.Policies[name]
		if !ok {
			t.Errorf("no member %s", name)
			continue
		}
		var got, want any
		if err := json.Unmarshal(m.Settings.Raw, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(pol.Spec.Settings.Raw, &want); err != nil {
			t.Fatal(err)
		}
		if m.Module != pol.Spec.Module || !bytes.Equal(must(json.Marshal(got)), must(json.Marshal(want))) {
			t.Errorf("member %s: module %s, settings %s; want those of policy %s: %s, %s",
				name, m.Module, m.Settings.Raw, pol.Name, pol.Spec.Module, pol.Spec.Settings.Raw)
		}
	}
	if want := strings.Join(calls, " && "); g.Spec.Expression != want {
		t.Errorf("expression %q, want %q", g.Spec.Expression, want)
	}
}

// TestPoliciesJudgePods evaluates the 16 policies, and the group, with
// wardenctl, in this process and as the policy server does, on pod CREATE
// requests: the benchmark's pod passes them all; each of the other pods
// breaks one or a few checks and is rejected by exactly those policies,
// with their messages, and by the group.
func TestPoliciesJudgePods(t *testing.T) {
	container := func(f func(*corev1.Container)) func(*corev1.Pod) {
		return func(p *corev1.Pod) { f(&p.Spec.Containers[0]) }
	}
	containerSC := func(f func(*corev1.SecurityContext)) func(*corev1.Pod) {
		return container(func(c *corev1.Container) { f(c.SecurityContext) })
	}
	podSC := func(f func(*corev1.PodSecurityContext)) func(*corev1.Pod) {
		return func(p *corev1.Pod) { f(p.Spec.SecurityContext) }
	}
	privileged := containerSC(func(sc *corev1.SecurityContext) { sc.Privileged, sc.AllowPrivilegeEscalation = ptr.To(true), nil })
	tests := []struct {
		name       string
		pod        func(*corev1.Pod)
		rejectedBy []string
	}{
		{name: "the benchmark's pod"},
		{name: "violatingPod, which first-rejection creates", pod: func(p *corev1.Pod) { *p = *violatingPod(p.Namespace, p.Name) },
			rejectedBy: []string{"privileged", "privilege-escalation"}},

		{name: "hostProcess on a container", rejectedBy: []string{"host-process"},
			pod: containerSC(func(sc *corev1.SecurityContext) {
				sc.WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}
			})},
		{name: "hostProcess on the pod", rejectedBy: []string{"host-process"},
			pod: podSC(func(sc *corev1.PodSecurityContext) {
				sc.WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}
			})},
		{name: "hostNetwork", pod: func(p *corev1.Pod) { p.Spec.HostNetwork = true }, rejectedBy: []string{"host-namespaces"}},
		{name: "hostPID", pod: func(p *corev1.Pod) { p.Spec.HostPID = true }, rejectedBy: []string{"host-namespaces"}},
		{name: "hostIPC", pod: func(p *corev1.Pod) { p.Spec.HostIPC = true }, rejectedBy: []string{"host-namespaces"}},
		{name: "hostNetwork false", pod: func(p *corev1.Pod) { p.Spec.HostNetwork = false }},
		{name: "privileged", pod: privileged, rejectedBy: []string{"privileged", "privilege-escalation"}},
		{name: "privileged false", pod: containerSC(func(sc *corev1.SecurityContext) { sc.Privileged = ptr.To(false) })},
		{name: "a privileged init container", rejectedBy: []string{"privileged", "privilege-escalation"},
			pod: func(p *corev1.Pod) {
				c := *p.Spec.Containers[0].DeepCopy()
				c.Name = "init"
				c.SecurityContext.Privileged, c.SecurityContext.AllowPrivilegeEscalation = ptr.To(true), nil
				p.Spec.InitContainers = append(p.Spec.InitContainers, c)
			}},
		{name: "an ephemeral container with no security context", rejectedBy: []string{"privilege-escalation", "capabilities-restricted"},
			pod: func(p *corev1.Pod) {
				p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
					EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "localhost/warden/probe:1"},
				})
			}},
		{name: "capability SYS_ADMIN", rejectedBy: []string{"capabilities-baseline", "capabilities-restricted"},
			pod: containerSC(func(sc *corev1.SecurityContext) { sc.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"} })},
		{name: "capability CHOWN", rejectedBy: []string{"capabilities-restricted"},
			pod: containerSC(func(sc *corev1.SecurityContext) { sc.Capabilities.Add = []corev1.Capability{"CHOWN"} })},
		{name: "capability NET_BIND_SERVICE",
			pod: containerSC(func(sc *corev1.SecurityContext) { sc.Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"} })},
		{name: "no capability dropped", rejectedBy: []string{"capabilities-restricted"},
			pod: containerSC(func(sc *corev1.SecurityContext) { sc.Capabilities = nil })},
		{name: "a hostPath volume", rejectedBy: []string{"host-path", "volume-types"},
			pod: func(p *corev1.Pod) {
				p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{
					HostPath: &corev1.HostPathVolumeSource{Path: "/etc"},
				}})
			}},
		{name: "an NFS volume", rejectedBy: []string{"volume-types"},
			pod: func(p *corev1.Pod) {
				p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "nfs", VolumeSource: corev1.VolumeSource{
					NFS: &corev1.NFSVolumeSource{Server: "nfs.example", Path: "/"},
				}})
			}},
		{name: "configMap, secret, downwardAPI and PVC volumes",
			pod: func(p *corev1.Pod) {
				p.Spec.Volumes = append(p.Spec.Volumes,
					corev1.Volume{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
					corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
					corev1.Volume{Name: "d", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}},
					corev1.Volume{Name: "pvc", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}},
				)
			}},
		{name: "a host port", rejectedBy: []string{"host-ports"}, pod: container(func(c *corev1.Container) { c.Ports[0].HostPort = 8080 })},
		{name: "AppArmor Unconfined on the pod", rejectedBy: []string{"apparmor"},
			pod: podSC(func(sc *corev1.PodSecurityContext) {
				sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
			})},
		{name: "AppArmor Unconfined on a container", rejectedBy: []string{"apparmor"},
			pod: containerSC(func(sc *corev1.SecurityContext) {
				sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
			})},
		{name: "AppArmor annotation unconfined", rejectedBy: []string{"apparmor"},
			pod: func(p *corev1.Pod) {
				p.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "app": "unconfined"}
			}},
		{name: "AppArmor annotation localhost/ and profile Localhost",
			pod: func(p *corev1.Pod) {
				p.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "app": "localhost/web"}
				p.Spec.SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("web")}
			}},
		{name: "SELinux type spc_t", rejectedBy: []string{"selinux"},
			pod: podSC(func(sc *corev1.PodSecurityContext) { sc.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"} })},
		{name: "SELinux user on a container", rejectedBy: []string{"selinux"},
			pod: containerSC(func(sc *corev1.SecurityContext) { sc.SELinuxOptions = &corev1.SELinuxOptions{User: "system_u"} })},
		{name: "SELinux type container_t and a level",
			pod: containerSC(func(sc *corev1.SecurityContext) {
				sc.SELinuxOptions = &corev1.SELinuxOptions{Type: "container_t", Level: "s0:c123,c456"}
			})},
		{name: "procMount Unmasked", rejectedBy: []string{"proc-mount"},
			pod: func(p *corev1.Pod) {
				p.Spec.HostUsers = ptr.To(false)
				p.Spec.Containers[0].SecurityContext.ProcMount = ptr.To(corev1.UnmaskedProcMount)
			}},
		{name: "seccomp Unconfined on the pod", rejectedBy: []string{"seccomp"},
			pod: podSC(func(sc *corev1.PodSecurityContext) {
				sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
			})},
		{name: "seccomp Unconfined on a container", rejectedBy: []string{"seccomp"},
			pod: containerSC(func(sc *corev1.SecurityContext) {
				sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
			})},
		{name: "no seccomp profile", rejectedBy: []string{"seccomp"},
			pod: podSC(func(sc *corev1.PodSecurityContext) { sc.SeccompProfile = nil })},
		{name: "seccomp Localhost on the container only",
			pod: func(p *corev1.Pod) {
				p.Spec.SecurityContext.SeccompProfile = nil
				p.Spec.Containers[0].SecurityContext.SeccompProfile = &corev1.SeccompProfile{
					Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("web.json"),
				}
			}},
		{name: "an unsafe sysctl", rejectedBy: []string{"sysctls"},
			pod: podSC(func(sc *corev1.PodSecurityContext) {
				sc.Sysctls = []corev1.Sysctl{{Name: "kernel.msgmax", Value: "65536"}}
			})},
		{name: "a safe sysctl",
			pod: podSC(func(sc *corev1.PodSecurityContext) {
				sc.Sysctls = []corev1.Sysctl{{Name: "net.ipv4.tcp_syncookies", Value: "1"}}
			})},
		{name: "allowPrivilegeEscalation true", rejectedBy: []string{"privilege-escalation"},
			pod: containerSC(func(sc *corev1.SecurityContext) { sc.AllowPrivilegeEscalation = ptr.To(true) })},
		{name: "allowPrivilegeEscalation unset", rejectedBy: []string{"privilege-escalation"},
			pod: containerSC(func(sc *corev1.SecurityContext) { sc.AllowPrivilegeEscalation = nil })},
		{name: "runAsNonRoot false on the pod", rejectedBy: []string{"run-as-non-root"},
			pod: podSC(func(sc *corev1.PodSecurityContext) { sc.RunAsNonRoot = ptr.To(false) })},
		{name: "runAsNonRoot false on a container", rejectedBy: []string{"run-as-non-root"},
			pod: containerSC(func(sc *corev1.SecurityContext) { sc.RunAsNonRoot = ptr.To(false) })},
		{name: "runAsNonRoot nowhere", rejectedBy: []string{"run-as-non-root"},
			pod: func(p *corev1.Pod) {
				p.Spec.SecurityContext.RunAsNonRoot = nil
				p.Spec.Containers[0].SecurityContext.RunAsNonRoot = nil
			}},
		{name: "runAsNonRoot on the pod only",
			pod: containerSC(func(sc *corev1.SecurityContext) { sc.RunAsNonRoot = nil })},
		{name: "runAsUser 0 on the pod", rejectedBy: []string{"run-as-user"},
			pod: podSC(func(sc *corev1.PodSecurityContext) { sc.RunAsUser = ptr.To[int64](0) })},
		{name: "runAsUser 0 on a container", rejectedBy: []string{"run-as-user"},
			pod: containerSC(func(sc *corev1.SecurityContext) { sc.RunAsUser = ptr.To[int64](0) })},
	}

	messages := map[string][]string{}
	for _, p := range readPolicies(t) {
		var s struct {
			Validations []struct{ Message string } `json:"validations"`
		}
		if err := json.Unmarshal(p.Spec.Settings.Raw, &s); err != nil {
			t.Fatalf("%s: settings: %v", p.Name, err)
		}
		for _, v := range s.Validations {
			messages[strings.TrimPrefix(p.Name, policyPrefix)] = append(messages[strings.TrimPrefix(p.Name, policyPrefix)], v.Message)
		}
	}
	if !strings.Contains(messages["privileged"][0], privilegedMessage) {
		t.Errorf("the privileged policy's message %q does not hold %q, which hack/admission-bench.sh waits for", messages["privileged"][0], privilegedMessage)
	}

	home := t.TempDir()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := asAdmitted(benchPod("admissionbench", "web-0"))
			if tc.pod != nil {
				tc.pod(pod)
			}
			answers := evaluate(t, home, policiesFile, pod)
			if len(answers) != len(checks) {
				t.Fatalf("%d answers, want %d", len(answers), len(checks))
			}
			var rejectedBy []string
			for i, a := range answers {
				if a.Allowed {
					continue
				}
				rejectedBy = append(rejectedBy, checks[i])
				if !slices.Contains(messages[checks[i]], a.Status.Message) || a.Status.Code != 403 {
					t.Errorf("%s rejected with %d %q, want 403 and one of %q", checks[i], a.Status.Code, a.Status.Message, messages[checks[i]])
				}
			}
			if !slices.Equal(rejectedBy, tc.rejectedBy) {
				t.Errorf("rejected by %v, want %v", rejectedBy, tc.rejectedBy)
			}

			// The group rejects what one of the policies rejects, with the
			// message of a rejecting member as a cause.
			group := evaluate(t, home, groupFile, pod)
			if len(group) != 1 {
				t.Fatalf("the group answered %d times, want once", len(group))
			}
			g := group[0]
			if g.Allowed != (len(tc.rejectedBy) == 0) {
				t.Fatalf("the group allowed: %v, want %v", g.Allowed, len(tc.rejectedBy) == 0)
			}
			if g.Allowed {
				return
			}
			if g.Status.Message != groupMessage || len(g.Status.Details.Causes) == 0 {
				t.Errorf("the group rejected with %q and causes %v, want %q and at least one", g.Status.Message, g.Status.Details.Causes, groupMessage)
			}
			for _, c := range g.Status.Details.Causes {
				check := strings.ReplaceAll(strings.TrimPrefix(c.Field, "spec.policies."), "_", "-")
				if !slices.Contains(tc.rejectedBy, check) || !slices.Contains(messages[check], c.Message) {
					t.Errorf("the group's cause %s: %q, want a member of %v with its message", c.Field, c.Message, tc.rejectedBy)
				}
			}
		})
	}
}

// answer is the part of an AdmissionResponse the test reads.
type answer struct {
	Allowed bool `json:"allowed"`
	Status  struct {
		Message string `json:"message"`
		Code    int    `json:"code"`
		Details struct {
			Causes []struct {
				Field   string `json:"field"`
				Message string `json:"message"`
			} `json:"causes"`
		} `json:"details"`
	} `json:"status"`
}

// evaluate runs `wardenctl run -r - FILE` on a CREATE request of pod and
// returns the answers of the file's policies, in its order.
func evaluate(t *testing.T, home, file string, pod *corev1.Pod) []answer {
	t.Helper()
	object, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	request := must(json.Marshal(map[string]any{
		"uid":       "bench",
		"kind":      map[string]string{"group": "", "version": "v1", "kind": "Pod"},
		"resource":  map[string]string{"group": "", "version": "v1", "resource": "pods"},
		"name":      pod.Name,
		"namespace": pod.Namespace,
		"operation": "CREATE",
		"userInfo":  map[string]any{"username": "kubernetes-admin", "groups": []string{"system:masters", "system:authenticated"}},
		"object":    json.RawMessage(object),
		"options":   map[string]string{"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
	}))
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string {
		switch k {
		case "HOME":
			return home
		case "WARDEN_CACHE_DIR":
			return filepath.Join(home, "cache")
		}
		return ""
	}
	args := []string{"run", "--request-path", "-", file}
	if code := wardenctl.Main(t.Context(), args, bytes.NewReader(request), &stdout, &stderr, getenv); code != 0 {
		t.Fatalf("wardenctl %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	}
	var answers []answer
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var a answer
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("wardenctl's answer %q: %v", line, err)
		}
		answers = append(answers, a)
	}
	return answers
}

// asAdmitted adds to pod what the API server's defaulting and built-in
// admission add before the webhooks see it: among others the projected
// volume of the ServiceAccount token, a volume type the restricted
// standard allows.
func asAdmitted(pod *corev1.Pod) *corev1.Pod {
	s := &pod.Spec
	s.ServiceAccountName, s.DeprecatedServiceAccount = "default", "default"
	s.RestartPolicy, s.DNSPolicy, s.SchedulerName = corev1.RestartPolicyAlways, corev1.DNSClusterFirst, corev1.DefaultSchedulerName
	s.EnableServiceLinks, s.Priority = ptr.To(true), ptr.To[int32](0)
	s.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		s.Tolerations = append(s.Tolerations, corev1.Toleration{
			Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300),
		})
	}
	s.Volumes = append(s.Volumes, corev1.Volume{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](0o644), Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: ptr.To[int64](3607), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
		}},
	}})
	for i := range s.Containers {
		c := &s.Containers[i]
		c.TerminationMessagePath, c.TerminationMessagePolicy = corev1.TerminationMessagePathDefault, corev1.TerminationMessageReadFile
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{
			Name: "kube-api-access-x7k2p", ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount",
		})
	}
	return pod
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
