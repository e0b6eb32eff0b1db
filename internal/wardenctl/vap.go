package wardenctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"

	"github.com/wardenhq/warden/internal/metadata"
)

// defaultCELPolicy is the module scaffold vap writes when --cel-policy is
// not given, kwctl's default.
const defaultCELPolicy = "ghcr.io/kubewarden/policies/cel-policy:latest"

// VAPOptions are the flags of scaffold vap.
type VAPOptions struct {
	// PolicyPath is the file of the ValidatingAdmissionPolicy.
	PolicyPath string
	// BindingPath is the file of its ValidatingAdmissionPolicyBinding.
	BindingPath string
	// CELPolicy is the module of the resource written: Kubewarden's
	// cel-policy, or Warden's builtin://cel.
	CELPolicy string
	// CompileToWasm and Force are kwctl's flags for compiling the
	// expressions into a module of their own, which wardenctl does not do:
	// they are accepted so that the refusal says why.
	CompileToWasm string
	Force         bool
}

// AddFlags registers the flags, with kwctl's names.
func (o *VAPOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVarP(&o.PolicyPath, "policy", "p", "", "File containing the ValidatingAdmissionPolicy (required)")
	f.StringVarP(&o.BindingPath, "binding", "b", "", "File containing the ValidatingAdmissionPolicyBinding (required)")
	f.StringVar(&o.CELPolicy, "cel-policy", defaultCELPolicy, "The CEL policy module to use (builtin://cel: Warden's native one)")
	f.StringVar(&o.CompileToWasm, "compile-to-wasm", "", "Not supported by wardenctl: kwctl compiles the expressions into a Wasm module of their own")
	f.BoolVarP(&o.Force, "force", "f", false, "Not supported by wardenctl (kwctl: overwrite the files of --compile-to-wasm)")
}

// Validate checks the flags.
func (o *VAPOptions) Validate() error {
	if o.CompileToWasm != "" || o.Force {
		return &usageError{errors.New("--compile-to-wasm and -f/--force are not supported: wardenctl does not compile the expressions into a module of their own; the resource it writes runs them with --cel-policy")}
	}
	var missing []string
	if o.PolicyPath == "" {
		missing = append(missing, "-p/--policy")
	}
	if o.BindingPath == "" {
		missing = append(missing, "-b/--binding")
	}
	if len(missing) > 0 {
		return &usageError{fmt.Errorf("%s required", strings.Join(missing, " and "))}
	}
	if o.CELPolicy == "" {
		return &usageError{errors.New("--cel-policy is empty")}
	}
	return nil
}

