//go:build cluster

package cluster_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wardenhq/warden/internal/clustertest"
	"github.com/wardenhq/warden/internal/kubepolicy"
	"github.com/wardenhq/warden/internal/policybuild"
)

// vapKnownDifferences are the answers in which Warden differs from the API
// server on the corpus, each with its reason; docs/compatibility.md lists
// them under the same id. A difference missing here fails TestVAPDiff, and
// so does an entry that no longer differs.
var vapKnownDifferences = []vapKnownDifference{
	{"scaffold-namespace-object", "scaffold", "with-namespaceObject-1/check-deployment-namespace", "Deployment bad-deployment", "message",
		"builtin://cel cannot read namespaceObject: an internal error instead of the validation's message"},
	{"scaffold-namespace-object", "scaffold", "with-namespaceObject-1/check-deployment-namespace", "Deployment good-deployment", "allowed",
		"builtin://cel cannot read namespaceObject: an internal error denies"},
	{"scaffold-namespace-object", "scaffold", "with-namespaceObject-2/check-deployment-namespace", "Deployment bad-deployment", "message",
		"builtin://cel cannot read namespaceObject: an internal error instead of the validation's message"},
	{"scaffold-namespace-object", "scaffold", "with-namespaceObject-2/check-deployment-namespace", "Deployment good-deployment", "allowed",
		"builtin://cel cannot read namespaceObject: an internal error denies"},
	{"scaffold-binding-to-missing-policy", "scaffold", "vap-binding-to-missing-policy/deny-all-configmaps", "ConfigMap any", "refusal",
		"scaffold vap refuses a binding of another policy; the API server keeps it and binds nothing"},
	{"scaffold-param-messages", "scaffold", "vap-missing-param/max-keys", "ConfigMap deny", "message",
		"a missing param is denied with cel-policy's message, not the API server's"},
	{"scaffold-param-messages", "scaffold", "vap-missing-param/max-keys", "ConfigMap selector", "message",
		"a missing param is denied with cel-policy's message, not the API server's"},
	{"scaffold-validation-actions", "scaffold", "vap-audit-annotations-and-reason/warn-on-latest", "Deployment latest", "allowed",
		"scaffold vap drops validationActions: a Warn binding denies"},
	{"scaffold-binding-rules", "scaffold", "with-bindings-2/check-deployment-replicas", "Deployment busybox-deployment", "refusal",
		"scaffold vap refuses a binding with resourceRules"},
	{"scaffold-binding-rules", "scaffold", "with-bindings-2/check-deployment-replicas", "Deployment nginx-deployment", "refusal",
		"scaffold vap refuses a binding with resourceRules"},
	{"scaffold-binding-rules", "scaffold", "with-bindings-4/check-deployment-replicas", "Deployment busybox-deployment-1", "refusal",
		"scaffold vap refuses a binding with excludeResourceRules"},
	{"scaffold-binding-rules", "scaffold", "with-bindings-4/check-deployment-replicas", "Deployment busybox-deployment-2", "refusal",
		"scaffold vap refuses a binding with excludeResourceRules"},
	{"scaffold-binding-rules", "scaffold", "with-bindings-4/check-deployment-replicas", "Deployment nginx-deployment", "refusal",
		"scaffold vap refuses a binding with excludeResourceRules"},
	{"scaffold-refused-policies", "scaffold", "with-params/check-deployments-replicas", "Deployment nginx-deployment2", "allowed",
		"scaffold vap converts a binding the API server refuses (a paramRef without parameterNotFoundAction), which then denies"},
	{"scaffold-refused-policies", "scaffold", "vap-does-not-compile/syntax-error", "ConfigMap ok-a", "allowed",
		"a policy the API server refuses is converted; its load error denies every request"},
	{"scaffold-refused-policies", "scaffold", "vap-does-not-compile/syntax-error", "ConfigMap other", "allowed",
		"a policy the API server refuses is converted; its load error denies every request"},
	{"scaffold-refused-match-condition", "scaffold", "vap-does-not-compile/match-condition-not-bool", "ConfigMap ok-a", "refusal",
		"scaffold vap refuses the policy, as the API server does, for its match condition; the test compares with the API server's answer without the policy"},
	{"scaffold-refused-match-condition", "scaffold", "vap-does-not-compile/match-condition-not-bool", "ConfigMap other", "refusal",
		"scaffold vap refuses the policy, as the API server does, for its match condition; the test compares with the API server's answer without the policy"},
}

