package auditscanner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/kubepolicy"
)

// This file audits Kubernetes' own ValidatingAdmissionPolicies and
// MutatingAdmissionPolicies: each binding is evaluated in process, by the
// API server's admission plugins (internal/kubepolicy), with one result
// per validation of a VAP and one per MAP binding, telling whether the MAP
// would change the object
// (docs/audit-scanner.md#kubernetes-validatingadmissionpolicies).

// Properties of the results of a ValidatingAdmissionPolicy or
// MutatingAdmissionPolicy, besides validating (mutating), policy-name,
// policy-uid and policy-resource-version, which are the policy's.
const (
	propertyPolicyKind        = "policy-kind"
	propertyBindingName       = "binding-name"
	propertyBindingUID        = "binding-uid"
	propertyBindingRV         = "binding-resource-version"
	propertyValidationActions = "validation-actions"
	propertyValidationIndex   = "validation-index"
	propertyValidationExpr    = "validation-expression"

	// vapResultPrefix starts the policy of a VAP's results,
	// vap/<policy>/<binding>, and mapResultPrefix a MAP's,
	// map/<policy>/<binding>: a Warden policy's unique name starts with
	// clusterwide-, namespaced- or group-, never with either.
	vapResultPrefix = "vap/"
	mapResultPrefix = "map/"
)

// probeMessage is the message of a binding's probe, the validation that
// always fails: a probe that allows an object tells that the binding does
// not apply to it.
const probeMessage = "warden audit probe"

// kubeLoadParallelism bounds the bindings loaded into the plugin at once:
// a load mostly waits for the plugin's informers to sync.
const kubeLoadParallelism = 8

// kubeCatalog is the cluster's ValidatingAdmissionPolicy and
// MutatingAdmissionPolicy bindings, loaded once per run. Its methods are
// safe for concurrent use; close releases the plugins.
type kubeCatalog struct {
	bindings []*kubeBinding
}

// kubeBinding is one ValidatingAdmissionPolicyBinding with its policy and
// params, loaded into the API server's plugin once per validation, or one
// MutatingAdmissionPolicyBinding with its policy and params, loaded once.
type kubeBinding struct {
	// kind is kubepolicy.KindVAP or kubepolicy.KindMAP.
	kind string
	// name is the policy of its results: vap/<policy>/<binding> or
	// map/<policy>/<binding>.
	name string
	// vap and binding are the ValidatingAdmissionPolicy and its binding;
	// for a MAP, its probe VAP and binding (probeVAP), which match what
	// the MAP binding matches: rules, selectors and params are read from
	// them for both kinds.
	vap     *admissionregistrationv1.ValidatingAdmissionPolicy
	binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	// mapPolicy and mapBinding are the MAP and its binding; nil for a VAP.
	mapPolicy  *admissionregistrationv1.MutatingAdmissionPolicy
	mapBinding *admissionregistrationv1.MutatingAdmissionPolicyBinding
	// rules are the rules an audit can list resources of: the (probe)
	// VAP's resourceRules, as Warden policies' rules.
	rules []admissionregistrationv1.RuleWithOperations
	// bindingRules are the binding's resourceRules, nil when it has
	// none: the resources listed must match one of them too.
	bindingRules []admissionregistrationv1.NamedRuleWithOperations
	// paramVersions are the namespace, name, uid and resourceVersion of
	// each param read, for the inputs digest.
	paramVersions []string
	// err is why the binding cannot be evaluated (a param kind not
	// served, params not read, a policy the plugin refused): every scope
	// counts it as errored.
	err error
	// probe fails every object the binding applies to (see probeMessage).
	probe *kubepolicy.Policy
	// validations are the VAP's validations, each alone in a plugin.
	validations []*kubepolicy.Policy
	// mutation is the MAP with this binding alone; nil for a VAP.
	mutation *kubepolicy.Policy
	meta     resultMeta
}

