package auditscanner

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// appInstanceLabel labels the Service of a PolicyServer with
// "policy-server-<name>" (docs/compatibility.md#audit-scanner).
const appInstanceLabel = "app.kubernetes.io/instance"

// catalog is every policy of the cluster, listed once at the start of a run.
type catalog struct {
	// cluster are the ClusterAdmissionPolicies and ClusterAdmissionPolicyGroups.
	cluster []policiesv1.Policy
	// namespaced are the AdmissionPolicies and AdmissionPolicyGroups, by
	// namespace.
	namespaced map[string][]policiesv1.Policy
}

// loadCatalog lists the four policy kinds.
func loadCatalog(ctx context.Context, c client.Reader) (*catalog, error) {
	cat := &catalog{namespaced: map[string][]policiesv1.Policy{}}
	var caps policiesv1.ClusterAdmissionPolicyList
	if err := c.List(ctx, &caps); err != nil {
		return nil, fmt.Errorf("listing ClusterAdmissionPolicies: %w", err)
	}
	for i := range caps.Items {
		cat.cluster = append(cat.cluster, &caps.Items[i])
	}
	var capgs policiesv1.ClusterAdmissionPolicyGroupList
	if err := c.List(ctx, &capgs); err != nil {
		return nil, fmt.Errorf("listing ClusterAdmissionPolicyGroups: %w", err)
	}
	for i := range capgs.Items {
		cat.cluster = append(cat.cluster, &capgs.Items[i])
	}
	var aps policiesv1.AdmissionPolicyList
	if err := c.List(ctx, &aps); err != nil {
		return nil, fmt.Errorf("listing AdmissionPolicies: %w", err)
	}
	for i := range aps.Items {
		p := &aps.Items[i]
		cat.namespaced[p.Namespace] = append(cat.namespaced[p.Namespace], p)
	}
	var apgs policiesv1.AdmissionPolicyGroupList
	if err := c.List(ctx, &apgs); err != nil {
		return nil, fmt.Errorf("listing AdmissionPolicyGroups: %w", err)
	}
	for i := range apgs.Items {
		p := &apgs.Items[i]
		cat.namespaced[p.Namespace] = append(cat.namespaced[p.Namespace], p)
	}
	return cat, nil
}

// noteFunc is told why a policy is skipped or errored: msg is constant,
// err may be nil.
type noteFunc func(ctx context.Context, level slog.Level, msg, policy string, err error)

// policyResolver answers what selecting policies needs from the cluster.
// Its methods are called from concurrent scopes.
type policyResolver interface {
	// isNamespaced reports whether gvr is a namespaced resource, and fails
	// when the API server does not serve gvr.
	isNamespaced(gvr schema.GroupVersionResource) (bool, error)
	// auditURL returns the URL of /audit/<unique name> of p on the policy
	// server that runs it.
	auditURL(ctx context.Context, p policiesv1.Policy) (string, error)
}

// auditPolicy is what evaluates objects for one result of a report: a
// Warden policy, through its policy server's /audit, or one validation of
// a ValidatingAdmissionPolicy binding or one MutatingAdmissionPolicy
// binding, in process.
type auditPolicy struct {
	// name is the results' policy: a Warden policy's unique name, its id
	// on the policy server, vap/<policy>/<binding> or map/<policy>/<binding>.
	name string
	// rank orders the results of the same name: a validation's index.
	rank int
	// url is where a Warden policy's /audit requests go.
	url string
	// local evaluates a ValidatingAdmissionPolicy's validation or a
	// MutatingAdmissionPolicy binding; nil for a Warden policy.
	local localEvaluator
	// selector is its objectSelector; nil selects every object.
	selector labels.Selector
	// meta is what its results say about it.
	meta resultMeta
	// inputs identify the version of what evaluates (uids and
	// resourceVersions), for the inputs digest (reuse.go).
	inputs []string
	// contextAware: its verdicts depend on other objects than the one
	// evaluated, so they are never reused.
	contextAware bool
}

// resultMeta is what the results of a policy say about it besides the
// verdict (docs/compatibility.md#audit-scanner).
type resultMeta struct {
	category, severity string
	properties         map[string]string
}

