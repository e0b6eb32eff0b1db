package auditscanner

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// vap is a ValidatingAdmissionPolicy on CREATE of v1 configmaps, with
// validations (expression, message) and the options' changes.
func vap(name string, opts ...func(*admissionregistrationv1.ValidatingAdmissionPolicy)) *admissionregistrationv1.ValidatingAdmissionPolicy {
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "7"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
				{RuleWithOperations: rule(createOnly, "", "v1", "configmaps")},
			}},
			Validations: []admissionregistrationv1.Validation{
				{Expression: "has(object.data) && 'owner' in object.data", Message: "an owner is required"},
				{Expression: "object.metadata.name.size() <= 8", MessageExpression: "'name ' + object.metadata.name + ' is too long'"},
			},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// vapBinding binds policy with actions and the options' changes.
func vapBinding(name, policy string, actions []admissionregistrationv1.ValidationAction,
	opts ...func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "8"},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy, ValidationActions: actions},
	}
	for _, o := range opts {
		o(b)
	}
	return b
}

var (
	deny      = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	warnAudit = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}
)

// loadedBinding loads b of p with params, namespaces answered from nss.
func loadedBinding(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding,
	params []*unstructured.Unstructured, nss ...*corev1.Namespace) *kubeBinding {
	t.Helper()
	return loadForTest(t, newKubeBinding(p, b), params, nss)
}

// loadForTest loads kb with params, namespaces answered from nss, and closes it
// when the test ends.
func loadForTest(t *testing.T, kb *kubeBinding, params []*unstructured.Unstructured, nss []*corev1.Namespace) *kubeBinding {
	t.Helper()
	err := kb.load(params, func(_ context.Context, name string) (*corev1.Namespace, error) {
		for _, ns := range nss {
			if ns.Name == name {
				return ns, nil
			}
		}
		return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kb.close)
	return kb
}

func configMap(namespace, name string, labels map[string]string, data map[string]any) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}}
	obj.SetNamespace(namespace)
	obj.SetName(name)
	obj.SetUID(types.UID("uid-" + name))
	obj.SetResourceVersion("42")
	obj.SetLabels(labels)
	if data != nil {
		obj.Object["data"] = data
	}
	return obj
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, ResourceVersion: "3"}}
}

// verdicts evaluates obj with every validation of kb and returns what
// each reports; nil when none has anything to report.
func verdicts(t *testing.T, kb *kubeBinding, obj *unstructured.Unstructured) []verdict {
	t.Helper()
	req, err := auditRequest(obj, "configmaps")
	if err != nil {
		t.Fatal(err)
	}
	var out []verdict
	for _, ap := range kb.auditPolicies(nil, "") {
		v, ok := ap.local.evaluate(t.Context(), req)
		if ok {
			out = append(out, v)
		}
	}
	return out
}