// kubeSource is what loading the ValidatingAdmissionPolicies and
// MutatingAdmissionPolicies reads from the cluster.
type kubeSource struct {
	reader client.Reader
	dyn    dynamic.Interface
	mapper meta.RESTMapper
	// namespace looks a namespace up for the plugins' namespaceSelector
	// and namespaceObject.
	namespace kubepolicy.NamespaceFunc
}

// loadKubeCatalog lists the ValidatingAdmissionPolicies,
// MutatingAdmissionPolicies and their bindings, reads the params of each
// binding, and loads each binding's validations or mutations. A kind the
// API server does not serve is left out, with a debug log. A binding
// whose params or plugin fail is kept, with its error, to be counted as
// errored.
func loadKubeCatalog(ctx context.Context, src kubeSource, logger *slog.Logger) (*kubeCatalog, error) {
	vapBindings, err := listVAPBindings(ctx, src.reader, logger)
	if err != nil {
		return nil, err
	}
	mapBindings, err := listMAPBindings(ctx, src.reader, logger)
	if err != nil {
		return nil, err
	}
	cat := &kubeCatalog{bindings: append(vapBindings, mapBindings...)}
	var wg sync.WaitGroup
	sem := make(chan struct{}, kubeLoadParallelism)
	for _, kb := range cat.bindings {
		params, err := src.params(ctx, kb.vap, kb.binding)
		if err != nil {
			kb.err = err
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			kb.err = kb.load(params, src.namespace)
		})
	}
	wg.Wait()
	slices.SortFunc(cat.bindings, func(a, b *kubeBinding) int { return strings.Compare(a.name, b.name) })
	return cat, nil
}

// listVAPBindings returns the ValidatingAdmissionPolicyBindings whose
// VAP exists and has validations, not loaded yet: the API server
// enforces nothing for the others either.
func listVAPBindings(ctx context.Context, reader client.Reader, logger *slog.Logger) ([]*kubeBinding, error) {
	var vaps admissionregistrationv1.ValidatingAdmissionPolicyList
	var bindings admissionregistrationv1.ValidatingAdmissionPolicyBindingList
	if ok, err := listPolicyKind(ctx, reader, logger, kubepolicy.KindVAP, &vaps, &bindings); !ok {
		return nil, err
	}
	byName := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	for i := range vaps.Items {
		byName[vaps.Items[i].Name] = &vaps.Items[i]
	}
	var out []*kubeBinding
	for i := range bindings.Items {
		b := &bindings.Items[i]
		if vap := byName[b.Spec.PolicyName]; vap != nil && len(vap.Spec.Validations) > 0 {
			out = append(out, newKubeBinding(vap, b))
		}
	}
	return out, nil
}

// listMAPBindings returns the MutatingAdmissionPolicyBindings whose MAP
// exists and has mutations, not loaded yet.
func listMAPBindings(ctx context.Context, reader client.Reader, logger *slog.Logger) ([]*kubeBinding, error) {
	var maps admissionregistrationv1.MutatingAdmissionPolicyList
	var bindings admissionregistrationv1.MutatingAdmissionPolicyBindingList
	if ok, err := listPolicyKind(ctx, reader, logger, kubepolicy.KindMAP, &maps, &bindings); !ok {
		return nil, err
	}
	byName := map[string]*admissionregistrationv1.MutatingAdmissionPolicy{}
	for i := range maps.Items {
		byName[maps.Items[i].Name] = &maps.Items[i]
	}
	var out []*kubeBinding
	for i := range bindings.Items {
		b := &bindings.Items[i]
		if m := byName[b.Spec.PolicyName]; m != nil && len(m.Spec.Mutations) > 0 {
			out = append(out, newMAPBinding(m, b))
		}
	}
	return out, nil
}