// reportSeverity is the severity a policy's results carry: its severity
// annotation when the reports' schemas allow it, and none otherwise. The
// API server refuses a report with any other value, which Kubewarden
// copies as it is: every report holding the policy's results would be lost.
func reportSeverity(annotation string) string {
	switch annotation {
	case "critical", "high", "medium", "low", severityInfo:
		return annotation
	}
	return ""
}

// localEvaluator evaluates an object in process. It is safe for
// concurrent use.
type localEvaluator interface {
	// evaluate returns the verdict about req's object, and false when
	// there is nothing to report (the policy does not apply to it).
	evaluate(ctx context.Context, req *admissionv1.AdmissionRequest) (verdict, bool)
}

// newWardenAuditPolicy returns the auditPolicy of Warden policy p, whose
// /audit is at url.
func newWardenAuditPolicy(p policiesv1.Policy, url string, selector labels.Selector) *auditPolicy {
	m := resultMeta{properties: properties(p)}
	m.category, _ = p.GetCategory()
	if p.GetPolicyMode() == policiesv1.PolicyModeMonitor {
		m.severity = severityInfo
	} else {
		s, _ := p.GetSeverity()
		m.severity = reportSeverity(s)
	}
	return &auditPolicy{
		name: p.GetUniqueName(), url: url, selector: selector, meta: m,
		inputs:       []string{string(p.GetUID()), p.GetResourceVersion()},
		contextAware: p.IsContextAware(),
	}
}

// matches reports whether p's objectSelector selects an object with these
// labels.
func (p *auditPolicy) matches(objLabels map[string]string) bool {
	return p.selector == nil || p.selector.Matches(labels.Set(objLabels))
}

// policySelection is what a scope audits: the policies by the resource they
// target, and the counts of skipped and errored policies
// (docs/compatibility.md#audit-scanner).
type policySelection struct {
	byGVR map[schema.GroupVersionResource][]*auditPolicy
	// gvrs are the keys of byGVR, sorted, the order resources are listed in.
	gvrs []schema.GroupVersionResource
	// audited, skipped and errored count distinct policies (by unique
	// name): skipped and errored are the summary's initial skip and error.
	audited, skipped, errored int
}

// policiesForNamespace returns the policies that apply in ns: the cluster
// policies whose namespaceSelector selects its labels, and the namespaced
// policies of ns. A cluster policy whose namespaceSelector does not parse
// comes with an error, to be counted as errored.
func (c *catalog) policiesForNamespace(ns *corev1.Namespace) (pols []policiesv1.Policy, invalid []string) {
	for _, p := range c.cluster {
		sel := p.GetNamespaceSelector()
		if sel == nil {
			pols = append(pols, p)
			continue
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			invalid = append(invalid, p.GetUniqueName())
			continue
		}
		if s.Matches(labels.Set(ns.Labels)) {
			pols = append(pols, p)
		}
	}
	return append(pols, c.namespaced[ns.Name]...), invalid
}

// selectPolicies applies Kubewarden's rules
// (docs/compatibility.md#audit-scanner) to pols, for a scope of namespaced
// resources or of cluster-wide ones, in Kubewarden's order: a policy is skipped
// when none of its rules is free of wildcards, when none has CREATE, when
// backgroundAudit is false or when it is not active; it is errored when a
// resource it targets is unknown, when its objectSelector does not parse, or
// when its policy server cannot be found; it is left out (neither) when it
// targets no resource of the scope. invalid are policies already known to be
// errored. note is told why each policy left out was left out.
func selectPolicies(ctx context.Context, note noteFunc, pols []policiesv1.Policy, invalid []string, namespaced bool, r policyResolver) *policySelection {
	return selectScope(ctx, note, pols, invalid, namespaced, r, nil, nil)
}