// TestVAPEvaluate checks the verdicts of a binding's validations, one per
// validation, with the API server's messages, and that an object the
// binding does not apply to has none.
func TestVAPEvaluate(t *testing.T) {
	exempting := func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{
			{Name: "not-exempt", Expression: "!has(object.metadata.labels) || !('exempt' in object.metadata.labels)"}}
	}
	prodOnly := func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
		b.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}
	}
	owned := map[string]any{"owner": "me"}
	nss := []*corev1.Namespace{namespace("shop", map[string]string{"env": "prod"}), namespace("lab", map[string]string{"env": "dev"})}
	const prefix = "ValidatingAdmissionPolicy 'owner' with binding 'b' denied request: "
	tests := []struct {
		name    string
		binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
		obj     *unstructured.Unstructured
		want    []verdict
	}{
		{name: "both pass", binding: vapBinding("b", "owner", deny), obj: configMap("shop", "good", nil, owned),
			want: []verdict{{allowed: true}, {allowed: true}}},
		{name: "each validation has its verdict and message", binding: vapBinding("b", "owner", deny), obj: configMap("shop", "anonymous", nil, nil),
			want: []verdict{
				{message: `configmaps "anonymous" is forbidden: ` + prefix + "an owner is required"},
				{message: `configmaps "anonymous" is forbidden: ` + prefix + "name anonymous is too long"},
			}},
		{name: "the binding's actions do not change the verdicts", binding: vapBinding("b", "owner", warnAudit), obj: configMap("shop", "bad", nil, nil),
			want: []verdict{{message: `configmaps "bad" is forbidden: ` + prefix + "an owner is required"}, {allowed: true}}},
		{name: "excluded by matchConditions", binding: vapBinding("b", "owner", deny), obj: configMap("shop", "exempted", map[string]string{"exempt": "yes"}, nil)},
		{name: "namespaceSelector selects", binding: vapBinding("b", "owner", deny, prodOnly), obj: configMap("shop", "bad", nil, nil),
			want: []verdict{{message: `configmaps "bad" is forbidden: ` + prefix + "an owner is required"}, {allowed: true}}},
		{name: "namespaceSelector does not select", binding: vapBinding("b", "owner", deny, prodOnly), obj: configMap("lab", "bad", nil, nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kb := loadedBinding(t, vap("owner", exempting), tt.binding, nil, nss...)
			if got := verdicts(t, kb, tt.obj); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("verdicts\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// TestVAPParams checks that a binding's params are those given to load,
// by name or selector, and that a missing one gets the API server's
// parameterNotFoundAction.
func TestVAPParams(t *testing.T) {
	maxKeys := func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
		p.Spec.Validations = []admissionregistrationv1.Validation{{
			Expression:        "!has(object.data) || object.data.size() <= int(params.data.max)",
			MessageExpression: "'at most ' + params.data.max + ' keys (' + params.metadata.name + ')'",
		}}
	}
	param := func(name, max string) *unstructured.Unstructured {
		return configMap("policies", name, nil, map[string]any{"max": max})
	}
	ref := func(name string, action admissionregistrationv1.ParameterNotFoundActionType) func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
		return func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: name, Namespace: "policies", ParameterNotFoundAction: &action}
		}
	}
	threeKeys := configMap("shop", "big", nil, map[string]any{"a": "1", "b": "2", "c": "3"})
	const prefix = `configmaps "big" is forbidden: ValidatingAdmissionPolicy 'max-keys' with binding 'b' denied request: `
	tests := []struct {
		name   string
		ref    func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
		params []*unstructured.Unstructured
		want   []verdict
	}{
		{name: "param allows", ref: ref("limits", admissionregistrationv1.DenyAction), params: []*unstructured.Unstructured{param("limits", "5")},
			want: []verdict{{allowed: true}}},
		{name: "param denies", ref: ref("limits", admissionregistrationv1.DenyAction), params: []*unstructured.Unstructured{param("limits", "2")},
			want: []verdict{{message: prefix + "at most 2 keys (limits)"}}},
		{name: "missing param, Deny", ref: ref("limits", admissionregistrationv1.DenyAction),
			want: []verdict{{message: prefix + "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"}}},
		{name: "missing param, Allow: nothing to report", ref: ref("limits", admissionregistrationv1.AllowAction)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kb := loadedBinding(t, vap("max-keys", maxKeys), vapBinding("b", "max-keys", deny, tt.ref), tt.params, namespace("shop", nil))
			if got := verdicts(t, kb, threeKeys); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("verdicts\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// TestSelectKubePolicies checks which bindings a scope audits, skips and
// counts as errored, and the resources it lists for them.
func TestSelectKubePolicies(t *testing.T) {
	withRule := func(r admissionregistrationv1.RuleWithOperations) func(*admissionregistrationv1.ValidatingAdmissionPolicy) {
		return func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules = []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: r}}
		}
	}
	all := []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
	podsAndConfigMaps := withRule(rule(createOnly, "", "v1", "pods", "configmaps"))
	bindingRules := func(rules ...admissionregistrationv1.RuleWithOperations) func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
		return func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.Spec.MatchResources = &admissionregistrationv1.MatchResources{}
			for _, r := range rules {
				b.Spec.MatchResources.ResourceRules = append(b.Spec.MatchResources.ResourceRules, admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: r})
			}
		}
	}
	nsSelector := func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Spec.MatchConstraints.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	}
	badSelector := func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
		b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}}
	}
	prod, dev := namespace("shop", map[string]string{"env": "prod"}), namespace("lab", nil)
	type binding = func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	tests := []struct {
		name             string
		policy           []func(*admissionregistrationv1.ValidatingAdmissionPolicy)
		binding          []binding
		ns               *corev1.Namespace
		want             []schema.GroupVersionResource
		skipped, errored bool
	}{
		{name: "audited", ns: prod, want: []schema.GroupVersionResource{configmapsGVR}},
		{name: "the * operation counts as CREATE", ns: prod, policy: []func(*admissionregistrationv1.ValidatingAdmissionPolicy){withRule(rule(all, "", "v1", "configmaps"))},
			want: []schema.GroupVersionResource{configmapsGVR}},
		{name: "wildcard resource", ns: prod, policy: []func(*admissionregistrationv1.ValidatingAdmissionPolicy){withRule(rule(createOnly, "", "v1", "*"))}, skipped: true},
		{name: "no CREATE", ns: prod, policy: []func(*admissionregistrationv1.ValidatingAdmissionPolicy){
			withRule(rule([]admissionregistrationv1.OperationType{admissionregistrationv1.Update}, "", "v1", "configmaps"))}, skipped: true},
		{name: "unknown resource", ns: prod, policy: []func(*admissionregistrationv1.ValidatingAdmissionPolicy){withRule(rule(createOnly, "example.com", "v1", "widgets"))}, errored: true},
		{name: "namespaced resource in the cluster scan"},
		{name: "the binding's rules narrow the resources", ns: prod, policy: []func(*admissionregistrationv1.ValidatingAdmissionPolicy){podsAndConfigMaps},
			binding: []binding{bindingRules(rule(all, "", "*", "pods"))}, want: []schema.GroupVersionResource{podsGVR}},
		{name: "the binding's rules leave nothing", ns: prod, binding: []binding{bindingRules(rule(createOnly, "", "v1", "pods"))}},
		{name: "namespaceSelector selects", ns: prod, policy: []func(*admissionregistrationv1.ValidatingAdmissionPolicy){nsSelector},
			want: []schema.GroupVersionResource{configmapsGVR}},
		{name: "namespaceSelector does not select", ns: dev, policy: []func(*admissionregistrationv1.ValidatingAdmissionPolicy){nsSelector}},
		{name: "invalid objectSelector", ns: prod, binding: []binding{badSelector}, errored: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kb := loadedBinding(t, vap("owner", tt.policy...), vapBinding("b", "owner", deny, tt.binding...), nil)
			cat := &kubeCatalog{bindings: []*kubeBinding{kb}}
			sel := selectScope(t.Context(), ignoreNotes, nil, nil, tt.ns != nil, resolver, cat, tt.ns)
			var got []schema.GroupVersionResource
			for _, gvr := range sel.gvrs {
				got = append(got, gvr)
				if n := len(sel.byGVR[gvr]); n != 2 {
					t.Errorf("%s: %d validations, want 2", gvr, n)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("resources %v, want %v", got, tt.want)
			}
			wantCounts := [3]int{len(tt.want) / max(len(tt.want), 1), 0, 0}
			if tt.skipped {
				wantCounts[1] = 1
			}
			if tt.errored {
				wantCounts[2] = 1
			}
			if gotCounts := [3]int{sel.audited, sel.skipped, sel.errored}; gotCounts != wantCounts {
				t.Errorf("audited, skipped, errored = %v, want %v", gotCounts, wantCounts)
			}
		})
	}
	t.Run("a binding that failed to load is errored", func(t *testing.T) {
		kb := newKubeBinding(vap("owner"), vapBinding("b", "owner", deny))
		kb.err = apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", nil)
		sel := selectScope(t.Context(), ignoreNotes, nil, nil, true, resolver, &kubeCatalog{bindings: []*kubeBinding{kb}}, prod)
		if sel.errored != 1 || len(sel.gvrs) != 0 {
			t.Errorf("errored %d, resources %v", sel.errored, sel.gvrs)
		}
	})
}