// listPolicyKind lists the policies of kind and their bindings. It
// returns false, with no error, when the API server does not serve them
// (VAPs before Kubernetes 1.30, MAPs before 1.36), with a debug log, or
// when the scanner may not list them (a ClusterRole of an older chart),
// with a warning: the run still audits the rest.
func listPolicyKind(ctx context.Context, reader client.Reader, logger *slog.Logger, kind string, policies, bindings client.ObjectList) (bool, error) {
	for _, list := range []client.ObjectList{policies, bindings} {
		err := reader.List(ctx, list)
		switch {
		case err == nil:
		case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
			logger.DebugContext(ctx, "Kubernetes policies not audited: the API server does not serve them", keyPolicyKind, kind, keyError, err)
			return false, nil
		case apierrors.IsForbidden(err):
			logger.WarnContext(ctx, "Kubernetes policies not audited: the scanner may not list them", keyPolicyKind, kind, keyError, err)
			return false, nil
		default:
			return false, fmt.Errorf("listing the %ss and their bindings: %w", kind, err)
		}
	}
	return true, nil
}

// close releases every plugin of the catalog.
func (c *kubeCatalog) close() {
	if c == nil {
		return
	}
	for _, kb := range c.bindings {
		kb.close()
	}
}

// newKubeBinding returns binding b of vap, not loaded yet.
func newKubeBinding(vap *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) *kubeBinding {
	kb := &kubeBinding{kind: kubepolicy.KindVAP, name: vapResultPrefix + vap.Name + "/" + b.Name, vap: vap, binding: b}
	kb.setMeta(propertyValidating)
	actions := make([]string, 0, len(b.Spec.ValidationActions))
	for _, a := range b.Spec.ValidationActions {
		actions = append(actions, string(a))
	}
	kb.meta.properties[propertyValidationActions] = strings.Join(actions, ",")
	return kb
}

// newMAPBinding returns binding b of MutatingAdmissionPolicy m, not
// loaded yet.
func newMAPBinding(m *admissionregistrationv1.MutatingAdmissionPolicy, b *admissionregistrationv1.MutatingAdmissionPolicyBinding) *kubeBinding {
	vap, vb := probeVAP(m, b)
	kb := &kubeBinding{kind: kubepolicy.KindMAP, name: mapResultPrefix + m.Name + "/" + b.Name, vap: vap, binding: vb, mapPolicy: m, mapBinding: b}
	kb.setMeta(propertyMutating)
	return kb
}

// probeVAP returns the ValidatingAdmissionPolicy and binding that match
// exactly the objects binding b of m applies to: m's metadata,
// matchConstraints, matchConditions, variables (which matchConditions may
// read), failurePolicy (for a matchCondition's error) and paramKind, and
// b's paramRef and matchResources, without validations. A MAP's plugin
// allows alike an object it does not apply to and one it leaves
// unchanged; the probe tells them apart.
func probeVAP(m *admissionregistrationv1.MutatingAdmissionPolicy,
	b *admissionregistrationv1.MutatingAdmissionPolicyBinding) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: *m.ObjectMeta.DeepCopy(),
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			ParamKind:        m.Spec.ParamKind.DeepCopy(),
			MatchConstraints: m.Spec.MatchConstraints.DeepCopy(),
			MatchConditions:  slices.Clone(m.Spec.MatchConditions),
			Variables:        slices.Clone(m.Spec.Variables),
			FailurePolicy:    m.Spec.FailurePolicy,
		},
	}
	vb := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: *b.ObjectMeta.DeepCopy(),
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:     m.Name,
			ParamRef:       b.Spec.ParamRef.DeepCopy(),
			MatchResources: b.Spec.MatchResources.DeepCopy(),
		},
	}
	return vap, vb
}

// setMeta sets the rules and result metadata read from kb.vap and
// kb.binding, with the property validating or mutating.
func (kb *kubeBinding) setMeta(validatingOrMutating string) {
	vap, b := kb.vap, kb.binding
	if mc := vap.Spec.MatchConstraints; mc != nil {
		kb.rules = ruleOperations(mc.ResourceRules)
	}
	if mr := b.Spec.MatchResources; mr != nil && len(mr.ResourceRules) > 0 {
		kb.bindingRules = mr.ResourceRules
	}
	kb.meta = resultMeta{properties: map[string]string{
		validatingOrMutating: propertyTrue,
		propertyPolicyKind:   kb.kind,
		propertyPolicyName:   vap.Name,
		propertyPolicyUID:    string(vap.UID),
		propertyPolicyRV:     vap.ResourceVersion,
		propertyBindingName:  b.Name,
		propertyBindingUID:   string(b.UID),
		propertyBindingRV:    b.ResourceVersion,
	}}
	kb.meta.category = vap.Annotations[policiesv1.AnnotationCategory]
	kb.meta.severity = reportSeverity(vap.Annotations[policiesv1.AnnotationSeverity])
}