// selectScope is selectPolicies with the ValidatingAdmissionPolicy and
// MutatingAdmissionPolicy bindings of kube (nil: none), for namespace ns (nil: the cluster-wide
// scope; namespaced is then false).
func selectScope(ctx context.Context, note noteFunc, pols []policiesv1.Policy, invalid []string, namespaced bool, r policyResolver,
	kube *kubeCatalog, ns *corev1.Namespace) *policySelection {
	sel := &policySelection{byGVR: map[schema.GroupVersionResource][]*auditPolicy{}}
	audited, skipped, errored := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, name := range invalid {
		errored[name] = true
	}
	for _, p := range pols {
		name := p.GetUniqueName()
		rules := auditableRules(p.GetRules())
		if len(rules) == 0 {
			skipped[name] = true
			note(ctx, slog.LevelDebug, "policy skipped: no rule without wildcards and with CREATE", name, nil)
			continue
		}
		gvrs, err := scopeGVRs(rules, namespaced, r)
		if err != nil {
			errored[name] = true
			note(ctx, slog.LevelError, "policy errored: it targets a resource the API server does not serve", name, err)
			continue
		}
		if len(gvrs) == 0 {
			continue
		}
		if !p.GetBackgroundAudit() {
			skipped[name] = true
			note(ctx, slog.LevelDebug, "policy skipped: backgroundAudit is false", name, nil)
			continue
		}
		if p.GetStatus().PolicyStatus != policiesv1.PolicyStatusActive {
			skipped[name] = true
			note(ctx, slog.LevelDebug, "policy skipped: not active", name, nil)
			continue
		}
		var objSel labels.Selector
		if s := p.GetObjectSelector(); s != nil {
			objSel, err = metav1.LabelSelectorAsSelector(s)
			if err != nil {
				errored[name] = true
				note(ctx, slog.LevelError, "policy errored: invalid objectSelector", name, err)
				continue
			}
		}
		url, err := r.auditURL(ctx, p)
		if err != nil {
			errored[name] = true
			note(ctx, slog.LevelError, "policy errored: no policy server to audit it", name, err)
			continue
		}
		ap := newWardenAuditPolicy(p, url, objSel)
		audited[name] = true
		for _, gvr := range gvrs {
			sel.byGVR[gvr] = append(sel.byGVR[gvr], ap)
		}
	}
	kube.selectKubePolicies(ctx, note, sel, ns, r, audited, skipped, errored)
	for gvr := range sel.byGVR {
		sel.gvrs = append(sel.gvrs, gvr)
	}
	slices.SortFunc(sel.gvrs, func(a, b schema.GroupVersionResource) int { return strings.Compare(a.String(), b.String()) })
	sel.audited, sel.skipped, sel.errored = len(audited), len(skipped), len(errored)
	return sel
}