func (a *app) scaffoldVAPCommand() *cobra.Command {
	var o VAPOptions
	cmd := &cobra.Command{
		Use:   "vap [flags] --policy <ValidatingAdmissionPolicy.yaml> --binding <ValidatingAdmissionPolicyBinding.yaml>",
		Short: "Convert a ValidatingAdmissionPolicy and its binding into a ClusterAdmissionPolicy",
		Long: "Print a ClusterAdmissionPolicy that runs a Kubernetes ValidatingAdmissionPolicy with the cel-policy " +
			"module (--cel-policy), as kwctl does: the binding's metadata, the policy's resource rules and match " +
			"policy, the selectors of both, and settings holding the policy's validations, variables, failurePolicy, " +
			"paramKind and the binding's paramRef. The resource kind of paramKind, and v1/Namespace when an " +
			"expression reads namespaceObject, are granted in contextAwareResources. The policy's matchConditions " +
			"become the resource's, which the API server evaluates before it calls the webhook, with the policy's " +
			"failurePolicy; a match condition that reads params, variables or namespaceObject, which a webhook's " +
			"cannot, is refused. auditAnnotations are dropped, with a warning; what cannot be converted without " +
			"widening the policy (excludeResourceRules, resource rules in the binding) is refused.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			var vap validatingAdmissionPolicy
			if err := a.readVAPObject(o.PolicyPath, "admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", &vap); err != nil {
				return err
			}
			var binding validatingAdmissionPolicyBinding
			if err := a.readVAPObject(o.BindingPath, "admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", &binding); err != nil {
				return err
			}
			res, warnings, err := convertVAP(o.CELPolicy, &vap, &binding)
			if err != nil {
				return err
			}
			for _, w := range warnings {
				a.logger().WarnContext(cmd.Context(), w)
			}
			b, err := jsonToYAML(res)
			if err != nil {
				return err
			}
			_, err = a.out.Write(b)
			return err
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// readVAPObject decodes the one object of the file at path into v, checking
// its apiVersion and kind. Fields of the wrong type are errors; unknown
// fields are ignored, as Kubernetes' own decoders do.
func (a *app) readVAPObject(path, apiVersion, kind string, v any) error {
	doc, err := a.readObject(path)
	if err != nil {
		return err
	}
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	_ = json.Unmarshal(doc, &tm) // a non-object fails below
	if tm.APIVersion != apiVersion || tm.Kind != kind {
		return fmt.Errorf("%s is not a %s: want apiVersion %s and kind %s, found %q and %q", path, kind, apiVersion, kind, tm.APIVersion, tm.Kind)
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s is not a valid %s: %w", path, kind, err)
	}
	return nil
}

// The parts of ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding
// (admissionregistration.k8s.io/v1) that the conversion reads. Fields are
// declared in alphabetical order, the order kwctl writes them in.
type (
	validatingAdmissionPolicy struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec *vapSpec `json:"spec"`
	}
	vapSpec struct {
		AuditAnnotations []json.RawMessage `json:"auditAnnotations"`
		FailurePolicy    *string           `json:"failurePolicy"`
		MatchConditions  []vapExpression   `json:"matchConditions"`
		MatchConstraints *vapMatch         `json:"matchConstraints"`
		ParamKind        *vapParamKind     `json:"paramKind"`
		Validations      *[]vapValidation  `json:"validations"`
		Variables        *[]vapExpression  `json:"variables"`
	}
	// vapExpression is a variable or a match condition.
	vapExpression struct {
		Expression string `json:"expression"`
		Name       string `json:"name"`
	}
	vapValidation struct {
		Expression        string  `json:"expression"`
		Message           *string `json:"message,omitempty"`
		MessageExpression *string `json:"messageExpression,omitempty"`
		Reason            *string `json:"reason,omitempty"`
	}
	vapParamKind struct {
		APIVersion string `json:"apiVersion,omitempty"`
		Kind       string `json:"kind,omitempty"`
	}
	// vapMatch is the MatchResources of the policy (matchConstraints) and
	// of the binding (matchResources).
	vapMatch struct {
		ExcludeResourceRules []json.RawMessage `json:"excludeResourceRules"`
		MatchPolicy          *string           `json:"matchPolicy"`
		NamespaceSelector    *labelSelector    `json:"namespaceSelector"`
		ObjectSelector       *labelSelector    `json:"objectSelector"`
		ResourceRules        []vapRule         `json:"resourceRules"`
	}
	vapRule struct {
		APIGroups     []string `json:"apiGroups"`
		APIVersions   []string `json:"apiVersions"`
		Operations    []string `json:"operations"`
		ResourceNames []string `json:"resourceNames"`
		Resources     []string `json:"resources"`
		Scope         *string  `json:"scope"`
	}
	labelSelector struct {
		MatchExpressions []labelRequirement `json:"matchExpressions,omitempty"`
		MatchLabels      map[string]string  `json:"matchLabels,omitempty"`
	}
	labelRequirement struct {
		Key      string   `json:"key"`
		Operator string   `json:"operator"`
		Values   []string `json:"values,omitempty"`
	}

	validatingAdmissionPolicyBinding struct {
		// Metadata is copied whole into the resource written.
		Metadata map[string]any  `json:"metadata"`
		Spec     *vapBindingSpec `json:"spec"`
	}
	vapBindingSpec struct {
		MatchResources    *vapMatch    `json:"matchResources"`
		ParamRef          *vapParamRef `json:"paramRef"`
		PolicyName        string       `json:"policyName"`
		ValidationActions []string     `json:"validationActions"`
	}
	vapParamRef struct {
		Name                    *string        `json:"name,omitempty"`
		Namespace               *string        `json:"namespace,omitempty"`
		ParameterNotFoundAction *string        `json:"parameterNotFoundAction,omitempty"`
		Selector                *labelSelector `json:"selector,omitempty"`
	}
)

// vapResource is the ClusterAdmissionPolicy scaffold vap writes; field
// order is kwctl's.
type vapResource struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       struct {
		Module                string                      `json:"module"`
		Settings              vapSettings                 `json:"settings"`
		Rules                 []metadata.Rule             `json:"rules"`
		Mutating              bool                        `json:"mutating"`
		ContextAwareResources []metadata.ContextAwareKind `json:"contextAwareResources,omitempty"`
		MatchPolicy           *string                     `json:"matchPolicy,omitempty"`
		NamespaceSelector     *labelSelector              `json:"namespaceSelector,omitempty"`
		ObjectSelector        *labelSelector              `json:"objectSelector,omitempty"`
		// FailurePolicy and MatchConditions are written only for a policy
		// with matchConditions, which kwctl drops.
		FailurePolicy   *string         `json:"failurePolicy,omitempty"`
		MatchConditions []vapExpression `json:"matchConditions,omitempty"`
	} `json:"spec"`
}