// ruleOperations turns a VAP's rules into the rules auditableRules reads:
// the operation * stands for CREATE too, since the plugin matches an
// audit's CREATE with it.
func ruleOperations(rules []admissionregistrationv1.NamedRuleWithOperations) []admissionregistrationv1.RuleWithOperations {
	out := make([]admissionregistrationv1.RuleWithOperations, 0, len(rules))
	for _, r := range rules {
		rw := r.RuleWithOperations
		if slices.Contains(rw.Operations, admissionregistrationv1.OperationAll) && !slices.Contains(rw.Operations, admissionregistrationv1.Create) {
			rw.Operations = append(slices.Clone(rw.Operations), admissionregistrationv1.Create)
		}
		out = append(out, rw)
	}
	return out
}

// bindingAllows reports whether the binding's resourceRules, when it has
// any, let an audit's CREATE of gvr through: the binding must match the
// objects listed for it. Its exclusions, resourceNames and scope are the
// plugin's to apply.
func (kb *kubeBinding) bindingAllows(gvr schema.GroupVersionResource) bool {
	if kb.bindingRules == nil {
		return true
	}
	in := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	for _, r := range kb.bindingRules {
		ops := make([]string, 0, len(r.Operations))
		for _, op := range r.Operations {
			ops = append(ops, string(op))
		}
		if in(ops, string(admissionregistrationv1.Create)) && in(r.APIGroups, gvr.Group) &&
			in(r.APIVersions, gvr.Version) && in(r.Resources, gvr.Resource) {
			return true
		}
	}
	return false
}

// params reads the param objects of binding b of vap: by name or by
// selector, in paramRef's namespace or, when it names none, in every
// namespace (the plugin then picks those of the object's namespace).
func (src kubeSource) params(ctx context.Context, vap *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) ([]*unstructured.Unstructured, error) {
	pk, ref := vap.Spec.ParamKind, b.Spec.ParamRef
	if pk == nil || ref == nil {
		return nil, nil
	}
	gv, err := schema.ParseGroupVersion(pk.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("paramKind %s %s: %w", pk.APIVersion, pk.Kind, err)
	}
	mapping, err := src.mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: pk.Kind}, gv.Version)
	if err != nil {
		return nil, fmt.Errorf("paramKind %s %s: %w", pk.APIVersion, pk.Kind, err)
	}
	opts := metav1.ListOptions{}
	switch {
	case ref.Name != "":
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", ref.Name).String()
	case ref.Selector != nil:
		sel, err := metav1.LabelSelectorAsSelector(ref.Selector)
		if err != nil {
			return nil, fmt.Errorf("paramRef selector: %w", err)
		}
		opts.LabelSelector = sel.String()
	}
	res := dynamic.ResourceInterface(src.dyn.Resource(mapping.Resource))
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		res = src.dyn.Resource(mapping.Resource).Namespace(ref.Namespace)
	}
	var out []*unstructured.Unstructured
	for {
		list, err := res.List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing the params of %s: %w", mapping.Resource, err)
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return out, nil
		}
	}
}