// TestVAPResults checks the results of a binding's validations: named
// after the policy and the binding, in the order of the validations,
// with the properties of docs/audit-scanner.md.
func TestVAPResults(t *testing.T) {
	p := vap("owner", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		p.Annotations = map[string]string{policiesv1.AnnotationSeverity: "high", policiesv1.AnnotationCategory: "Ownership"}
	})
	kb := loadedBinding(t, p, vapBinding("b", "owner", warnAudit), nil)
	warden := clusterPolicy("aaa")
	warden.UID, warden.ResourceVersion = "uid-aaa", "1"
	aps := kb.auditPolicies(nil, "")
	evals := []evaluation{
		{policy: aps[1], verdict: verdict{allowed: true}},
		{policy: aps[0], verdict: verdict{message: "denied"}},
		{policy: audited(warden), verdict: verdict{allowed: true}},
	}
	// The evaluations come in the order of the validations.
	evals[0], evals[1] = evals[1], evals[0]
	r := newReport(pod("team-a", "web"), "run", 0, 0, evals, 5)
	props := func(index, expr string) map[string]string {
		return map[string]string{
			"validating": "true", "policy-kind": "ValidatingAdmissionPolicy", "policy-name": "owner", "policy-uid": "uid-owner",
			"policy-resource-version": "7", "binding-name": "b", "binding-uid": "uid-b", "binding-resource-version": "8",
			"validation-actions": "Warn,Audit", "validation-index": index, "validation-expression": expr,
		}
	}
	want := []result{
		{policy: "clusterwide-aaa", result: "pass", timestamp: 5,
			properties: map[string]string{"validating": "true", "policy-resource-version": "1", "policy-uid": "uid-aaa", "policy-name": "aaa"}},
		{policy: "vap/owner/b", category: "Ownership", severity: "high", result: "fail", message: "denied", timestamp: 5,
			properties: props("0", p.Spec.Validations[0].Expression)},
		{policy: "vap/owner/b", category: "Ownership", severity: "high", result: "pass", timestamp: 5,
			properties: props("1", p.Spec.Validations[1].Expression)},
	}
	if !reflect.DeepEqual(r.results, want) {
		t.Errorf("results\n%+v\nwant\n%+v", r.results, want)
	}
	if r.summary != (summary{pass: 2, fail: 1}) {
		t.Errorf("summary %+v", r.summary)
	}
}