// vapKnownDifference is one expected difference: on path ("kubepolicy" or
// "scaffold"), for the case whose name ends with caseSuffix, the object
// named object ("" for the policy's load), in field.
type vapKnownDifference struct {
	id, path, caseSuffix, object, field, reason string
}

// TestVAPDiff is the differential test of Kubernetes' admission policies:
// each case of the corpus (loadVAPCorpus: public ValidatingAdmissionPolicies
// and MutatingAdmissionPolicies with the objects their own tests send, and
// Warden's) is installed in a real API server, every object is sent to it
// with a server-side dry run, and the same request is evaluated by
// internal/kubepolicy; allowed, code, reason, message, warnings and, for a
// MutatingAdmissionPolicy, the object as it would be stored must agree.
// The conversion of wardenctl scaffold vap, run by the policy server, is
// compared the same way and reported apart.
func TestVAPDiff(t *testing.T) {
	cases := loadVAPCorpus(t)
	cl := clustertest.Start(t)
	d := newVAPDiff(t, cl)
	d.scaffold = startScaffoldServer(t, cases, cl.Config)

	start := time.Now()
	rounds := vapRounds(cases)
	for i, round := range rounds {
		d.runRound(i, round)
	}
	t.Logf("%d cases in %d rounds, %d requests, in %s", len(cases), len(rounds), d.requests(), time.Since(start).Round(time.Second))
	d.report(cases)
}

// vapDiff holds the test's API server and what it found.
type vapDiff struct {
	t        *testing.T
	cl       *clustertest.Cluster
	dyn      *dynamic.DynamicClient
	scaffold *scaffoldServer

	mu      sync.Mutex
	users   map[string]authenticationv1.UserInfo // by the impersonation asked for
	results []vapResult
}

// vapResult is the comparison of one object of one case, or of the
// case's load (object "").
type vapResult struct {
	c      *vapCase
	object string
	api    vapAnswer
	warden vapAnswer
	// scaffold is the answer of the converted policy; nil for a
	// MutatingAdmissionPolicy.
	scaffold *vapAnswer
	// scaffoldOnly: one side refused the policy, so only the scaffolded
	// policy's answer to the object is compared.
	scaffoldOnly bool
}

// vapAnswer is what one side answered.
type vapAnswer struct {
	Allowed  bool
	Code     int32
	Reason   string
	Message  string
	Warnings []string
	// Object is the object as it would be stored, for an allowed request
	// to a MutatingAdmissionPolicy.
	Object map[string]any
	// Refused is the refusal of the policy or a binding: the API server's
	// create error, Warden's load error.
	Refused string
}

func newVAPDiff(t *testing.T, cl *clustertest.Cluster) *vapDiff {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cl.Config)
	if err != nil {
		t.Fatal(err)
	}
	// Impersonated users may do anything, so that only the policies deny.
	mustCreate(t, cl.Client, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "vapdiff-everyone"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "system:authenticated"}},
	})
	d := &vapDiff{t: t, cl: cl, dyn: dyn, users: map[string]authenticationv1.UserInfo{}}
	for _, s := range sentinelPolicies() {
		d.create(s)
	}
	return d
}

// The sentinels tell when the API server's policy plugins have seen a
// round's policies and bindings, and their removal: a round binds them
// last and unbinds them last, and the plugins read each kind in order.
const (
	sentinelVAPLabel = "vapdiff.wardenhq.io/sentinel-vap"
	sentinelMAPLabel = "vapdiff.wardenhq.io/sentinel-map"
)