// load loads the binding's probe and each of its validations, or its
// MAP, into the plugin, with params.
func (kb *kubeBinding) load(params []*unstructured.Unstructured, ns kubepolicy.NamespaceFunc) error {
	binding := kb.binding.DeepCopy()
	binding.TypeMeta = metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"}
	binding.ManagedFields = nil
	// An audit reports what each validation would deny, whatever the
	// binding does with it: its actions are in the results' properties.
	binding.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	var rawParams []json.RawMessage
	for _, p := range params {
		p = p.DeepCopy()
		p.SetManagedFields(nil)
		raw, err := p.MarshalJSON()
		if err != nil {
			return fmt.Errorf("encoding param %s/%s: %w", p.GetNamespace(), p.GetName(), err)
		}
		rawParams = append(rawParams, raw)
		kb.paramVersions = append(kb.paramVersions, p.GetNamespace(), p.GetName(), string(p.GetUID()), p.GetResourceVersion())
	}
	loadOne := func(v admissionregistrationv1.Validation) (*kubepolicy.Policy, error) {
		vap := kb.vap.DeepCopy()
		vap.TypeMeta = metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: kubepolicy.KindVAP}
		vap.ManagedFields = nil
		vap.Status = admissionregistrationv1.ValidatingAdmissionPolicyStatus{}
		vap.Spec.Validations = []admissionregistrationv1.Validation{v}
		// Audit annotations change no verdict; their errors would make
		// every validation's result theirs.
		vap.Spec.AuditAnnotations = nil
		settings, err := json.Marshal(map[string]any{"policy": vap, "bindings": []any{binding}, "params": rawParams})
		if err != nil {
			return nil, fmt.Errorf("encoding the settings of %s: %w", kb.name, err)
		}
		return kubepolicy.Load(settings, kubepolicy.Options{Namespace: ns})
	}
	var err error
	// A MAP is loaded before its probe, so that a MAP the API server
	// would refuse is errored with the API server's message about it,
	// not about the probe.
	if kb.mapPolicy != nil {
		if kb.mutation, err = kb.loadMutation(rawParams, ns); err != nil {
			return fmt.Errorf("loading %s %q with binding %q: %w", kb.kind, kb.vap.Name, kb.binding.Name, err)
		}
	}
	if kb.probe, err = loadOne(admissionregistrationv1.Validation{Expression: "false", Message: probeMessage}); err != nil {
		kb.close()
		return fmt.Errorf("loading %s %q with binding %q: %w", kb.kind, kb.vap.Name, kb.binding.Name, err)
	}
	for i, v := range kb.vap.Spec.Validations {
		p, err := loadOne(v)
		if err != nil {
			kb.close()
			return fmt.Errorf("loading validation %d of ValidatingAdmissionPolicy %q with binding %q: %w", i, kb.vap.Name, kb.binding.Name, err)
		}
		kb.validations = append(kb.validations, p)
	}
	return nil
}

// loadMutation loads the MAP with its binding alone, with params.
func (kb *kubeBinding) loadMutation(rawParams []json.RawMessage, ns kubepolicy.NamespaceFunc) (*kubepolicy.Policy, error) {
	m := kb.mapPolicy.DeepCopy()
	m.TypeMeta = metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: kubepolicy.KindMAP}
	m.ManagedFields = nil
	b := kb.mapBinding.DeepCopy()
	b.TypeMeta = metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingAdmissionPolicyBinding"}
	b.ManagedFields = nil
	settings, err := json.Marshal(map[string]any{"policy": m, "bindings": []any{b}, "params": rawParams})
	if err != nil {
		return nil, fmt.Errorf("encoding the settings of %s: %w", kb.name, err)
	}
	return kubepolicy.Load(settings, kubepolicy.Options{Namespace: ns})
}

func (kb *kubeBinding) close() {
	if kb.probe != nil {
		kb.probe.Close()
	}
	if kb.mutation != nil {
		kb.mutation.Close()
	}
	for _, p := range kb.validations {
		p.Close()
	}
}