// auditableRules returns the rules an audit can use: without "*" in their
// apiGroups, apiVersions or resources, and with the CREATE operation (an
// audit sends every object as a CREATE).
func auditableRules(rules []admissionregistrationv1.RuleWithOperations) []admissionregistrationv1.RuleWithOperations {
	var out []admissionregistrationv1.RuleWithOperations
	for _, r := range rules {
		if slices.Contains(r.APIGroups, "*") || slices.Contains(r.APIVersions, "*") || slices.Contains(r.Resources, "*") {
			continue
		}
		if !slices.Contains(r.Operations, admissionregistrationv1.Create) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// scopeGVRs returns the resources rules target that are namespaced (or
// cluster-wide, when namespaced is false), each once.
func scopeGVRs(rules []admissionregistrationv1.RuleWithOperations, namespaced bool, r policyResolver) ([]schema.GroupVersionResource, error) {
	var out []schema.GroupVersionResource
	for _, rule := range rules {
		for _, group := range rule.APIGroups {
			for _, version := range rule.APIVersions {
				for _, resource := range rule.Resources {
					gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
					ns, err := r.isNamespaced(gvr)
					if err != nil {
						return nil, err
					}
					if ns == namespaced && !slices.Contains(out, gvr) {
						out = append(out, gvr)
					}
				}
			}
		}
	}
	return out, nil
}

// clusterResolver resolves policies against the API server. It caches the
// URL of each policy server for the run; it is safe for concurrent use.
type clusterResolver struct {
	reader              client.Reader
	mapper              meta.RESTMapper
	kubewardenNamespace string
	// baseURL is --policy-server-url without its trailing slashes; when
	// set, no PolicyServer nor Service is looked up.
	baseURL string

	mu     sync.Mutex
	bases  map[string]baseOrError // by PolicyServer name
	scopes map[schema.GroupVersionResource]scopeOrError
}

type scopeOrError struct {
	namespaced bool
	err        error
}

type baseOrError struct {
	base string
	err  error
}

func newClusterResolver(reader client.Reader, mapper meta.RESTMapper, kubewardenNamespace, policyServerURL string) *clusterResolver {
	return &clusterResolver{
		reader: reader, mapper: mapper, kubewardenNamespace: kubewardenNamespace,
		baseURL: strings.TrimRight(policyServerURL, "/"),
		bases:   map[string]baseOrError{},
		scopes:  map[schema.GroupVersionResource]scopeOrError{},
	}
}

// isNamespaced asks the RESTMapper once per run for each resource: a
// resource it does not know would make it read the discovery again.
func (r *clusterResolver) isNamespaced(gvr schema.GroupVersionResource) (bool, error) {
	r.mu.Lock()
	s, ok := r.scopes[gvr]
	r.mu.Unlock()
	if !ok {
		s.namespaced, s.err = r.lookupScope(gvr)
		r.mu.Lock()
		r.scopes[gvr] = s
		r.mu.Unlock()
	}
	return s.namespaced, s.err
}

func (r *clusterResolver) lookupScope(gvr schema.GroupVersionResource) (bool, error) {
	gvk, err := r.mapper.KindFor(gvr)
	if err != nil {
		return false, fmt.Errorf("resource %s: %w", gvr, err)
	}
	mapping, err := r.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return false, fmt.Errorf("resource %s: %w", gvr, err)
	}
	return mapping.Scope.Name() == meta.RESTScopeNameNamespace, nil
}

func (r *clusterResolver) auditURL(ctx context.Context, p policiesv1.Policy) (string, error) {
	if r.baseURL != "" {
		return r.baseURL + "/audit/" + p.GetUniqueName(), nil
	}
	ps := p.GetPolicyServer()
	r.mu.Lock()
	b, ok := r.bases[ps]
	r.mu.Unlock()
	if !ok {
		b.base, b.err = r.lookupBase(ctx, ps)
		r.mu.Lock()
		r.bases[ps] = b
		r.mu.Unlock()
	}
	if b.err != nil {
		return "", b.err
	}
	return b.base + "/audit/" + p.GetUniqueName(), nil
}

// lookupBase finds the Service of PolicyServer name, as Kubewarden does
// (docs/compatibility.md#audit-scanner): the only Service of the Kubewarden
// namespace labelled app.kubernetes.io/instance=policy-server-<name>, on its
// first port.
func (r *clusterResolver) lookupBase(ctx context.Context, name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("the policy names no PolicyServer")
	}
	var ps policiesv1.PolicyServer
	if err := r.reader.Get(ctx, client.ObjectKey{Name: name}, &ps); err != nil {
		return "", fmt.Errorf("getting PolicyServer %q: %w", name, err)
	}
	var svcs corev1.ServiceList
	if err := r.reader.List(ctx, &svcs, client.InNamespace(r.kubewardenNamespace),
		client.MatchingLabels{appInstanceLabel: ps.NameWithPrefix()}); err != nil {
		return "", fmt.Errorf("listing the Services of PolicyServer %q: %w", name, err)
	}
	if len(svcs.Items) != 1 {
		return "", fmt.Errorf("PolicyServer %q: %d Services in namespace %q are labelled %s=%s, not one",
			name, len(svcs.Items), r.kubewardenNamespace, appInstanceLabel, ps.NameWithPrefix())
	}
	svc := svcs.Items[0]
	if len(svc.Spec.Ports) == 0 {
		return "", fmt.Errorf("PolicyServer %q: Service %s/%s has no port", name, svc.Namespace, svc.Name)
	}
	return fmt.Sprintf("https://%s.%s.svc:%d", svc.Name, r.kubewardenNamespace, svc.Spec.Ports[0].Port), nil
}