func sentinelPolicies() []*unstructured.Unstructured {
	rules := []any{map[string]any{"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"configmaps"}}}
	vap := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
		"metadata": map[string]any{"name": "vapdiff-sentinel"},
		"spec": map[string]any{"matchConstraints": map[string]any{"resourceRules": rules},
			"validations": []any{map[string]any{"expression": "false", "message": "sentinel"}}},
	}}
	mp := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
		"metadata": map[string]any{"name": "vapdiff-sentinel"},
		"spec": map[string]any{"matchConstraints": map[string]any{"resourceRules": rules}, "reinvocationPolicy": "Never",
			"mutations": []any{map[string]any{"patchType": "JSONPatch", "jsonPatch": map[string]any{
				"expression": `[JSONPatch{op: "add", path: "/data", value: {"sentinel": "mutated"}}]`}}}},
	}}
	return []*unstructured.Unstructured{vap, mp}
}

func sentinelBindings(round int) []*unstructured.Unstructured {
	binding := func(kind, label string, spec map[string]any) *unstructured.Unstructured {
		spec["policyName"] = "vapdiff-sentinel"
		spec["matchResources"] = map[string]any{"objectSelector": map[string]any{"matchLabels": map[string]any{label: fmt.Sprint(round)}}}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
			"metadata": map[string]any{"name": fmt.Sprintf("vapdiff-sentinel-%d", round)}, "spec": spec,
		}}
	}
	return []*unstructured.Unstructured{
		binding("ValidatingAdmissionPolicyBinding", sentinelVAPLabel, map[string]any{"validationActions": []any{"Deny"}}),
		binding("MutatingAdmissionPolicyBinding", sentinelMAPLabel, map[string]any{}),
	}
}

// waitSentinels waits until the round's sentinels are bound (on) or
// unbound.
func (d *vapDiff) waitSentinels(round int, on bool) {
	d.t.Helper()
	probe := func(label string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "sentinel-probe", "namespace": "default", "labels": map[string]any{label: fmt.Sprint(round)}}}}
	}
	eventually(d.t, fmt.Sprintf("round %d's sentinels are bound: %v", round, on), func() bool {
		_, err := d.dryRun(probe(sentinelVAPLabel), nil, nil)
		if (err != nil) != on {
			return false
		}
		got, err := d.dryRun(probe(sentinelMAPLabel), nil, nil)
		if err != nil {
			return false
		}
		_, mutated := got.Object["data"]
		return mutated == on
	})
}

func (d *vapDiff) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, schema.GroupVersionResource) {
	d.t.Helper()
	gvk := o.GroupVersionKind()
	m, err := d.cl.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		d.t.Fatalf("mapping %s: %v", gvk, err)
	}
	if o.GetNamespace() != "" {
		return d.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), m.Resource
	}
	return d.dyn.Resource(m.Resource), m.Resource
}

// create creates o and returns the API server's refusal, if any.
func (d *vapDiff) create(o *unstructured.Unstructured) error {
	r, _ := d.resource(o)
	_, err := r.Create(d.t.Context(), o, metav1.CreateOptions{})
	return err
}

