//go:build cluster

package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/policyconfig"
	"github.com/wardenhq/warden/internal/policyserver"
	"github.com/wardenhq/warden/internal/testkit"
	"github.com/wardenhq/warden/internal/wardenctl"
)

// scaffoldServer runs, in one policy server, the ClusterAdmissionPolicy
// that wardenctl scaffold vap makes of each binding of each
// ValidatingAdmissionPolicy of the corpus, with builtin://cel.
type scaffoldServer struct {
	port int
	// policies maps a case's binding (case label and binding name) to its
	// converted policy, or to the conversion's refusal.
	policies map[string]*scaffolded
}

type scaffolded struct {
	id      string
	refused string
	spec    scaffoldSpec
}

// scaffoldSpec is the part of a ClusterAdmissionPolicy's spec that decides
// which requests its webhook gets.
type scaffoldSpec struct {
	Rules             []scaffoldRule                             `json:"rules"`
	NamespaceSelector *metav1.LabelSelector                      `json:"namespaceSelector"`
	ObjectSelector    *metav1.LabelSelector                      `json:"objectSelector"`
	MatchConditions   []admissionregistrationv1.MatchCondition   `json:"matchConditions"`
	FailurePolicy     *admissionregistrationv1.FailurePolicyType `json:"failurePolicy"`
}

type scaffoldRule struct {
	APIGroups   []string `json:"apiGroups"`
	APIVersions []string `json:"apiVersions"`
	Resources   []string `json:"resources"`
	Operations  []string `json:"operations"`
}

func scaffoldKey(label, binding string) string { return label + "/" + binding }

// answer evaluates req as the API server would through the webhooks of
// the case's scaffolded policies, one per binding, in binding order: a
// request a webhook does not match is not sent to it; the first denial is
// the answer.
func (s *scaffoldServer) answer(d *vapDiff, rc *roundCase, o *unstructured.Unstructured, req *admissionv1.AdmissionRequest) *vapAnswer {
	out := &vapAnswer{Allowed: true}
	for _, b := range rc.bindings {
		sp := s.policies[scaffoldKey(rc.label, b.GetName())]
		if sp == nil {
			continue
		}
		if sp.refused != "" {
			return &vapAnswer{Refused: "scaffold vap: " + sp.refused}
		}
		if !sp.matches(rc, o, req) {
			continue
		}
		if call, err := sp.matchConditions(d.t.Context(), req); err != nil {
			return &vapAnswer{Code: 500, Message: err.Error()}
		} else if !call {
			continue
		}
		review, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
		if err != nil {
			d.t.Fatal(err)
		}
		var resp reviewResponse
		for attempt := 0; ; attempt++ {
			resp = validateReview(d.t, s.port, sp.id, review)
			// The policy server's reflectors may lag behind the round's
			// params and namespaces.
			if resp.Status == nil || !strings.Contains(resp.Status.Message, "Cannot find") || attempt > 20 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if !resp.Allowed {
			out.Allowed = false
			if resp.Status != nil {
				out.Code, out.Message = int32(resp.Status.Code), resp.Status.Message
			}
			return out
		}
	}
	return out
}

// matches reports whether the scaffolded policy's webhook gets req: its
// rules, namespaceSelector and objectSelector, as the API server matches a
// webhook's.
func (sp *scaffolded) matches(rc *roundCase, o *unstructured.Unstructured, req *admissionv1.AdmissionRequest) bool {
	ruleMatch := false
	for _, r := range sp.spec.Rules {
		any := func(list []string, v string) bool { return slices.Contains(list, "*") || slices.Contains(list, v) }
		if any(r.APIGroups, req.Resource.Group) && any(r.APIVersions, req.Resource.Version) &&
			any(r.Resources, req.Resource.Resource) && any(r.Operations, string(req.Operation)) {
			ruleMatch = true
		}
	}
	if !ruleMatch {
		return false
	}
	selects := func(sel *metav1.LabelSelector, lbls map[string]string) bool {
		if sel == nil {
			return true
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return false
		}
		return s.Matches(labels.Set(lbls))
	}
	if !selects(sp.spec.ObjectSelector, o.GetLabels()) {
		return false
	}
	switch {
	case o.GetKind() == "Namespace":
		return selects(sp.spec.NamespaceSelector, o.GetLabels())
	case o.GetNamespace() == "":
		return true
	}
	for _, ns := range rc.namespaces {
		if ns.GetName() == o.GetNamespace() {
			return selects(sp.spec.NamespaceSelector, ns.GetLabels())
		}
	}
	return selects(sp.spec.NamespaceSelector, nil)
}

// webhookConditions compiles a webhook's matchConditions as the API
// server does; its environment is built once.
var webhookConditions = sync.OnceValue(func() plugincel.ConditionCompiler {
	return plugincel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
})

// matchConditions evaluates the scaffolded policy's matchConditions as the
// API server evaluates its webhook's (the controller copies them there),
// with its failurePolicy: whether the webhook is called, or the error that
// rejects the request. The API server's authorizer is not at hand: a
// condition that asks it fails.
func (sp *scaffolded) matchConditions(ctx context.Context, req *admissionv1.AdmissionRequest) (bool, error) {
	if len(sp.spec.MatchConditions) == 0 {
		return true, nil
	}
	exprs := make([]plugincel.ExpressionAccessor, len(sp.spec.MatchConditions))
	for i, c := range sp.spec.MatchConditions {
		exprs[i] = &matchconditions.MatchCondition{Name: c.Name, Expression: c.Expression}
	}
	m := matchconditions.NewMatcher(webhookConditions().CompileCondition(exprs, plugincel.OptionalVariableDeclarations{HasAuthorizer: true},
		environment.StoredExpressions), sp.spec.FailurePolicy, "webhook", "validating", sp.id)
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(req.Object.Raw); err != nil {
		return false, err
	}
	gvk := schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind}
	gvr := schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource}
	who := &user.DefaultInfo{Name: req.UserInfo.Username, UID: req.UserInfo.UID, Groups: req.UserInfo.Groups}
	attrs := admission.NewAttributesRecord(obj, nil, gvk, req.Namespace, req.Name, gvr, req.SubResource,
		admission.Operation(req.Operation), nil, true, who)
	r := m.Match(ctx, &admission.VersionedAttributes{Attributes: attrs, VersionedKind: gvk, VersionedObject: obj}, nil, nil)
	return r.Matches, r.Error
}