// auditPolicies returns one auditPolicy per validation of the binding,
// or one for a MAP binding, for a scope whose namespace, if any, has
// resourceVersion nsVersion, with objSel, the binding's and policy's
// objectSelectors together.
func (kb *kubeBinding) auditPolicies(objSel labels.Selector, nsVersion string) []*auditPolicy {
	// inputs are what the verdicts are computed from, for the digest:
	// the policy, the binding, the namespace (namespaceObject), the params.
	inputs := func(rank string) []string {
		in := []string{kb.kind, string(kb.vap.UID), kb.vap.ResourceVersion, string(kb.binding.UID), kb.binding.ResourceVersion,
			rank, "namespace", nsVersion, "params", strconv.Itoa(len(kb.paramVersions))}
		return append(in, kb.paramVersions...)
	}
	if kb.mutation != nil {
		return []*auditPolicy{{name: kb.name, selector: objSel, meta: kb.meta, inputs: inputs("mutation"), local: &mapMutation{binding: kb}}}
	}
	out := make([]*auditPolicy, 0, len(kb.validations))
	for i, p := range kb.validations {
		v := kb.vap.Spec.Validations[i]
		m := kb.meta
		m.properties = map[string]string{propertyValidationIndex: strconv.Itoa(i), propertyValidationExpr: v.Expression}
		for k, val := range kb.meta.properties {
			m.properties[k] = val
		}
		out = append(out, &auditPolicy{
			name: kb.name, rank: i, selector: objSel, meta: m, inputs: inputs(strconv.Itoa(i)),
			local: &vapValidation{binding: kb, policy: p},
		})
	}
	return out
}

// applies reports whether the binding applies to req's object, from its
// probe: it does not when the probe allows the object (the binding's
// match rules, selectors, matchConditions, or a missing param with
// parameterNotFoundAction Allow leave it out). A probe that cannot
// evaluate the object gives an error verdict to report.
func (kb *kubeBinding) applies(ctx context.Context, req *admissionv1.AdmissionRequest) (verdict, bool) {
	probe, err := kb.probe.Review(ctx, req)
	if err != nil {
		return verdict{errored: true, message: err.Error()}, true
	}
	return verdict{}, !probe.Allowed
}

// vapValidation evaluates one validation of a binding.
type vapValidation struct {
	binding *kubeBinding
	policy  *kubepolicy.Policy
}

// evaluate answers whether the validation denies req, or, when the
// binding does not apply to the object, that there is nothing to report.
func (v *vapValidation) evaluate(ctx context.Context, req *admissionv1.AdmissionRequest) (verdict, bool) {
	if vd, ok := v.binding.applies(ctx, req); !ok || vd.errored {
		return vd, ok
	}
	resp, err := v.policy.Review(ctx, req)
	if err != nil {
		return verdict{errored: true, message: err.Error()}, true
	}
	vd := verdict{allowed: resp.Allowed}
	if !resp.Allowed && resp.Result != nil {
		vd.message = resp.Result.Message
	}
	return vd, true
}

// mapMutation evaluates a MutatingAdmissionPolicy binding.
type mapMutation struct {
	binding *kubeBinding
}

// evaluate answers whether the MAP would change req's object (a warn
// verdict naming the JSONPatch), or, when the binding does not apply to
// the object, that there is nothing to report. A MAP that rejects the
// request (a mutation failing under failurePolicy Fail) could not mutate
// it: an error verdict.
func (m *mapMutation) evaluate(ctx context.Context, req *admissionv1.AdmissionRequest) (verdict, bool) {
	kb := m.binding
	if vd, ok := kb.applies(ctx, req); !ok || vd.errored {
		return vd, ok
	}
	resp, err := kb.mutation.Review(ctx, req)
	switch {
	case err != nil:
		return verdict{errored: true, message: err.Error()}, true
	case !resp.Allowed:
		vd := verdict{errored: true}
		if resp.Result != nil {
			vd.message = resp.Result.Message
		}
		return vd, true
	case len(resp.Patch) > 0:
		return verdict{allowed: true, warned: true, message: fmt.Sprintf("%s '%s' with binding '%s' would apply the JSONPatch %s",
			kubepolicy.KindMAP, kb.mapPolicy.Name, kb.mapBinding.Name, resp.Patch)}, true
	}
	return verdict{allowed: true}, true
}