// TestVAPInputsDigest checks that what a VAP's verdicts are computed from
// changes the inputs digest: the policy, the binding, a param, the
// namespace.
func TestVAPInputsDigest(t *testing.T) {
	limits := configMap("policies", "limits", nil, map[string]any{"max": "2"})
	digestOf := func(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding,
		params []*unstructured.Unstructured, nsVersion string) string {
		kb := loadedBinding(t, p, b, params)
		return inputsDigest(pod("team-a", "web"), kb.auditPolicies(nil, nsVersion), 0, 0, digest{})
	}
	base := digestOf(vap("owner"), vapBinding("b", "owner", deny), []*unstructured.Unstructured{limits}, "3")
	if again := digestOf(vap("owner"), vapBinding("b", "owner", deny), []*unstructured.Unstructured{limits}, "3"); again != base {
		t.Fatalf("the same inputs gave two digests")
	}
	changed := limits.DeepCopy()
	changed.SetResourceVersion("43")
	for name, d := range map[string]string{
		"the policy's resourceVersion": digestOf(vap("owner", func(p *admissionregistrationv1.ValidatingAdmissionPolicy) { p.ResourceVersion = "9" }),
			vapBinding("b", "owner", deny), []*unstructured.Unstructured{limits}, "3"),
		"the binding's resourceVersion": digestOf(vap("owner"), vapBinding("b", "owner", deny, func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			b.ResourceVersion = "9"
		}), []*unstructured.Unstructured{limits}, "3"),
		"a param's resourceVersion": digestOf(vap("owner"), vapBinding("b", "owner", deny), []*unstructured.Unstructured{changed}, "3"),
		"a param less":              digestOf(vap("owner"), vapBinding("b", "owner", deny), nil, "3"),
		"the namespace":             digestOf(vap("owner"), vapBinding("b", "owner", deny), []*unstructured.Unstructured{limits}, "4"),
	} {
		if d == base {
			t.Errorf("%s did not change the digest", name)
		}
	}
}

// listErrReader fails every List with err.
type listErrReader struct {
	client.Reader
	err error
}

func (r listErrReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return r.err
}