// vapSettings are the cel-policy settings of the resource, in kwctl's
// order; a list the policy has, even empty, is written.
type vapSettings struct {
	FailurePolicy *string          `json:"failurePolicy,omitempty"`
	ParamKind     *vapParamKind    `json:"paramKind,omitempty"`
	ParamRef      *vapParamRef     `json:"paramRef,omitempty"`
	Variables     *[]vapExpression `json:"variables,omitempty"`
	Validations   *[]vapValidation `json:"validations,omitempty"`
}

// The operations a Kubewarden rule may name.
var ruleOperations = []string{"CREATE", "UPDATE", "DELETE", "CONNECT", "*"}

// convertVAP builds the ClusterAdmissionPolicy of a policy and its binding,
// as kwctl's scaffold vap does (crates/kwctl/src/scaffold/vap.rs in
// kubewarden/adm-controller). It returns the warnings to show: what is
// dropped, what is granted, what to review.
func convertVAP(module string, vap *validatingAdmissionPolicy, binding *validatingAdmissionPolicyBinding) (*vapResource, []string, error) {
	if vap.Spec == nil {
		return nil, nil, errors.New("the ValidatingAdmissionPolicy has no spec")
	}
	if vap.Metadata.Name == "" {
		return nil, nil, errors.New("the ValidatingAdmissionPolicy has no metadata.name")
	}
	spec := vap.Spec
	var bspec vapBindingSpec
	if binding.Spec != nil {
		bspec = *binding.Spec
	}
	if bspec.PolicyName == "" {
		return nil, nil, errors.New("the ValidatingAdmissionPolicyBinding has no spec.policyName")
	}
	if bspec.PolicyName != vap.Metadata.Name {
		return nil, nil, fmt.Errorf("the ValidatingAdmissionPolicyBinding binds policy %q (spec.policyName), not this ValidatingAdmissionPolicy, %q (metadata.name)",
			bspec.PolicyName, vap.Metadata.Name)
	}
	for i, v := range derefSlice(spec.Validations) {
		if v.Expression == "" {
			return nil, nil, fmt.Errorf("the ValidatingAdmissionPolicy's spec.validations[%d] has no expression", i)
		}
	}
	for i, v := range derefSlice(spec.Variables) {
		if v.Expression == "" || v.Name == "" {
			return nil, nil, fmt.Errorf("the ValidatingAdmissionPolicy's spec.variables[%d] needs a name and an expression", i)
		}
	}

	var warnings []string
	warn := func(format string, a ...any) { warnings = append(warnings, fmt.Sprintf(format, a...)) }

	res := &vapResource{APIVersion: "policies.kubewarden.io/v1", Kind: "ClusterAdmissionPolicy", Metadata: binding.Metadata}
	if res.Metadata == nil {
		res.Metadata = map[string]any{}
	}
	res.Spec.Module = module
	checkCELPolicyRef(module, warn)

	s := &res.Spec.Settings
	s.FailurePolicy = spec.FailurePolicy
	var grants []metadata.ContextAwareKind
	switch {
	case spec.ParamKind != nil && bspec.ParamRef != nil:
		ref := *bspec.ParamRef
		if ref.ParameterNotFoundAction == nil {
			deny := "Deny"
			ref.ParameterNotFoundAction = &deny
			warn("the binding's paramRef has no parameterNotFoundAction: it is set to Deny")
		}
		s.ParamKind, s.ParamRef = spec.ParamKind, &ref
		if spec.ParamKind.APIVersion != "" && spec.ParamKind.Kind != "" {
			k := metadata.ContextAwareKind{APIVersion: spec.ParamKind.APIVersion, Kind: spec.ParamKind.Kind}
			grants = append(grants, k)
			warn("the policy is granted %s/%s in contextAwareResources, to read its params (paramKind): review it before applying", k.APIVersion, k.Kind)
		}
	case spec.ParamKind != nil || bspec.ParamRef != nil:
		return nil, nil, errors.New("the ValidatingAdmissionPolicy's paramKind and the binding's paramRef go together: give both or neither")
	}

	pm, bm := spec.MatchConstraints, bspec.MatchResources
	if pm == nil {
		pm = &vapMatch{}
	}
	if bm == nil {
		bm = &vapMatch{}
	}
	if len(pm.ExcludeResourceRules) > 0 {
		return nil, nil, errors.New("the ValidatingAdmissionPolicy's matchConstraints.excludeResourceRules cannot be converted: a ClusterAdmissionPolicy has no such field; narrow matchConstraints.resourceRules instead")
	}
	if len(bm.ExcludeResourceRules) > 0 {
		return nil, nil, errors.New("the binding's matchResources.excludeResourceRules cannot be converted: a ClusterAdmissionPolicy has no such field; narrow the policy's matchConstraints.resourceRules instead")
	}
	if len(bm.ResourceRules) > 0 {
		return nil, nil, errors.New("the binding's matchResources.resourceRules cannot be converted: only the policy's matchConstraints.resourceRules become rules; move the narrowing there")
	}
	if bm.MatchPolicy != nil {
		policyMP := "Equivalent" // the default of both
		if pm.MatchPolicy != nil {
			policyMP = *pm.MatchPolicy
		}
		if *bm.MatchPolicy != policyMP {
			return nil, nil, fmt.Errorf("the binding's matchResources.matchPolicy, %s, differs from the policy's matchConstraints.matchPolicy, %s: make them equal, or remove the binding's", *bm.MatchPolicy, policyMP)
		}
	}
	var err error
	if res.Spec.NamespaceSelector, err = andSelectors("namespaceSelector", pm.NamespaceSelector, bm.NamespaceSelector); err != nil {
		return nil, nil, err
	}
	if res.Spec.ObjectSelector, err = andSelectors("objectSelector", pm.ObjectSelector, bm.ObjectSelector); err != nil {
		return nil, nil, err
	}
	res.Spec.MatchPolicy = pm.MatchPolicy
	res.Spec.Rules = []metadata.Rule{}
	for i, r := range pm.ResourceRules {
		for _, op := range r.Operations {
			if !slices.Contains(ruleOperations, op) {
				return nil, nil, fmt.Errorf("converting the policy's matchConstraints.resourceRules[%d] into a rule: unknown operation %q (want one of %s)", i, op, strings.Join(ruleOperations, ", "))
			}
		}
		if len(r.ResourceNames) > 0 {
			warn("matchConstraints.resourceRules[%d].resourceNames are dropped: a ClusterAdmissionPolicy's rules have none, so the policy applies to every object of these resources", i)
		}
		if r.Scope != nil && *r.Scope != "*" {
			warn("matchConstraints.resourceRules[%d].scope is dropped: a ClusterAdmissionPolicy's rules have none, so the policy applies to namespaced and cluster-scoped resources alike", i)
		}
		res.Spec.Rules = append(res.Spec.Rules, metadata.Rule{
			APIGroups: nonNil(r.APIGroups), APIVersions: nonNil(r.APIVersions),
			Resources: nonNil(r.Resources), Operations: nonNil(r.Operations),
		})
	}

	if len(spec.AuditAnnotations) > 0 {
		warn("auditAnnotations are dropped: the cel-policy does not support them")
	}
	if len(spec.MatchConditions) > 0 {
		if err := checkMatchConditions(spec.MatchConditions); err != nil {
			return nil, nil, err
		}
		// The API server evaluates them before it calls the policy's
		// webhook, and an error in one is decided by the webhook's
		// failure policy, as the policy's decides in the API server.
		res.Spec.MatchConditions = spec.MatchConditions
		res.Spec.FailurePolicy = spec.FailurePolicy
	}
	if a := bspec.ValidationActions; len(a) > 0 && !slices.Contains(a, "Deny") {
		warn("the binding's validationActions (%s) are dropped: the ClusterAdmissionPolicy rejects what the policy denies; set spec.mode: monitor to only report", strings.Join(a, ", "))
	}

	exprs := vapExpressions(spec)
	if slices.ContainsFunc(exprs, func(e string) bool { return strings.Contains(e, "namespaceObject") }) {
		ns := metadata.ContextAwareKind{APIVersion: "v1", Kind: "Namespace"}
		if !slices.Contains(grants, ns) {
			grants = append(grants, ns)
		}
		warn("the policy is granted v1/Namespace in contextAwareResources, to read namespaceObject: review it before applying")
	}
	slices.SortFunc(grants, func(x, y metadata.ContextAwareKind) int {
		if c := strings.Compare(x.APIVersion, y.APIVersion); c != 0 {
			return c
		}
		return strings.Compare(x.Kind, y.Kind)
	})
	res.Spec.ContextAwareResources = grants
	if slices.ContainsFunc(exprs, func(e string) bool { return strings.Contains(e, "kw.k8s") }) {
		if len(grants) == 0 {
			warn("the policy calls kw.k8s, and contextAwareResources is empty: every such call will be denied; add each apiVersion and kind it reads to spec.contextAwareResources")
		} else {
			warn("the policy calls kw.k8s: contextAwareResources grants only what paramKind and namespaceObject need; add each other apiVersion and kind it reads")
		}
	}

	s.Variables, s.Validations = spec.Variables, spec.Validations
	return res, warnings, nil
}