// selectKubePolicies adds to sel the validations of the bindings that
// apply to a scope: namespaced, in namespace ns, or cluster-wide when ns
// is nil. It follows selectPolicies: a binding is skipped when its VAP
// has no rule an audit can use, errored when it failed to load, targets
// a resource the API server does not serve or has a selector that does
// not parse, and left out when it targets no resource of the scope or its
// namespaceSelectors do not select ns.
func (c *kubeCatalog) selectKubePolicies(ctx context.Context, note noteFunc, sel *policySelection, ns *corev1.Namespace, r policyResolver,
	audited, skipped, errored map[string]bool) {
	if c == nil {
		return
	}
	for _, kb := range c.bindings {
		name := kb.name
		if kb.err != nil {
			errored[name] = true
			note(ctx, slog.LevelError, "policy errored: the Kubernetes policy could not be loaded", name, kb.err)
			continue
		}
		rules := auditableRules(kb.rules)
		if len(rules) == 0 {
			skipped[name] = true
			note(ctx, slog.LevelDebug, "policy skipped: no rule without wildcards and with CREATE", name, nil)
			continue
		}
		gvrs, err := scopeGVRs(rules, ns != nil, r)
		if err != nil {
			errored[name] = true
			note(ctx, slog.LevelError, "policy errored: it targets a resource the API server does not serve", name, err)
			continue
		}
		gvrs = slices.DeleteFunc(gvrs, func(gvr schema.GroupVersionResource) bool { return !kb.bindingAllows(gvr) })
		if len(gvrs) == 0 {
			continue
		}
		nsSel, objSel, err := kb.selectors()
		if err != nil {
			errored[name] = true
			note(ctx, slog.LevelError, "policy errored: invalid selector", name, err)
			continue
		}
		nsVersion := ""
		if ns != nil {
			if !nsSel.Matches(labels.Set(ns.Labels)) {
				continue
			}
			nsVersion = ns.ResourceVersion
		}
		audited[name] = true
		for _, ap := range kb.auditPolicies(objSel, nsVersion) {
			for _, gvr := range gvrs {
				sel.byGVR[gvr] = append(sel.byGVR[gvr], ap)
			}
		}
	}
}

// selectors returns the namespaceSelectors and objectSelectors of the VAP
// and its binding, each pair as one selector.
func (kb *kubeBinding) selectors() (nsSel, objSel labels.Selector, err error) {
	nsSel, objSel = labels.Everything(), labels.Everything()
	for _, mr := range []*admissionregistrationv1.MatchResources{kb.vap.Spec.MatchConstraints, kb.binding.Spec.MatchResources} {
		if mr == nil {
			continue
		}
		for _, s := range []struct {
			from *metav1.LabelSelector
			into *labels.Selector
		}{{mr.NamespaceSelector, &nsSel}, {mr.ObjectSelector, &objSel}} {
			if s.from == nil {
				continue
			}
			parsed, err := metav1.LabelSelectorAsSelector(s.from)
			if err != nil {
				return nil, nil, err
			}
			reqs, _ := parsed.Requirements()
			*s.into = (*s.into).Add(reqs...)
		}
	}
	return nsSel, objSel, nil
}

// namespaceCache answers the plugins' reads of namespaces for a run: the
// namespaces the run scans, and the others read once from the API server.
// It is safe for concurrent use.
type namespaceCache struct {
	reader client.Reader
	mu     sync.Mutex
	byName map[string]*corev1.Namespace
}

func newNamespaceCache(reader client.Reader) *namespaceCache {
	return &namespaceCache{reader: reader, byName: map[string]*corev1.Namespace{}}
}

// add keeps ns, as the run listed it.
func (c *namespaceCache) add(ns *corev1.Namespace) {
	ns = ns.DeepCopy()
	ns.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byName[ns.Name] = ns
}

// get is a kubepolicy.NamespaceFunc.
func (c *namespaceCache) get(ctx context.Context, name string) (*corev1.Namespace, error) {
	c.mu.Lock()
	ns, ok := c.byName[name]
	c.mu.Unlock()
	if ok {
		return ns, nil
	}
	ns = &corev1.Namespace{}
	if err := c.reader.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return nil, err
	}
	c.add(ns)
	return ns, nil
}