// TestLoadKubeCatalogListErrors checks that VAPs the API server does not
// serve, or that the scanner may not list, leave the run to Warden's
// policies, and that any other error fails it.
func TestLoadKubeCatalogListErrors(t *testing.T) {
	vapResource := schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}
	tests := []struct {
		name    string
		err     error
		wantErr bool
	}{
		{name: "not served", err: &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}}},
		{name: "forbidden", err: apierrors.NewForbidden(vapResource, "", errors.New("no rule"))},
		{name: "other", err: apierrors.NewServiceUnavailable("etcd is down"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cat, err := loadKubeCatalog(t.Context(), kubeSource{reader: listErrReader{err: tt.err}}, slog.New(slog.DiscardHandler))
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			if err == nil && len(cat.bindings) != 0 {
				t.Errorf("%d bindings", len(cat.bindings))
			}
		})
	}
}

// mapPolicy is a MutatingAdmissionPolicy on CREATE of v1 configmaps that
// gives an owner to a ConfigMap without data, with the options' changes.
func mapPolicy(name string, opts ...func(*admissionregistrationv1.MutatingAdmissionPolicy)) *admissionregistrationv1.MutatingAdmissionPolicy {
	p := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "7"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
				{RuleWithOperations: rule(createOnly, "", "v1", "configmaps")},
			}},
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType: admissionregistrationv1.PatchTypeJSONPatch,
				JSONPatch: &admissionregistrationv1.JSONPatch{
					Expression: `has(object.data) ? [] : [JSONPatch{op: "add", path: "/data", value: {"owner": "nobody"}}]`,
				},
			}},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// mapBinding binds MAP policy with the options' changes.
func mapBinding(name, policy string, opts ...func(*admissionregistrationv1.MutatingAdmissionPolicyBinding)) *admissionregistrationv1.MutatingAdmissionPolicyBinding {
	b := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "8"},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: policy},
	}
	for _, o := range opts {
		o(b)
	}
	return b
}

// loadedMAPBinding loads b of p with params, namespaces answered from nss.
func loadedMAPBinding(t *testing.T, p *admissionregistrationv1.MutatingAdmissionPolicy, b *admissionregistrationv1.MutatingAdmissionPolicyBinding,
	params []*unstructured.Unstructured, nss ...*corev1.Namespace) *kubeBinding {
	t.Helper()
	return loadForTest(t, newMAPBinding(p, b), params, nss)
}