// checkCELPolicyRef warns about a module that is not pinned to a version,
// or that is not an OCI reference.
func checkCELPolicyRef(module string, warn func(string, ...any)) {
	if !strings.Contains(module, "://") || strings.HasPrefix(module, "registry://") {
		ref, err := name.ParseReference(strings.TrimPrefix(module, "registry://"), name.WithDefaultTag(""))
		switch {
		case err != nil:
			warn("the CEL policy module %s is not a valid OCI reference", module)
		case ref.Identifier() == "" || ref.Identifier() == "latest":
			warn("the CEL policy module %s is not pinned to a version: the latest one may behave differently; give a tag such as v1.2.3", module)
		}
	}
}

// vapExpressions returns every CEL expression of the policy: validations,
// variables and match conditions.
func vapExpressions(spec *vapSpec) []string {
	var out []string
	for _, v := range derefSlice(spec.Validations) {
		out = append(out, v.Expression)
		if v.MessageExpression != nil {
			out = append(out, *v.MessageExpression)
		}
	}
	for _, v := range derefSlice(spec.Variables) {
		out = append(out, v.Expression)
	}
	for _, c := range spec.MatchConditions {
		out = append(out, c.Expression)
	}
	return out
}

// andSelectors is the selector matching what both a and b match (field
// names it in errors): their expressions side by side and their labels
// merged. A label both give different values matches nothing: an error.
func andSelectors(field string, a, b *labelSelector) (*labelSelector, error) {
	switch {
	case a == nil:
		return b, nil
	case b == nil:
		return a, nil
	}
	out := &labelSelector{MatchExpressions: append(slices.Clone(a.MatchExpressions), b.MatchExpressions...)}
	for k, v := range a.MatchLabels {
		if out.MatchLabels == nil {
			out.MatchLabels = map[string]string{}
		}
		out.MatchLabels[k] = v
	}
	for k, v := range b.MatchLabels {
		if prev, ok := out.MatchLabels[k]; ok && prev != v {
			return nil, fmt.Errorf("%s: the ValidatingAdmissionPolicy requires label %s=%s and the binding %s=%s, which no object matches: give both the same value, or drop the label from one", field, k, prev, k, v)
		}
		if out.MatchLabels == nil {
			out.MatchLabels = map[string]string{}
		}
		out.MatchLabels[k] = v
	}
	return out, nil
}

func derefSlice[T any](p *[]T) []T {
	if p == nil {
		return nil
	}
	return *p
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
