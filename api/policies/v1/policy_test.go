package v1_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

func meta(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}

func TestUniqueNames(t *testing.T) {
	tests := []struct {
		policy policiesv1.Policy
		want   string
	}{
		{&policiesv1.ClusterAdmissionPolicy{ObjectMeta: meta("", "privileged-pods")}, "clusterwide-privileged-pods"},
		{&policiesv1.AdmissionPolicy{ObjectMeta: meta("team-a", "caps")}, "namespaced-team-a-caps"},
		{&policiesv1.ClusterAdmissionPolicyGroup{ObjectMeta: meta("", "demo")}, "clusterwide-group-demo"},
		{&policiesv1.AdmissionPolicyGroup{ObjectMeta: meta("team-a", "demo")}, "namespaced-group-team-a-demo"},
	}
	for _, tt := range tests {
		t.Run(policiesv1.PolicyKind(tt.policy), func(t *testing.T) {
			if got := tt.policy.GetUniqueName(); got != tt.want {
				t.Errorf("GetUniqueName() = %q, want %q", got, tt.want)
			}
		})
	}
	if got := policiesv1.NamespacedPolicyUniqueName("a", "b"); got != "namespaced-a-b" {
		t.Errorf("NamespacedPolicyUniqueName = %q", got)
	}
}

// examplePolicies decodes the four policy examples.
func examplePolicies(t *testing.T) map[string]policiesv1.Policy {
	t.Helper()
	policies := map[string]policiesv1.Policy{}
	for _, file := range []string{"clusteradmissionpolicy.yaml", "admissionpolicy.yaml", "clusteradmissionpolicygroup.yaml", "admissionpolicygroup.yaml"} {
		p, ok := decodeExample(t, file).(policiesv1.Policy)
		if !ok {
			t.Fatalf("%s does not decode to a Policy", file)
		}
		policies[policiesv1.PolicyKind(p)] = p
	}
	return policies
}

func TestPolicyAccessors(t *testing.T) {
	policies := examplePolicies(t)
	type view struct {
		server, module, message string
		mode                    policiesv1.PolicyMode
		mutating, contextAware  bool
		backgroundAudit, inside bool
		timeoutEval             *int32
		scope                   *admissionregistrationv1.ScopeType
		namespaceSelector       *metav1.LabelSelector
		resources               int
		severity                string
	}
	ptr := func(v int32) *int32 { return &v }
	namespaced := admissionregistrationv1.NamespacedScope
	tests := []struct {
		kind string
		want view
	}{
		{policiesv1.KindClusterAdmissionPolicy, view{
			server: "reserved-instance-for-tenant-a", module: "registry://ghcr.io/kubewarden/policies/pod-privileged:v0.2.2",
			message: "privileged containers are not allowed", mode: policiesv1.PolicyModeMonitor,
			contextAware: true, backgroundAudit: true, timeoutEval: ptr(5),
			namespaceSelector: policies[policiesv1.KindClusterAdmissionPolicy].(*policiesv1.ClusterAdmissionPolicy).Spec.NamespaceSelector,
			resources:         2, severity: "medium",
		}},
		{policiesv1.KindAdmissionPolicy, view{
			server: "default", module: "registry://ghcr.io/kubewarden/policies/psp-capabilities:v0.1.9",
			message: "the pod drops too few capabilities", mode: policiesv1.PolicyModeProtect,
			mutating: true, timeoutEval: ptr(3), scope: &namespaced,
			namespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "team-a"}},
		}},
		{policiesv1.KindClusterAdmissionPolicyGroup, view{
			server: "default", message: "the image must be signed by Alice, or by Bob and not use the latest tag",
			mode: policiesv1.PolicyModeProtect, contextAware: true, backgroundAudit: true, inside: true,
			namespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "a"}},
		}},
		{policiesv1.KindAdmissionPolicyGroup, view{
			server: "default", message: "privileged pods and host namespaces are not allowed",
			mode: policiesv1.PolicyModeMonitor, scope: &namespaced,
			namespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "team-a"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			p := policies[tt.kind]
			severity, _ := p.GetSeverity()
			got := view{
				server: p.GetPolicyServer(), module: p.GetModule(), message: p.GetMessage(),
				mode: p.GetPolicyMode(), mutating: p.IsMutating(), contextAware: p.IsContextAware(),
				backgroundAudit: p.GetBackgroundAudit(), inside: p.GetAllowInsideAdmissionControllerNamespace(),
				timeoutEval: p.GetTimeoutEvalSeconds(), scope: p.GetRules()[0].Scope,
				namespaceSelector: p.GetNamespaceSelector(), resources: len(p.GetContextAwareResources()),
				severity: severity,
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			if p.GetTimeoutSeconds() == nil {
				t.Errorf("GetTimeoutSeconds() = nil")
			}
		})
	}

	t.Run("namespaced rules are copies", func(t *testing.T) {
		ap := policies[policiesv1.KindAdmissionPolicy].(*policiesv1.AdmissionPolicy)
		_ = ap.GetRules()
		if ap.Spec.Rules[0].Scope != nil {
			t.Errorf("GetRules changed the spec's rules")
		}
	})
	t.Run("empty mode reads as protect", func(t *testing.T) {
		if got := (&policiesv1.AdmissionPolicy{}).GetPolicyMode(); got != policiesv1.PolicyModeProtect {
			t.Errorf("GetPolicyMode() = %q", got)
		}
	})
	t.Run("status setters", func(t *testing.T) {
		p := policies[policiesv1.KindClusterAdmissionPolicyGroup].DeepCopyPolicy()
		p.SetStatus(policiesv1.PolicyStatusActive)
		p.SetPolicyModeStatus(policiesv1.PolicyModeStatusMonitor)
		if s := p.GetStatus(); s.PolicyStatus != policiesv1.PolicyStatusActive || s.PolicyMode != policiesv1.PolicyModeStatusMonitor {
			t.Errorf("status = %+v", *s)
		}
		if policies[policiesv1.KindClusterAdmissionPolicyGroup].GetStatus().PolicyStatus != "" {
			t.Errorf("DeepCopyPolicy shares the status")
		}
	})
}