// startScaffoldServer converts every binding of every
// ValidatingAdmissionPolicy of cases with wardenctl scaffold vap, as its
// case narrows it, and runs the results in one policy server that reads
// the cluster of cfg.
func startScaffoldServer(t *testing.T, cases []*vapCase, cfg *rest.Config) *scaffoldServer {
	t.Helper()
	s := &scaffoldServer{policies: map[string]*scaffolded{}}
	entries := map[string]any{}
	dir := t.TempDir()
	for _, c := range cases {
		if c.mutating {
			continue
		}
		for _, b := range c.bindings {
			b = narrowBinding(b, c.label)
			sp := &scaffolded{id: fmt.Sprintf("%s-%s", c.label, b.GetName())}
			s.policies[scaffoldKey(c.label, b.GetName())] = sp
			res, err := scaffoldVAP(t, dir, c.policy, b)
			if err != nil {
				sp.refused = err.Error()
				continue
			}
			var spec struct {
				Spec json.RawMessage `json:"spec"`
			}
			if err := json.Unmarshal(res, &spec); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(spec.Spec, &sp.spec); err != nil {
				t.Fatal(err)
			}
			entry, err := scaffoldEntry(res)
			if err != nil {
				t.Fatalf("%s: %v", sp.id, err)
			}
			entries[sp.id] = entry
		}
	}
	doc, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	s.port = startPolicyServerArgs(t, string(doc), writeKubeconfig(t, cfg), "--continue-on-errors")
	return s
}

// scaffoldVAP writes policy and binding into dir and returns, as JSON, the
// ClusterAdmissionPolicy wardenctl scaffold vap makes of them with
// builtin://cel, or its refusal.
func scaffoldVAP(t *testing.T, dir string, policy, binding *unstructured.Unstructured) ([]byte, error) {
	t.Helper()
	write := func(name string, o *unstructured.Unstructured) string {
		b, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	p, b := write("policy.json", policy), write("binding.json", binding)
	var stdout, stderr bytes.Buffer
	code := wardenctl.Main(context.Background(), []string{"scaffold", "vap", "-p", p, "-b", b, "--cel-policy", "builtin://cel"},
		strings.NewReader(""), &stdout, &stderr, func(string) string { return "" })
	if code != 0 {
		return nil, fmt.Errorf("%s", strings.TrimSpace(stderr.String()))
	}
	return yaml.YAMLToJSON(stdout.Bytes())
}

// scaffoldEntry is the policies.yml entry of a ClusterAdmissionPolicy, as
// the controller would make it.
func scaffoldEntry(doc []byte) (policyconfig.Entry, error) {
	var p policiesv1.ClusterAdmissionPolicy
	if err := json.Unmarshal(doc, &p); err != nil {
		return policyconfig.Entry{}, err
	}
	return policyconfig.NewEntry(&p, nil), nil
}

// startPolicyServerArgs runs the policy server as startPolicyServer does,
// with extra flags, until the test ends, and returns its port once it is
// ready.
func startPolicyServerArgs(t *testing.T, doc, kubeconfig string, extra ...string) int {
	t.Helper()
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies.yml")
	if err := os.WriteFile(policies, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	port, readiness := testkit.FreePort(t), testkit.FreePort(t)
	env := map[string]string{"KUBECONFIG": kubeconfig, "HOME": dir}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	var logs bytes.Buffer
	args := append([]string{"--addr", "127.0.0.1", "--port", fmt.Sprint(port), "--readiness-probe-port", fmt.Sprint(readiness),
		"--policies", policies, "--policies-download-dir", dir, "--cache-dir", ""}, extra...)
	go func() {
		done <- policyserver.Main(ctx, args, io.Discard, &logs, func(k string) string { return env[k] })
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("policy server exit %d\n%s", code, logs.String())
		}
	})
	eventually(t, "the policy server is ready", func() bool { return ready(readiness) })
	return port
}
