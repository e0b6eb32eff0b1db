//go:build cluster

package cluster_test

import (
	"fmt"
	"strings"
	"testing"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// TestAuditVAP runs the audit scanner on the ValidatingAdmissionPolicies
// installed in a real API server: one result per binding and validation,
// the API server's own messages (compared with a server-side dry run of
// the same object), bindings with namespace and object selectors,
// matchConditions, params, a binding that only audits, a skipped policy,
// and a MutatingAdmissionPolicy audited as "would mutate" (a warn naming
// the JSONPatch the API server would apply); then a second run that reuses every result, a change of a param that
// evaluates the objects again, and --disable-kubernetes-policies.
//
// The subtests share the API server, the namespaces, the ConfigMaps and
// the policies, made here; each starts from the same state (fresh: no
// report, the param as made here) and makes the reports it needs, so that
// each runs alone (hack/cluster-test.sh -run 'TestAuditVAP/<name>').
func TestAuditVAP(t *testing.T) {
	cl := startAuditCluster(t)
	c := cl.Client
	kubeconfig := writeKubeconfig(t, cl.Config)

	for name, labels := range map[string]map[string]string{"team-a": {"env": "prod"}, "team-b": {"env": "dev"}, "policies": nil} {
		mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
	}
	limits := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "policies", Name: "limits"}, Data: map[string]string{"max": "2"}}
	mustCreate(t, c, limits)

	// The objects exist before the policies that would refuse them.
	type cmSpec struct {
		ns, name string
		labels   map[string]string
		data     map[string]string
	}
	owned := map[string]string{"owner": "me"}
	specs := []cmSpec{
		{"team-a", "good", nil, owned},
		{"team-a", "no-owner", nil, map[string]string{"a": "1"}},
		{"team-a", "long-named", nil, owned},
		{"team-a", "big", nil, map[string]string{"owner": "me", "a": "1", "b": "2"}},
		{"team-a", "exempt-one", map[string]string{"exempt": "yes"}, nil},
		{"team-a", "all-wrong-x", nil, map[string]string{"a": "1", "b": "2", "c": "3"}},
		{"team-b", "no-owner", nil, map[string]string{"a": "1"}},
		{"team-b", "audited", map[string]string{"audit": "yes"}, nil},
		{"team-b", "labelled", map[string]string{"team": "x"}, nil},
	}
	newCM := func(s cmSpec) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.name, Labels: s.labels}, Data: s.data}
	}
	cms := map[string]*corev1.ConfigMap{}
	for _, s := range specs {
		cm := newCM(s)
		mustCreate(t, c, cm)
		cms[s.ns+"/"+s.name] = cm
	}

	configmaps := admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
	requireOwner := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "require-owner",
			Annotations: map[string]string{policiesv1.AnnotationSeverity: "high", policiesv1.AnnotationCategory: "Ownership"}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{configmaps}},
			MatchConditions: []admissionregistrationv1.MatchCondition{
				{Name: "not-exempt", Expression: "!has(object.metadata.labels) || !('exempt' in object.metadata.labels)"}},
			Validations: []admissionregistrationv1.Validation{
				{Expression: "has(object.data) && 'owner' in object.data", Message: "an owner is required"},
				{Expression: "object.metadata.name.size() <= 8", MessageExpression: "'name ' + object.metadata.name + ' is too long'"},
			},
		},
	}
	maxKeys := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "max-keys"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			ParamKind:        &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{configmaps}},
			Validations: []admissionregistrationv1.Validation{{
				Expression:        "!has(object.data) || object.data.size() <= int(params.data.max)",
				MessageExpression: "'at most ' + params.data.max + ' keys'",
			}},
		},
	}
	// Skipped in every scope: a wildcard resource.
	wildcard := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "wildcard"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"*"}},
				}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "true"}},
		},
	}
	deny := []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	ownerProd := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "require-owner-prod"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "require-owner", ValidationActions: deny,
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
	}
	ownerAudit := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "require-owner-audit"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "require-owner",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit},
			MatchResources:    &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"audit": "yes"}}}},
	}
	denyParam := admissionregistrationv1.DenyAction
	maxKeysBinding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "max-keys"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "max-keys", ValidationActions: deny,
			ParamRef: &admissionregistrationv1.ParamRef{Name: "limits", Namespace: "policies", ParameterNotFoundAction: &denyParam},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{"team-a", "team-b"}}}}}},
	}
	wildcardBinding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "wildcard"},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "wildcard", ValidationActions: deny},
	}
	// A MAP that gives a team label to the ConfigMaps without one, but
	// the exempt ones: it changes nothing the VAPs read, so the dry runs
	// below still compare their messages.
	teamLabel := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "team-label"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{configmaps}},
			MatchConditions:  requireOwner.Spec.MatchConditions,
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType: admissionregistrationv1.PatchTypeJSONPatch,
				JSONPatch: &admissionregistrationv1.JSONPatch{Expression: `has(object.metadata.labels) && 'team' in object.metadata.labels ? [] :
					has(object.metadata.labels) ? [JSONPatch{op: "add", path: "/metadata/labels/team", value: "unknown"}] :
					[JSONPatch{op: "add", path: "/metadata/labels", value: {"team": "unknown"}}]`},
			}},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}
	teamLabelBinding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "team-label"},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: "team-label"},
	}
	for _, o := range []client.Object{requireOwner, maxKeys, wildcard, ownerProd, ownerAudit, maxKeysBinding, wildcardBinding, teamLabel, teamLabelBinding} {
		mustCreate(t, c, o)
	}

	// The API server's answers, from server-side dry runs of the same
	// objects: the refusal of a Deny binding, the warning of a Warn one.
	var warnings warningCollector
	dryCfg := rest.CopyConfig(cl.Config)
	dryCfg.WarningHandler = &warnings
	dry, err := client.New(dryCfg, client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	dryRun := func(key string) error {
		s := specs[0]
		for _, sp := range specs {
			if sp.ns+"/"+sp.name == key {
				s = sp
			}
		}
		return dry.Create(t.Context(), newCM(s), client.DryRunAll)
	}
	// Wait until the API server enforces every binding, param included,
	// and the MAP's.
	labelled := func() bool {
		fresh := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "fresh"}}
		return dry.Create(t.Context(), fresh, client.DryRunAll) == nil && fresh.Labels["team"] == "unknown"
	}
	eventually(t, "the API server enforces the policies", func() bool {
		return dryRun("team-a/no-owner") != nil && dryRun("team-a/big") != nil && labelled()
	})

	vapProps := func(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, index int) map[string]string {
		var actions []string
		for _, a := range b.Spec.ValidationActions {
			actions = append(actions, string(a))
		}
		return map[string]string{
			"validating": "true", "policy-kind": "ValidatingAdmissionPolicy",
			"policy-name": p.Name, "policy-uid": string(p.UID), "policy-resource-version": p.ResourceVersion,
			"binding-name": b.Name, "binding-uid": string(b.UID), "binding-resource-version": b.ResourceVersion,
			"validation-actions": strings.Join(actions, ","), "validation-index": fmt.Sprint(index),
			"validation-expression": p.Spec.Validations[index].Expression,
		}
	}
	forbidden := func(cm, policy, binding, msg string) string {
		return fmt.Sprintf(`configmaps %q is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s`, cm, policy, binding, msg)
	}
	ownerResult := func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, index int, cm, failure string) expectedResult {
		r := expectedResult{policy: "vap/require-owner/" + b.Name, result: "pass", severity: "high", category: "Ownership", properties: vapProps(requireOwner, b, index)}
		if failure != "" {
			r.result, r.message = "fail", forbidden(cm, "require-owner", b.Name, failure)
		}
		return r
	}
	maxKeysResult := func(cm, failure string) expectedResult {
		r := expectedResult{policy: "vap/max-keys/max-keys", result: "pass", properties: vapProps(maxKeys, maxKeysBinding, 0)}
		if failure != "" {
			r.result, r.message = "fail", forbidden(cm, "max-keys", "max-keys", failure)
		}
		return r
	}
	teamLabelResult := func(patch string) expectedResult {
		r := expectedResult{policy: "map/team-label/team-label", result: "pass", properties: map[string]string{
			"mutating": "true", "policy-kind": "MutatingAdmissionPolicy",
			"policy-name": teamLabel.Name, "policy-uid": string(teamLabel.UID), "policy-resource-version": teamLabel.ResourceVersion,
			"binding-name": teamLabelBinding.Name, "binding-uid": string(teamLabelBinding.UID), "binding-resource-version": teamLabelBinding.ResourceVersion,
		}}
		if patch != "" {
			r.result = "warn"
			r.message = "MutatingAdmissionPolicy 'team-label' with binding 'team-label' would apply the JSONPatch " + patch
		}
		return r
	}
	// withTeamLabel puts the MAP's result first (results are sorted by
	// policy): the objects without labels get them, team-b/audited gets a
	// team label, team-b/labelled has one, team-a/exempt-one is excluded by
	// the matchConditions.
	withTeamLabel := func(want map[string][]expectedResult) map[string][]expectedResult {
		for key, rs := range want {
			switch key {
			case "team-a/exempt-one":
				continue
			case "team-b/labelled":
				want[key] = append([]expectedResult{teamLabelResult("")}, rs...)
			case "team-b/audited":
				want[key] = append([]expectedResult{teamLabelResult(`[{"op":"add","path":"/metadata/labels/team","value":"unknown"}]`)}, rs...)
			default:
				want[key] = append([]expectedResult{teamLabelResult(`[{"op":"add","path":"/metadata/labels","value":{"team":"unknown"}}]`)}, rs...)
			}
		}
		return want
	}
	// results are the expected results of each object; maxKeysFails says
	// whether the object has more keys than the param allows.
	results := func(maxKeysFails map[string]bool) map[string][]expectedResult {
		mk := func(key, cm string) expectedResult {
			if maxKeysFails[key] {
				return maxKeysResult(cm, "at most 2 keys")
			}
			return maxKeysResult(cm, "")
		}
		return withTeamLabel(map[string][]expectedResult{
			"team-a/good": {mk("team-a/good", "good"), ownerResult(ownerProd, 0, "good", ""), ownerResult(ownerProd, 1, "good", "")},
			"team-a/no-owner": {mk("team-a/no-owner", "no-owner"),
				ownerResult(ownerProd, 0, "no-owner", "an owner is required"), ownerResult(ownerProd, 1, "no-owner", "")},
			"team-a/long-named": {mk("team-a/long-named", "long-named"),
				ownerResult(ownerProd, 0, "long-named", ""), ownerResult(ownerProd, 1, "long-named", "name long-named is too long")},
			"team-a/big": {mk("team-a/big", "big"), ownerResult(ownerProd, 0, "big", ""), ownerResult(ownerProd, 1, "big", "")},
			// matchConditions exclude it from require-owner.
			"team-a/exempt-one": {mk("team-a/exempt-one", "exempt-one")},
			"team-a/all-wrong-x": {mk("team-a/all-wrong-x", "all-wrong-x"),
				ownerResult(ownerProd, 0, "all-wrong-x", "an owner is required"), ownerResult(ownerProd, 1, "all-wrong-x", "name all-wrong-x is too long")},
			// The namespaceSelector of require-owner-prod leaves team-b out.
			"team-b/no-owner": {mk("team-b/no-owner", "no-owner")},
			"team-b/audited": {mk("team-b/audited", "audited"),
				ownerResult(ownerAudit, 0, "audited", "an owner is required"), ownerResult(ownerAudit, 1, "audited", "")},
			"team-b/labelled": {mk("team-b/labelled", "labelled")},
		})
	}
	tooMany := map[string]bool{"team-a/big": true, "team-a/all-wrong-x": true}
	summaryOf := func(rs []expectedResult) map[string]int {
		sum := map[string]int{"skip": 1} // the wildcard policy
		for _, r := range rs {
			sum[r.result]++
		}
		return sum
	}
	args := []string{"--report-kind", "openreports", "-o", "-i", "kube-system,kube-public,kube-node-lease,default,policies"}
	checkAll := func(t *testing.T, want map[string][]expectedResult) map[string]map[string]any {
		t.Helper()
		reports := reportsOf(t, c, "Report")
		if len(reports) != len(want) {
			t.Errorf("%d reports, want %d", len(reports), len(want))
		}
		runUID := ""
		for key, rs := range want {
			cm := get(t, c, cms[key])
			rep := reports[cm.Namespace+"/"+string(cm.UID)]
			if rep != nil && runUID == "" {
				runUID, _ = rep["metadata"].(map[string]any)["labels"].(map[string]any)["kubewarden.io/audit-scanner-run-uid"].(string)
			}
			checkReport(t, rep, cm, "v1", "ConfigMap", runUID, summaryOf(rs), rs)
		}
		return reports
	}

	// fresh brings the cluster back to the state the subtests start from:
	// no report, and the param as made here (a subtest changes it), which
	// the API server enforces again before the subtest starts.
	fresh := func(t *testing.T) {
		t.Helper()
		for _, ns := range []string{"team-a", "team-b"} {
			if err := c.DeleteAllOf(t.Context(), &openreportsv1alpha1.Report{}, client.InNamespace(ns)); err != nil {
				t.Fatalf("deleting the reports of %s: %v", ns, err)
			}
		}
		if get(t, c, limits).Data["max"] != "2" {
			limits.Data["max"] = "2"
			if err := c.Update(t.Context(), limits); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, "the API server enforces the param again", func() bool { return dryRun("team-a/big") != nil })
	}
	// firstRun runs the scanner once on a fresh cluster, as most subtests
	// do first: it writes a report of every ConfigMap.
	firstRun := func(t *testing.T) {
		t.Helper()
		fresh(t)
		if s := runAudit(t, kubeconfig, args...); s.code != 0 || s.counts["reports_created"] != len(specs) {
			t.Fatalf("the first run: exit %d, counts %v, want %d reports created\n%s", s.code, s.counts, len(specs), s.logs)
		}
	}

	t.Run("first run", func(t *testing.T) {
		fresh(t)
		s := runAudit(t, kubeconfig, args...)
		if s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
		want := results(tooMany)
		checkAll(t, want)
		if s.counts["reports_created"] != len(want) || s.counts["policies_skipped"] == 0 {
			t.Errorf("counts %v", s.counts)
		}
	})

	t.Run("messages are the API server's", func(t *testing.T) {
		fresh(t)
		want := results(tooMany)
		for key, rs := range want {
			var denied []string
			for _, r := range rs {
				if r.result == "fail" && r.properties["validation-actions"] == "Deny" {
					denied = append(denied, r.message)
				}
			}
			warnings.mu.Lock()
			warnings.texts = nil
			warnings.mu.Unlock()
			err := dryRun(key)
			switch {
			case len(denied) == 0:
				if !apierrors.IsAlreadyExists(err) {
					t.Errorf("%s: the API server answered %v, want it admitted (already exists)", key, err)
				}
			case err == nil:
				t.Errorf("%s: the API server admitted it, the report says %q", key, denied)
			case len(denied) == 1 && err.Error() != denied[0]:
				t.Errorf("%s: the API server says\n%s\nthe report\n%s", key, err.Error(), denied[0])
			case len(denied) > 1 && !strings.Contains(strings.Join(denied, "\n"), err.Error()):
				// The API server stops at the first failure.
				t.Errorf("%s: the API server says\n%s\nnot one of the report's\n%s", key, err.Error(), strings.Join(denied, "\n"))
			}
		}
		// A Warn binding warns with the message the report gives. The loop
		// above may have ended on the same object: its warning goes first.
		warnings.mu.Lock()
		warnings.texts = nil
		warnings.mu.Unlock()
		_ = dryRun("team-b/audited")
		warnings.mu.Lock()
		got := strings.Join(warnings.texts, "\n")
		warnings.mu.Unlock()
		if want := "Validation failed for ValidatingAdmissionPolicy 'require-owner' with binding 'require-owner-audit': an owner is required"; got != want {
			t.Errorf("warning %q, want %q", got, want)
		}
	})

	t.Run("second run reuses every result", func(t *testing.T) {
		firstRun(t)
		s := runAudit(t, kubeconfig, args...)
		if s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
		if n := len(specs); s.counts["reports_reused"] != n || s.counts["reports_created"]+s.counts["reports_updated"] != 0 {
			t.Errorf("counts %v, want %d reused", s.counts, n)
		}
	})

	t.Run("a param change evaluates again", func(t *testing.T) {
		firstRun(t)
		get(t, c, limits)
		limits.Data["max"] = "5"
		if err := c.Update(t.Context(), limits); err != nil {
			t.Fatal(err)
		}
		s := runAudit(t, kubeconfig, args...)
		if s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
		if s.counts["reports_reused"] != 0 || s.counts["reports_updated"] != len(tooMany) {
			t.Errorf("counts %v, want none reused and %d updated", s.counts, len(tooMany))
		}
		checkAll(t, results(nil))
	})

	t.Run("--disable-kubernetes-policies", func(t *testing.T) {
		// Reports written by a run that evaluated the VAPs go.
		firstRun(t)
		s := runAudit(t, kubeconfig, append([]string{"--disable-kubernetes-policies"}, args...)...)
		if s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
		if reports := reportsOf(t, c, "Report"); len(reports) != 0 {
			t.Errorf("%d reports left, want none", len(reports))
		}
	})
}