func (d *vapDiff) delete(o *unstructured.Unstructured) {
	r, _ := d.resource(o)
	if err := r.Delete(d.t.Context(), o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		d.t.Errorf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// warningCollector keeps the warnings of one request.
type warningCollector struct {
	mu    sync.Mutex
	texts []string
}

func (w *warningCollector) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.texts = append(w.texts, text)
}

// dryRun sends o to the API server with a server-side dry-run create, as
// user (nil: the administrator), and returns the object as it would be
// stored or the API server's refusal; the warnings go to warnings.
func (d *vapDiff) dryRun(o *unstructured.Unstructured, user *authenticationv1.UserInfo, warnings *warningCollector) (*unstructured.Unstructured, error) {
	cfg := rest.CopyConfig(d.cl.Config)
	impersonate(cfg, user)
	if warnings != nil {
		cfg.WarningHandler = warnings
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	_, gvr := d.resource(o)
	r := dyn.Resource(gvr)
	if o.GetNamespace() != "" {
		return r.Namespace(o.GetNamespace()).Create(d.t.Context(), o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	}
	return r.Create(d.t.Context(), o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
}

func impersonate(cfg *rest.Config, user *authenticationv1.UserInfo) {
	if user == nil {
		return
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user.Username, UID: user.UID, Groups: user.Groups, Extra: map[string][]string{}}
	for k, v := range user.Extra {
		cfg.Impersonate.Extra[k] = v
	}
}

// userInfo is the user the API server sees for user (nil: the
// administrator), as its SelfSubjectReview says: what it puts in the
// AdmissionRequests it sends.
func (d *vapDiff) userInfo(user *authenticationv1.UserInfo) authenticationv1.UserInfo {
	d.t.Helper()
	key, _ := json.Marshal(user)
	d.mu.Lock()
	defer d.mu.Unlock()
	if u, ok := d.users[string(key)]; ok {
		return u
	}
	cfg := rest.CopyConfig(d.cl.Config)
	impersonate(cfg, user)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		d.t.Fatal(err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(d.t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		d.t.Fatalf("asking the API server who %s is: %v", key, err)
	}
	d.users[string(key)] = review.Status.UserInfo
	return review.Status.UserInfo
}

// vapRounds splits the cases into rounds whose namespaces (with their
// labels) and params agree, so that the cases of a round can be installed
// together.
func vapRounds(cases []*vapCase) [][]*vapCase {
	type round struct {
		cases  []*vapCase
		labels map[string]map[string]string
		params map[string]string
		names  map[string]bool
	}
	var rounds []*round
	for _, c := range cases {
		params := map[string]string{}
		for _, p := range c.params {
			b, _ := json.Marshal(p.Object)
			params[p.GetKind()+"/"+p.GetNamespace()+"/"+p.GetName()] = string(b)
		}
		var fit *round
		for _, r := range rounds {
			ok := true
			for ns, l := range c.namespaces {
				if prev, seen := r.labels[ns]; seen && !maps.Equal(prev, l) {
					ok = false
				}
			}
			for k, v := range params {
				if prev, seen := r.params[k]; seen && prev != v {
					ok = false
				}
			}
			// Policies and bindings are cluster-scoped: one name each.
			for _, o := range append([]*unstructured.Unstructured{c.policy}, c.bindings...) {
				if r.names[o.GetKind()+"/"+o.GetName()] {
					ok = false
				}
			}
			if ok {
				fit = r
				break
			}
		}
		if fit == nil {
			fit = &round{labels: map[string]map[string]string{}, params: map[string]string{}, names: map[string]bool{}}
			rounds = append(rounds, fit)
		}
		fit.cases = append(fit.cases, c)
		maps.Copy(fit.labels, c.namespaces)
		maps.Copy(fit.params, params)
		for _, o := range append([]*unstructured.Unstructured{c.policy}, c.bindings...) {
			fit.names[o.GetKind()+"/"+o.GetName()] = true
		}
	}
	out := make([][]*vapCase, len(rounds))
	for i, r := range rounds {
		out[i] = r.cases
	}
	return out
}

// roundCase is a case as one round installed it.
type roundCase struct {
	*vapCase
	// installed are the policy and bindings the API server holds.
	bindings []*unstructured.Unstructured
	refused  string
	// params and namespaces as the API server holds them.
	params, namespaces []*unstructured.Unstructured
	// baselines are the objects as the API server would store them
	// without any policy: what its admission plugins receive.
	baselines []*unstructured.Unstructured
	skipped   []string
}

func (d *vapDiff) runRound(round int, cases []*vapCase) {
	t := d.t
	t.Helper()
	ctx := t.Context()
	c := d.cl.Client

	// Namespaces, with the labels the round's cases give them and no
	// others.
	namespaces := map[string]map[string]string{}
	for _, vc := range cases {
		maps.Copy(namespaces, vc.namespaces)
	}
	for ns, labels := range namespaces {
		want := map[string]string{"kubernetes.io/metadata.name": ns}
		maps.Copy(want, labels)
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"})
		err := c.Get(ctx, client.ObjectKey{Name: ns}, obj)
		switch {
		case apierrors.IsNotFound(err):
			obj.SetName(ns)
			obj.SetLabels(want)
			err = c.Create(ctx, obj)
		case err == nil && !maps.Equal(obj.GetLabels(), want):
			obj.SetLabels(want)
			err = c.Update(ctx, obj)
		}
		if err != nil {
			t.Fatalf("namespace %s: %v", ns, err)
		}
	}

	// Params, then the objects as the API server stores them with no
	// policy of the round installed.
	created := map[string]bool{}
	var rcs []*roundCase
	for _, vc := range cases {
		rc := &roundCase{vapCase: vc}
		for _, p := range vc.params {
			key := p.GetKind() + "/" + p.GetNamespace() + "/" + p.GetName()
			if !created[key] {
				created[key] = true
				if err := d.create(p.DeepCopy()); err != nil {
					t.Logf("%s: the API server refuses param %s: %v", vc.name, key, err)
				}
			}
			r, _ := d.resource(p)
			if got, err := r.Get(ctx, p.GetName(), metav1.GetOptions{}); err == nil {
				rc.params = append(rc.params, got)
			}
		}
		for ns := range vc.namespaces {
			obj := &unstructured.Unstructured{}
			obj.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"})
			if err := c.Get(ctx, client.ObjectKey{Name: ns}, obj); err != nil {
				t.Fatal(err)
			}
			rc.namespaces = append(rc.namespaces, obj)
		}
		for _, o := range vc.objects {
			labels := o.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			labels[vapCaseLabel] = vc.label
			o.SetLabels(labels)
			base, err := d.dryRun(o, vc.user, nil)
			if err != nil {
				rc.skipped = append(rc.skipped, fmt.Sprintf("%s %s: %v", o.GetKind(), o.GetName(), err))
				base = nil
			}
			rc.baselines = append(rc.baselines, base)
		}
		rcs = append(rcs, rc)
	}

	// The policies and their bindings, each binding narrowed to the
	// case's objects; then the sentinels.
	var installed []*unstructured.Unstructured
	for _, rc := range rcs {
		if err := d.create(rc.policy.DeepCopy()); err != nil {
			rc.refused = err.Error()
		} else {
			installed = append(installed, rc.policy)
		}
		for _, b := range rc.vapCase.bindings {
			b = narrowBinding(b, rc.label)
			rc.bindings = append(rc.bindings, b)
			if err := d.create(b.DeepCopy()); err != nil {
				if rc.refused == "" {
					rc.refused = err.Error()
				}
			} else {
				installed = append(installed, b)
			}
		}
	}
	sentinels := sentinelBindings(round)
	for _, s := range sentinels {
		if err := d.create(s); err != nil {
			t.Fatal(err)
		}
	}
	d.waitSentinels(round, true)

	// Every object of every case, to both, in parallel.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, rc := range rcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			d.compareCase(rc)
		}()
	}
	wg.Wait()

	// Unbind and remove all, the sentinels last, and wait until the API
	// server has seen it.
	for _, o := range slices.Backward(installed) {
		d.delete(o)
	}
	for _, vc := range cases {
		for _, p := range vc.params {
			d.delete(p)
		}
	}
	for _, s := range sentinels {
		d.delete(s)
	}
	d.waitSentinels(round, false)
}

// narrowBinding returns b with validationActions Deny when it has none
// (Kyverno's tests leave it out), and an objectSelector that also requires
// the case's label.
func narrowBinding(b *unstructured.Unstructured, label string) *unstructured.Unstructured {
	b = b.DeepCopy()
	if b.GetKind() == "ValidatingAdmissionPolicyBinding" {
		if a, _, _ := unstructured.NestedSlice(b.Object, "spec", "validationActions"); len(a) == 0 {
			_ = unstructured.SetNestedSlice(b.Object, []any{"Deny"}, "spec", "validationActions")
		}
	}
	exprs, _, _ := unstructured.NestedSlice(b.Object, "spec", "matchResources", "objectSelector", "matchExpressions")
	exprs = append(exprs, map[string]any{"key": vapCaseLabel, "operator": "In", "values": []any{label}})
	_ = unstructured.SetNestedSlice(b.Object, exprs, "spec", "matchResources", "objectSelector", "matchExpressions")
	return b
}

// compareCase evaluates every object of rc with the API server, with
// kubepolicy and with the scaffolded policy, and records the answers.
func (d *vapDiff) compareCase(rc *roundCase) {
	settings, err := json.Marshal(map[string]any{
		"policy": rc.policy.Object, "bindings": objectsOf(rc.bindings),
		"params": objectsOf(rc.params), "namespaces": objectsOf(rc.namespaces),
	})
	if err != nil {
		d.t.Fatal(err)
	}
	policy, loadErr := kubepolicy.Load(settings, kubepolicy.Options{})
	if loadErr == nil {
		defer policy.Close()
	}
	if rc.refused != "" || loadErr != nil {
		res := vapResult{c: rc.vapCase, api: vapAnswer{Refused: rc.refused}}
		if loadErr != nil {
			res.warden.Refused = loadErr.Error()
		}
		d.record(res)
	}
	user := d.userInfo(rc.user)
	for i, o := range rc.objects {
		base := rc.baselines[i]
		if base == nil {
			continue
		}
		res := vapResult{c: rc.vapCase, object: o.GetKind() + " " + o.GetName()}
		res.api = d.apiAnswer(o, rc.user, rc.mutating)
		req := admissionRequest(d, o, base, user, rc.mutating)
		if rc.refused != "" || loadErr != nil {
			// The load was compared; what the API server does without
			// the policy is still compared with the scaffolded one.
			res.scaffoldOnly = true
		} else if resp, err := policy.Review(d.t.Context(), req); err != nil {
			res.warden = vapAnswer{Refused: "review: " + err.Error()}
		} else {
			res.warden = wardenAnswer(d.t, req, resp, rc.mutating)
		}
		if !rc.mutating && d.scaffold != nil {
			res.scaffold = d.scaffold.answer(d, rc, o, req)
		}
		d.record(res)
	}
}

func objectsOf(us []*unstructured.Unstructured) []any {
	out := make([]any, 0, len(us))
	for _, u := range us {
		out = append(out, u.Object)
	}
	return out
}

func (d *vapDiff) record(r vapResult) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.results = append(d.results, r)
}

func (d *vapDiff) requests() int {
	n := 0
	for _, r := range d.results {
		if r.object != "" {
			n++
		}
	}
	return n
}

// apiAnswer sends o to the API server; a paramKind informer not yet
// synced is retried.
func (d *vapDiff) apiAnswer(o *unstructured.Unstructured, user *authenticationv1.UserInfo, mutating bool) vapAnswer {
	for attempt := 0; ; attempt++ {
		var warnings warningCollector
		got, err := d.dryRun(o, user, &warnings)
		if err != nil && strings.Contains(err.Error(), "not yet synced") && attempt < 50 {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		a := vapAnswer{Allowed: err == nil, Warnings: warnings.texts}
		if err != nil {
			st, ok := err.(apierrors.APIStatus)
			if !ok {
				d.t.Fatalf("dry run of %s: %v", o.GetName(), err)
			}
			s := st.Status()
			a.Code, a.Reason, a.Message = s.Code, string(s.Reason), s.Message
		} else if mutating {
			a.Object = normalizeStored(got.Object)
		}
		return a
	}
}

// admissionRequest is the AdmissionRequest the API server's admission
// plugins get for a create of o: base is o as the API server stores it
// with no policy (defaulted, with its managed fields); for a mutating
// policy the fields the API server sets only after admission are left out.
func admissionRequest(d *vapDiff, o, base *unstructured.Unstructured, user authenticationv1.UserInfo, mutating bool) *admissionv1.AdmissionRequest {
	_, gvr := d.resource(o)
	obj := base.DeepCopy()
	if mutating {
		for _, f := range []string{"uid", "creationTimestamp", "resourceVersion", "generation"} {
			unstructured.RemoveNestedField(obj.Object, "metadata", f)
		}
	}
	raw, err := json.Marshal(obj.Object)
	if err != nil {
		d.t.Fatal(err)
	}
	gvk := o.GroupVersionKind()
	kind := metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind}
	resource := metav1.GroupVersionResource{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource}
	return &admissionv1.AdmissionRequest{
		UID: types.UID("vapdiff-" + o.GetName()), Kind: kind, Resource: resource, RequestKind: &kind, RequestResource: &resource,
		Name: o.GetName(), Namespace: o.GetNamespace(), Operation: admissionv1.Create, UserInfo: user,
		Object: runtime.RawExtension{Raw: raw}, DryRun: ptr.To(true),
		Options: runtime.RawExtension{Raw: []byte(`{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1","dryRun":["All"]}`)},
	}
}

// wardenAnswer reads kubepolicy's response; for a mutating policy the
// patch is applied to the request's object.
func wardenAnswer(t *testing.T, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse, mutating bool) vapAnswer {
	a := vapAnswer{Allowed: resp.Allowed, Warnings: resp.Warnings}
	if resp.Result != nil && !resp.Allowed {
		a.Code, a.Reason, a.Message = resp.Result.Code, string(resp.Result.Reason), resp.Result.Message
	}
	if mutating && resp.Allowed {
		doc := req.Object.Raw
		if len(resp.Patch) > 0 {
			p, err := jsonpatch.DecodePatch(resp.Patch)
			if err != nil {
				return vapAnswer{Refused: "decoding the patch: " + err.Error()}
			}
			if doc, err = p.Apply(doc); err != nil {
				return vapAnswer{Refused: "applying the patch: " + err.Error()}
			}
		}
		var obj map[string]any
		if err := json.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		a.Object = normalizeStored(obj)
	}
	return a
}

// normalizeStored leaves out of an object the fields that differ between
// two dry runs of it (uid, timestamps, resource version, managed fields)
// or that the API server sets after admission (generation, an empty
// status).
func normalizeStored(obj map[string]any) map[string]any {
	// Through JSON, so that numbers are float64 on both sides.
	b, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	obj = nil
	if err := json.Unmarshal(b, &obj); err != nil {
		panic(err)
	}
	for _, f := range []string{"uid", "creationTimestamp", "resourceVersion", "generation", "managedFields"} {
		unstructured.RemoveNestedField(obj, "metadata", f)
	}
	if s, ok := obj["status"].(map[string]any); ok && len(s) == 0 {
		delete(obj, "status")
	}
	return obj
}

// vapDifference is one field in which two answers differ.
type vapDifference struct {
	path, caseName, object, field, api, warden string
}

func (v vapDifference) String() string {
	obj := v.object
	if obj == "" {
		obj = "(load)"
	}
	return fmt.Sprintf("%s: %s, %s: %s\n\tAPI server: %s\n\tWarden:     %s", v.path, v.caseName, obj, v.field, v.api, v.warden)
}

// compareAnswers returns the fields in which warden's answer differs from
// the API server's. Scaffolded policies answer as a webhook: their message
// is compared with the message of the API server's denial (after
// "denied request: "), and their code only for 403s (a webhook's denial is
// 403 unless it says otherwise); warnings and objects are not compared.
func compareAnswers(path string, api, warden vapAnswer, webhook bool) [][3]string {
	var out [][3]string
	diff := func(field string, a, w any) {
		if !reflect.DeepEqual(a, w) {
			out = append(out, [3]string{field, fmt.Sprint(a), fmt.Sprint(w)})
		}
	}
	if api.Refused != "" || warden.Refused != "" {
		diff("refusal", api.Refused, warden.Refused)
		return out
	}
	diff("allowed", api.Allowed, warden.Allowed)
	if api.Allowed != warden.Allowed {
		if !api.Allowed {
			out[0][1] += " (" + api.Message + ")"
		} else {
			out[0][2] += " (" + warden.Message + ")"
		}
		return out
	}
	if webhook {
		if !api.Allowed {
			_, msg, _ := strings.Cut(api.Message, "denied request: ")
			diff("message", msg, warden.Message)
		}
		return out
	}
	if !api.Allowed {
		diff("code", api.Code, warden.Code)
		diff("reason", api.Reason, warden.Reason)
		diff("message", api.Message, warden.Message)
	}
	diff("warnings", api.Warnings, warden.Warnings)
	if api.Object != nil || warden.Object != nil {
		if !reflect.DeepEqual(api.Object, warden.Object) {
			a, _ := json.Marshal(api.Object)
			w, _ := json.Marshal(warden.Object)
			out = append(out, [3]string{"object", string(a), string(w)})
		}
	}
	return out
}

// report compares every result, fails the test on a difference that
// vapKnownDifferences lacks and on an entry that did not differ, and logs
// the agreement figures docs/compatibility.md records.
func (d *vapDiff) report(cases []*vapCase) {
	t := d.t
	sort.SliceStable(d.results, func(i, j int) bool { return d.results[i].c.label < d.results[j].c.label })
	var diffs []vapDifference
	type tally struct{ answers, verdicts, agreeing, messages, messagesAgreeing int }
	var kp, sc tally
	for _, r := range d.results {
		if r.object == "" {
			t.Logf("refused: %s\n\tAPI server: %s\n\tWarden:     %s", r.c.name, r.api.Refused, r.warden.Refused)
		}
		if !r.scaffoldOnly {
			for _, f := range compareAnswers("kubepolicy", r.api, r.warden, false) {
				diffs = append(diffs, vapDifference{"kubepolicy", r.c.name, r.object, f[0], f[1], f[2]})
			}
		}
		count := func(tl *tally, w vapAnswer, webhook bool) {
			tl.answers++
			fields := compareAnswers("", r.api, w, webhook)
			if len(fields) == 0 {
				tl.agreeing++
			}
			if r.api.Refused == "" && w.Refused == "" && r.api.Allowed == w.Allowed {
				tl.verdicts++
			}
			if !r.api.Allowed && r.api.Refused == "" {
				tl.messages++
				if !slices.ContainsFunc(fields, func(f [3]string) bool { return f[0] == "message" || f[0] == "allowed" }) {
					tl.messagesAgreeing++
				}
			}
		}
		if !r.scaffoldOnly {
			count(&kp, r.warden, false)
		}
		if r.scaffold != nil {
			for _, f := range compareAnswers("scaffold", r.api, *r.scaffold, true) {
				diffs = append(diffs, vapDifference{"scaffold", r.c.name, r.object, f[0], f[1], f[2]})
			}
			count(&sc, *r.scaffold, true)
		}
	}

	mutating := 0
	for _, c := range cases {
		if c.mutating {
			mutating++
		}
	}
	t.Logf("corpus: %d cases (%d ValidatingAdmissionPolicies, %d MutatingAdmissionPolicies), %d answers compared",
		len(cases), len(cases)-mutating, mutating, len(d.results))
	t.Logf("kubepolicy: %d of %d answers agree in every field; verdicts %d of %d; messages of denials %d of %d",
		kp.agreeing, kp.answers, kp.verdicts, kp.answers, kp.messagesAgreeing, kp.messages)
	t.Logf("scaffold vap + builtin://cel: %d of %d answers agree; verdicts %d of %d; messages of denials %d of %d",
		sc.agreeing, sc.answers, sc.verdicts, sc.answers, sc.messagesAgreeing, sc.messages)
	denied := 0
	for _, r := range d.results {
		if r.object != "" && !r.api.Allowed {
			denied++
		}
	}
	t.Logf("the API server denied %d of %d objects", denied, d.requests())

	docs, err := os.ReadFile(filepath.Join(policybuild.RepoRootForTest(t), "docs", "compatibility.md"))
	if err != nil {
		t.Fatal(err)
	}
	used := make([]bool, len(vapKnownDifferences))
	for _, df := range diffs {
		known := slices.IndexFunc(vapKnownDifferences, func(k vapKnownDifference) bool {
			return k.path == df.path && strings.HasSuffix(df.caseName, k.caseSuffix) && k.object == df.object && k.field == df.field
		})
		if known < 0 {
			t.Errorf("difference not in vapKnownDifferences:\n%s", df)
			continue
		}
		used[known] = true
		t.Logf("known difference %s: %s", vapKnownDifferences[known].id, df)
	}
	for i, k := range vapKnownDifferences {
		if !used[i] {
			t.Errorf("known difference %s (%s, %s, %s, %s) did not occur: remove it here and in docs/compatibility.md", k.id, k.path, k.caseSuffix, k.object, k.field)
		}
		if !strings.Contains(string(docs), "`"+k.id+"`") {
			t.Errorf("docs/compatibility.md does not list known difference `%s`", k.id)
		}
	}
	if kp.answers == 0 || denied == 0 || denied == d.requests() {
		t.Errorf("the corpus must have objects the API server allows and objects it denies: %d denied of %d", denied, d.requests())
	}
}
