package kubepolicy

import (
	"context"
	"encoding/json"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
)

// loadMAP serves a MutatingAdmissionPolicy with the API server's generic
// policy plugin, policy source, mutating dispatcher and patchers. Two
// pieces are Warden's, because mutating.NewPlugin fixes them to what only
// a running API server has: the type converter of ApplyConfiguration
// (typeConverters), and so the plugin's assembly, whose compilation step
// (compileMAP) is unexported in k8s.io/apiserver.
func loadMAP(m *manifests, opts Options) (*Policy, error) {
	if err := validateMAP(m.mapPolicy); err != nil {
		return nil, err
	}
	objects := []runtime.Object{m.mapPolicy}
	for _, b := range m.mapBindings {
		if err := validateMAPBinding(b); err != nil {
			return nil, err
		}
		objects = append(objects, b)
	}
	s, err := newStore(m, objects, opts.Namespace)
	if err != nil {
		return nil, err
	}
	// The operations mutating.NewPlugin handles: there is nothing to
	// mutate in a DELETE.
	handler := admission.NewHandler(admission.Create, admission.Update, admission.Connect)
	sources := func(f informers.SharedInformerFactory) (policies, bindings cache.SharedIndexInformer) {
		return f.Admissionregistration().V1().MutatingAdmissionPolicies().Informer(),
			f.Admissionregistration().V1().MutatingAdmissionPolicyBindings().Informer()
	}
	plugin := generic.NewPlugin(handler,
		func(f informers.SharedInformerFactory, _ kubernetes.Interface, dc dynamic.Interface, mapper meta.RESTMapper) generic.Source[mutating.PolicyHook] {
			policies, bindings := sources(f)
			return generic.NewPolicySource(policies, bindings,
				mutating.NewMutatingAdmissionPolicyAccessor,
				mutating.NewMutatingAdmissionPolicyBindingAccessor,
				compileMAP, f, dc, mapper)
		},
		func(a authorizer.Authorizer, m *matching.Matcher, _ kubernetes.Interface) generic.Dispatcher[mutating.PolicyHook] {
			return mutating.NewDispatcher(a, m, typeConverters{static: applyconfigurations.NewTypeConverter(scheme.Scheme)})
		})
	plugin.SetEnabled(true)
	p := newPolicy(KindMAP, m.mapPolicy.Name)
	p.mutate, p.handles = mutator{plugin}, plugin.Handles
	if err := p.start(plugin, handler, sources, s, opts); err != nil {
		return nil, err
	}
	return p, nil
}

// mutator is the plugin as the API server's admission chain calls it: Admit
// once, and again when the first call asks to be reinvoked (the chain's
// reinvocation, with this policy as the only mutating plugin).
type mutator struct {
	plugin *generic.Plugin[mutating.PolicyHook]
}

func (m mutator) Admit(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	if err := m.plugin.Dispatch(ctx, a, o); err != nil {
		return err
	}
	if rc := a.GetReinvocationContext(); rc.ShouldReinvoke() {
		rc.SetIsReinvoke()
		return m.plugin.Dispatch(ctx, a, o)
	}
	return nil
}

func (m mutator) Handles(op admission.Operation) bool { return m.plugin.Handles(op) }

// compileMAP compiles a MutatingAdmissionPolicy into the evaluator the
// mutating dispatcher runs, from k8s.io/apiserver's exported compilers and
// patchers, as the plugin's own compilation does: variables first (stored
// expressions, as every policy the API server has accepted is compiled),
// then matchConditions, then one patcher per mutation, in order.
func compileMAP(policy *admissionregistrationv1.MutatingAdmissionPolicy) mutating.PolicyEvaluator {
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return mutating.PolicyEvaluator{Error: &apiservercel.Error{Type: apiservercel.ErrorTypeInternal,
			Detail: fmt.Sprintf("failed to initialize CEL compiler: %v", err)}}
	}
	vars := plugincel.OptionalVariableDeclarations{HasParams: policy.Spec.ParamKind != nil, HasAuthorizer: true}
	named := make([]plugincel.NamedExpressionAccessor, 0, len(policy.Spec.Variables))
	for _, v := range policy.Spec.Variables {
		named = append(named, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	compiler.CompileAndStoreVariables(named, vars, environment.StoredExpressions)
	var matcher matchconditions.Matcher
	if mcs := policy.Spec.MatchConditions; len(mcs) > 0 {
		exprs := make([]plugincel.ExpressionAccessor, len(mcs))
		for i := range mcs {
			exprs[i] = (*matchconditions.MatchCondition)(&mcs[i])
		}
		matcher = matchconditions.NewMatcher(compiler.CompileCondition(exprs, vars, environment.StoredExpressions),
			policy.Spec.FailurePolicy, "policy", "validate", policy.Name)
	}
	patchVars := vars
	patchVars.HasPatchTypes = true
	var patchers []patch.Patcher
	for _, m := range policy.Spec.Mutations {
		switch {
		case m.PatchType == admissionregistrationv1.PatchTypeJSONPatch && m.JSONPatch != nil:
			patchers = append(patchers, patch.NewJSONPatcher(compiler.CompileMutatingEvaluator(
				&patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}, patchVars, environment.StoredExpressions)))
		case m.PatchType == admissionregistrationv1.PatchTypeApplyConfiguration && m.ApplyConfiguration != nil:
			patchers = append(patchers, patch.NewApplyConfigurationPatcher(compiler.CompileMutatingEvaluator(
				&patch.ApplyConfigurationCondition{Expression: m.ApplyConfiguration.Expression}, patchVars, environment.StoredExpressions)))
		}
	}
	return mutating.PolicyEvaluator{Matcher: matcher, Mutators: patchers, CompositedCompiler: compiler}
}

// typeConverters gives ApplyConfiguration the schema of the object it
// merges into. kube-apiserver reads it from its own OpenAPI; Warden has
// client-go's schema of the built-in kinds, and for any other kind (custom
// resources) deduces one from the object: maps merge key by key, lists are
// replaced whole, which is what a custom resource's schema says unless it
// sets x-kubernetes-list-type.
type typeConverters struct {
	static managedfields.TypeConverter
}

func (t typeConverters) GetTypeConverter(gvk schema.GroupVersionKind) managedfields.TypeConverter {
	stub := &unstructured.Unstructured{}
	stub.SetGroupVersionKind(gvk)
	if _, err := t.static.ObjectToTyped(stub); err == nil {
		return t.static
	}
	return managedfields.NewDeducedTypeConverter()
}

func (typeConverters) Run(context.Context) {}

// jsonPatch is the JSONPatch that turns from into to, and to as JSON; nil
// when they are the same.
func jsonPatch(from, to runtime.Object) (patch, mutated []byte, err error) {
	a, err := json.Marshal(from)
	if err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(to)
	if err != nil {
		return nil, nil, err
	}
	ops, err := jsonpatch.CreatePatch(a, b)
	if err != nil {
		return nil, nil, fmt.Errorf("computing the patch: %w", err)
	}
	if len(ops) == 0 {
		return nil, nil, nil
	}
	patch, err = json.Marshal(ops)
	return patch, b, err
}