// TestMAPEvaluate checks a MAP binding's verdict: a pass for an object it
// leaves unchanged, a warn naming the JSONPatch for one it would change,
// an error for one it cannot mutate, and nothing for an object it does not
// apply to.
func TestMAPEvaluate(t *testing.T) {
	exempting := func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
		p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{
			{Name: "not-exempt", Expression: "!has(object.metadata.labels) || !('exempt' in object.metadata.labels)"}}
	}
	prodOnly := func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
		b.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}
	}
	failing := func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
		p.Spec.Mutations[0].JSONPatch.Expression = `[JSONPatch{op: "add", path: "/data/" + string(1 / 0), value: "x"}]`
	}
	nss := []*corev1.Namespace{namespace("shop", map[string]string{"env": "prod"}), namespace("lab", map[string]string{"env": "dev"})}
	tests := []struct {
		name    string
		policy  []func(*admissionregistrationv1.MutatingAdmissionPolicy)
		binding []func(*admissionregistrationv1.MutatingAdmissionPolicyBinding)
		obj     *unstructured.Unstructured
		want    []verdict
	}{
		{name: "unchanged", obj: configMap("shop", "owned", nil, map[string]any{"owner": "me"}), want: []verdict{{allowed: true}}},
		{name: "would mutate", obj: configMap("shop", "bare", nil, nil), want: []verdict{{allowed: true, warned: true,
			message: `MutatingAdmissionPolicy 'defaults' with binding 'b' would apply the JSONPatch [{"op":"add","path":"/data","value":{"owner":"nobody"}}]`}}},
		{name: "excluded by matchConditions", policy: []func(*admissionregistrationv1.MutatingAdmissionPolicy){exempting},
			obj: configMap("shop", "bare", map[string]string{"exempt": "yes"}, nil)},
		{name: "namespaceSelector selects", binding: []func(*admissionregistrationv1.MutatingAdmissionPolicyBinding){prodOnly},
			obj: configMap("shop", "owned", nil, map[string]any{"owner": "me"}), want: []verdict{{allowed: true}}},
		{name: "namespaceSelector does not select", binding: []func(*admissionregistrationv1.MutatingAdmissionPolicyBinding){prodOnly},
			obj: configMap("lab", "bare", nil, nil)},
		{name: "mutation error", policy: []func(*admissionregistrationv1.MutatingAdmissionPolicy){failing}, obj: configMap("shop", "bare", nil, nil),
			want: []verdict{{errored: true, message: "policy 'defaults' with binding 'b' denied request: " +
				`expression '[JSONPatch{op: "add", path: "/data/" + string(1 / 0), value: "x"}]' resulted in error: division by zero`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kb := loadedMAPBinding(t, mapPolicy("defaults", tt.policy...), mapBinding("b", "defaults", tt.binding...), nil, nss...)
			if got := verdicts(t, kb, tt.obj); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("verdicts\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// TestMAPParams checks that a MAP binding's params are those given to
// load, and that a missing one with parameterNotFoundAction Allow leaves
// the object out.
func TestMAPParams(t *testing.T) {
	withParams := func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
		p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
		p.Spec.Mutations[0].JSONPatch.Expression = `has(object.data) && object.data.owner == params.data.owner ? [] :
			[JSONPatch{op: "add", path: "/data", value: {"owner": params.data.owner}}]`
	}
	ref := func(action admissionregistrationv1.ParameterNotFoundActionType) func(*admissionregistrationv1.MutatingAdmissionPolicyBinding) {
		return func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
			b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "defaults", Namespace: "policies", ParameterNotFoundAction: &action}
		}
	}
	param := configMap("policies", "defaults", nil, map[string]any{"owner": "ops"})
	tests := []struct {
		name   string
		action admissionregistrationv1.ParameterNotFoundActionType
		params []*unstructured.Unstructured
		obj    *unstructured.Unstructured
		want   []verdict
	}{
		{name: "param's owner already set", action: admissionregistrationv1.DenyAction, params: []*unstructured.Unstructured{param},
			obj: configMap("shop", "cm", nil, map[string]any{"owner": "ops"}), want: []verdict{{allowed: true}}},
		{name: "param's owner would be set", action: admissionregistrationv1.DenyAction, params: []*unstructured.Unstructured{param},
			obj: configMap("shop", "cm", nil, map[string]any{"owner": "me"}), want: []verdict{{allowed: true, warned: true,
				message: `MutatingAdmissionPolicy 'defaults' with binding 'b' would apply the JSONPatch [{"op":"replace","path":"/data/owner","value":"ops"}]`}}},
		{name: "missing param, Allow: nothing to report", action: admissionregistrationv1.AllowAction,
			obj: configMap("shop", "cm", nil, map[string]any{"owner": "me"})},
		{name: "missing param, Deny: an error", action: admissionregistrationv1.DenyAction,
			obj: configMap("shop", "cm", nil, map[string]any{"owner": "me"}), want: []verdict{{errored: true,
				message: "policy 'defaults' with binding 'b' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kb := loadedMAPBinding(t, mapPolicy("defaults", withParams), mapBinding("b", "defaults", ref(tt.action)), tt.params, namespace("shop", nil))
			if got := verdicts(t, kb, tt.obj); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("verdicts\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// TestMAPResults checks a MAP binding's result: named map/<policy>/<binding>,
// a warn counted in the summary, with the properties of
// docs/audit-scanner.md, and that a selection lists its resources.
func TestMAPResults(t *testing.T) {
	p := mapPolicy("defaults", func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
		p.Annotations = map[string]string{policiesv1.AnnotationSeverity: "low", policiesv1.AnnotationCategory: "Defaults"}
	})
	kb := loadedMAPBinding(t, p, mapBinding("b", "defaults"), nil)
	aps := kb.auditPolicies(nil, "")
	if len(aps) != 1 {
		t.Fatalf("%d audit policies, want 1", len(aps))
	}
	r := newReport(pod("team-a", "web"), "run", 0, 0, []evaluation{{policy: aps[0], verdict: verdict{allowed: true, warned: true, message: "patch"}}}, 5)
	want := []result{{policy: "map/defaults/b", category: "Defaults", severity: "low", result: "warn", message: "patch", timestamp: 5,
		properties: map[string]string{
			"mutating": "true", "policy-kind": "MutatingAdmissionPolicy", "policy-name": "defaults", "policy-uid": "uid-defaults",
			"policy-resource-version": "7", "binding-name": "b", "binding-uid": "uid-b", "binding-resource-version": "8",
		}}}
	if !reflect.DeepEqual(r.results, want) {
		t.Errorf("results\n%+v\nwant\n%+v", r.results, want)
	}
	if r.summary != (summary{warn: 1}) {
		t.Errorf("summary %+v", r.summary)
	}
	sel := selectScope(t.Context(), ignoreNotes, nil, nil, true, resolver, &kubeCatalog{bindings: []*kubeBinding{kb}}, namespace("shop", nil))
	if !reflect.DeepEqual(sel.gvrs, []schema.GroupVersionResource{configmapsGVR}) || len(sel.byGVR[configmapsGVR]) != 1 || sel.audited != 1 {
		t.Errorf("resources %v, audited %d", sel.gvrs, sel.audited)
	}
}

// TestMAPInputsDigest checks that the MAP, its binding, a param and the
// namespace change a MAP binding's inputs digest, and that it differs
// from a VAP's of the same name.
func TestMAPInputsDigest(t *testing.T) {
	withParams := func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
		p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	}
	ref := func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
		action := admissionregistrationv1.DenyAction
		b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "limits", Namespace: "policies", ParameterNotFoundAction: &action}
	}
	limits := configMap("policies", "limits", nil, map[string]any{"max": "2"})
	changed := limits.DeepCopy()
	changed.SetResourceVersion("43")
	digestOf := func(p *admissionregistrationv1.MutatingAdmissionPolicy, b *admissionregistrationv1.MutatingAdmissionPolicyBinding,
		param *unstructured.Unstructured, nsVersion string) string {
		kb := loadedMAPBinding(t, p, b, []*unstructured.Unstructured{param})
		return inputsDigest(pod("team-a", "web"), kb.auditPolicies(nil, nsVersion), 0, 0, digest{})
	}
	base := digestOf(mapPolicy("owner", withParams), mapBinding("b", "owner", ref), limits, "3")
	if again := digestOf(mapPolicy("owner", withParams), mapBinding("b", "owner", ref), limits, "3"); again != base {
		t.Fatalf("the same inputs gave two digests")
	}
	vapDigest := inputsDigest(pod("team-a", "web"), loadedBinding(t, vap("owner"), vapBinding("b", "owner", deny), nil).auditPolicies(nil, "3"), 0, 0, digest{})
	for name, d := range map[string]string{
		"the policy's resourceVersion": digestOf(mapPolicy("owner", withParams, func(p *admissionregistrationv1.MutatingAdmissionPolicy) { p.ResourceVersion = "9" }),
			mapBinding("b", "owner", ref), limits, "3"),
		"the binding's resourceVersion": digestOf(mapPolicy("owner", withParams), mapBinding("b", "owner", ref,
			func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) { b.ResourceVersion = "9" }), limits, "3"),
		"a param's resourceVersion": digestOf(mapPolicy("owner", withParams), mapBinding("b", "owner", ref), changed, "3"),
		"the namespace":             digestOf(mapPolicy("owner", withParams), mapBinding("b", "owner", ref), limits, "4"),
		"a VAP of the same name":    vapDigest,
	} {
		if d == base {
			t.Errorf("%s did not change the digest", name)
		}
	}
}

// mapErrReader fails the List of MutatingAdmissionPolicies with err and
// lists no VAPs.
type mapErrReader struct {
	client.Reader
	err error
}

func (r mapErrReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	if _, ok := list.(*admissionregistrationv1.MutatingAdmissionPolicyList); ok {
		return r.err
	}
	return nil
}

// TestLoadKubeCatalogMAPListErrors checks that MAPs the API server does
// not serve, or that the scanner may not list, leave the VAPs audited,
// and that any other error fails the run.
func TestLoadKubeCatalogMAPListErrors(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		wantErr bool
	}{
		{name: "not served", err: &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}}},
		{name: "forbidden", err: apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicies"}, "", errors.New("no rule"))},
		{name: "other", err: apierrors.NewServiceUnavailable("etcd is down"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadKubeCatalog(t.Context(), kubeSource{reader: mapErrReader{err: tt.err}}, slog.New(slog.DiscardHandler))
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
		})
	}
}