func TestPolicyGroupMembers(t *testing.T) {
	policies := examplePolicies(t)
	capg := policies[policiesv1.KindClusterAdmissionPolicyGroup].(policiesv1.PolicyGroup)
	if got := capg.GetPolicyGroupMembersWithContext()["not_latest"].ContextAwareResources; len(got) != 1 || got[0].Kind != "Namespace" {
		t.Errorf("CAPG member context-aware resources = %+v", got)
	}
	apg := policies[policiesv1.KindAdmissionPolicyGroup].(policiesv1.PolicyGroup)
	members := apg.GetPolicyGroupMembersWithContext()
	if len(members) != 2 || members["privileged"].Module != "registry://ghcr.io/kubewarden/policies/pod-privileged:v0.2.2" || *members["privileged"].TimeoutEvalSeconds != 3 {
		t.Errorf("APG members = %+v", members)
	}
	if got := apg.GetExpression(); got != "!privileged() && !host_namespaces()" {
		t.Errorf("GetExpression() = %q", got)
	}
}

func TestPolicyKindAndNewPolicy(t *testing.T) {
	for _, kind := range []string{policiesv1.KindClusterAdmissionPolicy, policiesv1.KindAdmissionPolicy, policiesv1.KindClusterAdmissionPolicyGroup, policiesv1.KindAdmissionPolicyGroup} {
		p := policiesv1.NewPolicy(kind)
		if p == nil || policiesv1.PolicyKind(p) != kind {
			t.Errorf("PolicyKind(NewPolicy(%q)) = %q", kind, policiesv1.PolicyKind(p))
		}
	}
	if p := policiesv1.NewPolicy(policiesv1.KindPolicyServer); p != nil {
		t.Errorf("NewPolicy(PolicyServer) = %T, want nil", p)
	}
}

func TestPolicyRevisionData(t *testing.T) {
	for kind, p := range examplePolicies(t) {
		t.Run(kind, func(t *testing.T) {
			p.SetUID("3f0c8f2e-4d0b-4d7e-8f51-7e0f3c8a9b10")
			p.SetGeneration(4)
			data, err := policiesv1.NewPolicyRevisionData(p)
			if err != nil {
				t.Fatalf("NewPolicyRevisionData: %v", err)
			}
			var keys map[string]json.RawMessage
			if err := json.Unmarshal(data.Raw, &keys); err != nil || len(keys) != 1 || keys["spec"] == nil {
				t.Errorf("data = %s, want an object with spec only", data.Raw)
			}
			rev := &policiesv1.PolicyRevision{Spec: policiesv1.PolicyRevisionSpec{
				ObjectReference:  policiesv1.NewPolicyReference(p),
				PolicyGeneration: p.GetGeneration(),
				Enabled:          true,
				Data:             data,
			}}
			if ref := rev.Spec.ObjectReference; ref.Kind != kind || ref.APIVersion != "policies.kubewarden.io/v1" || ref.Name != p.GetName() || ref.Namespace != p.GetNamespace() || ref.UID != p.GetUID() {
				t.Errorf("NewPolicyReference = %+v", ref)
			}
			got, err := rev.DecodePolicy()
			if err != nil {
				t.Fatalf("DecodePolicy: %v", err)
			}
			if got.GetUniqueName() != p.GetUniqueName() || got.GetUID() != p.GetUID() || got.GetGeneration() != 4 {
				t.Errorf("decoded %s uid %s generation %d", got.GetUniqueName(), got.GetUID(), got.GetGeneration())
			}
			if gvk := got.GetObjectKind().GroupVersionKind(); gvk != policiesv1.GroupVersion.WithKind(kind) {
				t.Errorf("decoded GVK = %v", gvk)
			}
			if !reflect.DeepEqual(specOf(got), specOf(p)) {
				t.Errorf("decoded spec differs:\n%s\n%s", jsonString(specOf(got)), jsonString(specOf(p)))
			}
		})
	}

	t.Run("the RFC example", func(t *testing.T) {
		rev := decodeExample(t, "policyrevision.yaml").(*policiesv1.PolicyRevision)
		p, err := rev.DecodePolicy()
		if err != nil {
			t.Fatalf("DecodePolicy: %v", err)
		}
		if p.GetUniqueName() != "clusterwide-privileged-pods" || p.GetPolicyServer() != "reserved-instance-for-tenant-a" || len(p.GetRules()) != 1 {
			t.Errorf("decoded %s on %s with %d rules", p.GetUniqueName(), p.GetPolicyServer(), len(p.GetRules()))
		}
	})

	errorTests := []struct {
		name, kind, data, want string
	}{
		{"not a policy kind", "PolicyServer", `{"spec":{}}`, "not a policy kind"},
		{"no spec", policiesv1.KindClusterAdmissionPolicy, `{"status":{}}`, "no spec"},
		{"not an object", policiesv1.KindClusterAdmissionPolicy, `[1]`, "decoding data"},
		{"bad spec", policiesv1.KindClusterAdmissionPolicy, `{"spec":{"rules":"all"}}`, "decoding spec"},
	}
	for _, tt := range errorTests {
		t.Run(tt.name, func(t *testing.T) {
			rev := &policiesv1.PolicyRevision{Spec: policiesv1.PolicyRevisionSpec{
				ObjectReference: policiesv1.PolicyReference{Kind: tt.kind, Name: "p"},
				Data:            runtime.RawExtension{Raw: []byte(tt.data)},
			}}
			if _, err := rev.DecodePolicy(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("DecodePolicy() error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func specOf(p policiesv1.Policy) any {
	switch p := p.(type) {
	case *policiesv1.ClusterAdmissionPolicy:
		return p.Spec
	case *policiesv1.AdmissionPolicy:
		return p.Spec
	case *policiesv1.ClusterAdmissionPolicyGroup:
		return p.Spec
	case *policiesv1.AdmissionPolicyGroup:
		return p.Spec
	}
	return nil
}

func TestPolicyStatusConditions(t *testing.T) {
	replica := func(n int32) *int32 { return &n }
	then := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	var conditions []policiesv1.PolicyStatusCondition

	set := func(c policiesv1.PolicyStatusCondition, wantChanged bool) {
		t.Helper()
		if changed := policiesv1.SetPolicyStatusCondition(&conditions, c); changed != wantChanged {
			t.Errorf("SetPolicyStatusCondition(%s/%v) changed = %v, want %v", c.Type, c.Replica, changed, wantChanged)
		}
	}
	set(policiesv1.PolicyStatusCondition{Type: policiesv1.PolicyInitialized, Status: metav1.ConditionTrue, Reason: "Initialized", LastTransitionTime: then}, true)
	set(policiesv1.PolicyStatusCondition{Type: policiesv1.PolicyReady, Status: metav1.ConditionTrue, Reason: "Loaded", Replica: replica(0), LastTransitionTime: then}, true)
	set(policiesv1.PolicyStatusCondition{Type: policiesv1.PolicyReady, Status: metav1.ConditionFalse, Reason: "LoadError", Replica: replica(1), LastTransitionTime: then}, true)
	if len(conditions) != 3 {
		t.Fatalf("conditions = %+v, want 3", conditions)
	}

	// The same status again changes nothing, not even the transition time.
	set(policiesv1.PolicyStatusCondition{Type: policiesv1.PolicyReady, Status: metav1.ConditionTrue, Reason: "Loaded", Replica: replica(0)}, false)
	if c := policiesv1.FindPolicyStatusCondition(conditions, policiesv1.PolicyReady, replica(0)); !c.LastTransitionTime.Equal(&then) {
		t.Errorf("transition time moved to %v without a transition", c.LastTransitionTime)
	}
	// A new reason changes the condition but keeps the transition time.
	set(policiesv1.PolicyStatusCondition{Type: policiesv1.PolicyReady, Status: metav1.ConditionTrue, Reason: "Reloaded", Replica: replica(0)}, true)
	if c := policiesv1.FindPolicyStatusCondition(conditions, policiesv1.PolicyReady, replica(0)); c.Reason != "Reloaded" || !c.LastTransitionTime.Equal(&then) {
		t.Errorf("condition = %+v", *c)
	}
	// A new status moves the transition time.
	set(policiesv1.PolicyStatusCondition{Type: policiesv1.PolicyReady, Status: metav1.ConditionTrue, Reason: "Loaded", Replica: replica(1)}, true)
	if c := policiesv1.FindPolicyStatusCondition(conditions, policiesv1.PolicyReady, replica(1)); c.LastTransitionTime.Equal(&then) || c.Status != metav1.ConditionTrue {
		t.Errorf("condition = %+v, want a new transition time", *c)
	}

	if !policiesv1.IsPolicyStatusConditionTrue(conditions, policiesv1.PolicyInitialized, nil) {
		t.Errorf("Initialized is not true")
	}
	if policiesv1.IsPolicyStatusConditionTrue(conditions, policiesv1.PolicyInitialized, replica(0)) {
		t.Errorf("Initialized of replica 0 is true, but there is none")
	}
	if policiesv1.FindPolicyStatusCondition(conditions, policiesv1.PolicyReady, nil) != nil {
		t.Errorf("found a Ready condition without replica")
	}
	if !policiesv1.RemovePolicyStatusCondition(&conditions, policiesv1.PolicyReady, replica(1)) || len(conditions) != 2 {
		t.Errorf("RemovePolicyStatusCondition: conditions = %+v", conditions)
	}
	if policiesv1.RemovePolicyStatusCondition(&conditions, policiesv1.PolicyReady, replica(1)) {
		t.Errorf("RemovePolicyStatusCondition removed a condition twice")
	}
}

func TestPolicyServerHelpers(t *testing.T) {
	port := func(n int32) *int32 { return &n }
	ps := &policiesv1.PolicyServer{ObjectMeta: meta("", "default")}
	if ps.NameWithPrefix() != "policy-server-default" || ps.AppLabel() != "kubewarden-policy-server-default" {
		t.Errorf("NameWithPrefix() = %q, AppLabel() = %q", ps.NameWithPrefix(), ps.AppLabel())
	}
	if ps.EffectiveWebhookPort() != 8443 || ps.EffectiveReadinessProbePort() != 8081 || ps.EffectiveMetricsPort(8080) != 8080 {
		t.Errorf("default ports = %d, %d, %d", ps.EffectiveWebhookPort(), ps.EffectiveReadinessProbePort(), ps.EffectiveMetricsPort(8080))
	}
	ps.Spec.WebhookPort, ps.Spec.ReadinessProbePort, ps.Spec.MetricsPort = port(1), port(2), port(3)
	if ps.EffectiveWebhookPort() != 1 || ps.EffectiveReadinessProbePort() != 2 || ps.EffectiveMetricsPort(8080) != 3 {
		t.Errorf("ports = %d, %d, %d", ps.EffectiveWebhookPort(), ps.EffectiveReadinessProbePort(), ps.EffectiveMetricsPort(8080))
	}
}

// Rolling back replaces the whole spec with the revision's, fields the old
// spec did not set included.
func TestPolicyRevisionApplyTo(t *testing.T) {
	old := &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 2}}
	old.Spec.Module = "registry://example/old:v1"
	data, err := policiesv1.NewPolicyRevisionData(old)
	if err != nil {
		t.Fatal(err)
	}
	rev := &policiesv1.PolicyRevision{Spec: policiesv1.PolicyRevisionSpec{ObjectReference: policiesv1.NewPolicyReference(old), PolicyGeneration: 2, Data: data}}

	cur := old.DeepCopy()
	cur.Generation = 5
	cur.Spec.Module = "registry://example/new:v2"
	cur.Spec.Message = "set after generation 2"
	if err := rev.ApplyTo(cur); err != nil {
		t.Fatal(err)
	}
	if cur.Spec.Module != old.Spec.Module || cur.Spec.Message != "" || cur.Name != "p" || cur.Generation != 5 {
		t.Errorf("after ApplyTo: module %q, message %q, name %q, generation %d", cur.Spec.Module, cur.Spec.Message, cur.Name, cur.Generation)
	}
	if err := rev.ApplyTo(&policiesv1.AdmissionPolicy{}); err == nil {
		t.Error("ApplyTo a policy of another kind succeeded")
	}
}
