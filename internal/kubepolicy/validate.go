package kubepolicy

import (
	"regexp"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// This file checks a policy and its bindings as the API server checks them
// when they are created: the same field paths, the same error types, and
// the expressions compiled with the API server's own CEL compiler in the
// environment of new expressions, so an expression it refuses is refused
// with its message. The checks of metadata, of the shape of match rules
// and of selectors that the API server makes too are not repeated here
// (docs/kubernetes-policies.md).

// groupKind names a policy kind as the API server's Invalid error does.
func groupKind(kind string) schema.GroupKind {
	return schema.GroupKind{Group: admissionregistrationv1.GroupName, Kind: kind}
}

// invalid is the API server's answer to an object that fails validation.
func invalid(kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(groupKind(kind), name, errs)
}

func newCompiler() plugincel.Compiler {
	return plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
}

// newCompositionCompiler is the compiler of a policy with variables: it
// keeps the variables compiled so far, so create one per policy.
func newCompositionCompiler() plugincel.Compiler {
	c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return newCompiler()
	}
	return c
}

var supportedFailurePolicies = []string{string(admissionregistrationv1.Fail), string(admissionregistrationv1.Ignore)}

func validateFailurePolicy(fp *admissionregistrationv1.FailurePolicyType, path *field.Path) field.ErrorList {
	if fp == nil {
		return field.ErrorList{field.Required(path, "")}
	}
	if !slices.Contains(supportedFailurePolicies, string(*fp)) {
		return field.ErrorList{field.NotSupported(path, *fp, supportedFailurePolicies)}
	}
	return nil
}

func validateMatchConstraints(mc *admissionregistrationv1.MatchResources, path *field.Path) field.ErrorList {
	if mc == nil {
		return field.ErrorList{field.Required(path, "")}
	}
	errs := validateMatchResources(mc, path)
	if len(mc.ResourceRules) == 0 {
		errs = append(errs, field.Required(path.Child("resourceRules"), ""))
	}
	return errs
}

var (
	supportedMatchPolicies = []string{string(admissionregistrationv1.Equivalent), string(admissionregistrationv1.Exact)}
	supportedOperations    = []string{string(admissionregistrationv1.OperationAll), string(admissionregistrationv1.Connect),
		string(admissionregistrationv1.Create), string(admissionregistrationv1.Delete), string(admissionregistrationv1.Update)}
	supportedScopes = []string{string(admissionregistrationv1.AllScopes), string(admissionregistrationv1.ClusterScope), string(admissionregistrationv1.NamespacedScope)}
)

// validateMatchResources checks the match policy and the rules of a
// policy's matchConstraints or a binding's matchResources (after
// defaulting). The API server also checks the selectors' syntax, the
// resource names and combinations of subresource wildcards; Warden leaves
// those to the plugin, which reports a selector it cannot parse as a
// configuration error on each request.
func validateMatchResources(mr *admissionregistrationv1.MatchResources, path *field.Path) field.ErrorList {
	if mr == nil {
		return nil
	}
	var errs field.ErrorList
	if mr.MatchPolicy != nil && !slices.Contains(supportedMatchPolicies, string(*mr.MatchPolicy)) {
		errs = append(errs, field.NotSupported(path.Child("matchPolicy"), *mr.MatchPolicy, supportedMatchPolicies))
	}
	for i := range mr.ResourceRules {
		errs = append(errs, validateRule(&mr.ResourceRules[i].RuleWithOperations, path.Child("resourceRules").Index(i))...)
	}
	for i := range mr.ExcludeResourceRules {
		errs = append(errs, validateRule(&mr.ExcludeResourceRules[i].RuleWithOperations, path.Child("excludeResourceRules").Index(i))...)
	}
	return errs
}

// validateRule checks one rule's operations, groups, versions, resources
// and scope as the API server does.
func validateRule(r *admissionregistrationv1.RuleWithOperations, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(r.Operations) == 0 {
		errs = append(errs, field.Required(path.Child("operations"), ""))
	}
	if len(r.Operations) > 1 && slices.Contains(r.Operations, admissionregistrationv1.OperationAll) {
		errs = append(errs, field.Invalid(path.Child("operations"), r.Operations, "if '*' is present, must not specify other operations"))
	}
	for i, op := range r.Operations {
		if !slices.Contains(supportedOperations, string(op)) {
			errs = append(errs, field.NotSupported(path.Child("operations").Index(i), op, supportedOperations))
		}
	}
	if len(r.APIGroups) == 0 {
		errs = append(errs, field.Required(path.Child("apiGroups"), ""))
	}
	if len(r.APIGroups) > 1 && slices.Contains(r.APIGroups, "*") {
		errs = append(errs, field.Invalid(path.Child("apiGroups"), r.APIGroups, "if '*' is present, must not specify other API groups"))
	}
	if len(r.APIVersions) == 0 {
		errs = append(errs, field.Required(path.Child("apiVersions"), ""))
	}
	if len(r.APIVersions) > 1 && slices.Contains(r.APIVersions, "*") {
		errs = append(errs, field.Invalid(path.Child("apiVersions"), r.APIVersions, "if '*' is present, must not specify other API versions"))
	}
	for i, v := range r.APIVersions {
		if v == "" {
			errs = append(errs, field.Required(path.Child("apiVersions").Index(i), ""))
		}
	}
	if len(r.Resources) == 0 {
		errs = append(errs, field.Required(path.Child("resources"), ""))
	}
	for i, res := range r.Resources {
		if res == "" {
			errs = append(errs, field.Required(path.Child("resources").Index(i), ""))
		}
	}
	if r.Scope != nil && !slices.Contains(supportedScopes, string(*r.Scope)) {
		errs = append(errs, field.NotSupported(path.Child("scope"), *r.Scope, supportedScopes))
	}
	return errs
}

func validateMatchConditions(mcs []admissionregistrationv1.MatchCondition, hasParams bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(mcs) > 64 {
		errs = append(errs, field.TooMany(path, len(mcs), 64))
	}
	compiler := newCompiler()
	seen := map[string]bool{}
	for i, mc := range mcs {
		p := path.Index(i)
		if expr := strings.TrimSpace(mc.Expression); expr == "" {
			errs = append(errs, field.Required(p.Child("expression"), ""))
		} else {
			errs = append(errs, compile(compiler, &matchconditions.MatchCondition{Expression: expr},
				plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}, p.Child("expression"))...)
		}
		switch {
		case mc.Name == "":
			errs = append(errs, field.Required(p.Child("name"), ""))
		case seen[mc.Name]:
			errs = append(errs, field.Duplicate(p.Child("name"), mc.Name))
		}
		seen[mc.Name] = true
	}
	return errs
}

var celIdentifier = regexp.MustCompile(`^[_a-zA-Z][_a-zA-Z0-9]*$`)

// celReserved are the words CEL reserves, which cannot name a variable.
var celReserved = []string{"true", "false", "null", "in", "as", "break", "const", "continue", "else",
	"for", "function", "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while"}

func validateVariables(compiler plugincel.Compiler, vars []admissionregistrationv1.Variable, hasParams bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, v := range vars {
		p := path.Index(i)
		if strings.TrimSpace(v.Name) == "" {
			errs = append(errs, field.Required(p.Child("name"), "name is not specified"))
		} else if !celIdentifier.MatchString(v.Name) || slices.Contains(celReserved, v.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), v.Name, "must be a valid CEL identifier"))
		}
		if strings.TrimSpace(v.Expression) == "" {
			errs = append(errs, field.Required(p.Child("expression"), "expression is not specified"))
			continue
		}
		cc, ok := compiler.(*plugincel.CompositedCompiler)
		if !ok {
			errs = append(errs, field.InternalError(p, errVariableComposition))
			continue
		}
		v := &validating.Variable{Name: v.Name, Expression: v.Expression}
		res := cc.CompileAndStoreVariable(v, plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}, environment.NewExpressions)
		if res.Error != nil {
			errs = append(errs, celError(p.Child("expression"), v.Expression, res.Error))
		}
	}
	return errs
}

// compile compiles one expression as a new expression and reports its
// error at path.
func compile(compiler plugincel.Compiler, expr plugincel.ExpressionAccessor, vars plugincel.OptionalVariableDeclarations, path *field.Path) field.ErrorList {
	res := compiler.CompileCELExpression(expr, vars, environment.NewExpressions)
	if res.Error != nil {
		return field.ErrorList{celError(path, expr.GetExpression(), res.Error)}
	}
	return nil
}

// celError words a compilation error as the API server's validation does.
func celError(path *field.Path, expression string, err *apiservercel.Error) *field.Error {
	switch err.Type {
	case apiservercel.ErrorTypeRequired:
		return field.Required(path, err.Detail)
	case apiservercel.ErrorTypeInvalid:
		return field.Invalid(path, expression, err.Detail)
	default:
		return field.InternalError(path, err)
	}
}

var supportedReasons = []string{string(metav1.StatusReasonForbidden), string(metav1.StatusReasonInvalid), string(metav1.StatusReasonRequestEntityTooLarge)}

var newlines = regexp.MustCompile(`[\n\r]+`)

// validateVAP checks a ValidatingAdmissionPolicy as the API server does on
// create.
func validateVAP(p *admissionregistrationv1.ValidatingAdmissionPolicy) error {
	spec, path := &p.Spec, field.NewPath("spec")
	hasParams := spec.ParamKind != nil
	var errs field.ErrorList
	errs = append(errs, validateFailurePolicy(spec.FailurePolicy, path.Child("failurePolicy"))...)
	errs = append(errs, validateMatchConstraints(spec.MatchConstraints, path.Child("matchConstraints"))...)
	errs = append(errs, validateMatchConditions(spec.MatchConditions, hasParams, path.Child("matchConditions"))...)
	var compiler plugincel.Compiler = newCompiler()
	if len(spec.Variables) > 0 {
		compiler = newCompositionCompiler()
	}
	errs = append(errs, validateVariables(compiler, spec.Variables, hasParams, path.Child("variables"))...)
	vars := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}
	if len(spec.Validations) == 0 && len(spec.AuditAnnotations) == 0 {
		const msg = "validations or auditAnnotations must contain at least one item"
		errs = append(errs, field.Required(path.Child("validations"), msg), field.Required(path.Child("auditAnnotations"), msg))
	}
	for i, v := range spec.Validations {
		vp := path.Child("validations").Index(i)
		if strings.TrimSpace(v.Expression) == "" {
			errs = append(errs, field.Required(vp.Child("expression"), "expression is not specified"))
		} else {
			errs = append(errs, compile(compiler, &validating.ValidationCondition{Expression: v.Expression}, vars, vp.Child("expression"))...)
		}
		if v.MessageExpression != "" && strings.TrimSpace(v.MessageExpression) == "" {
			errs = append(errs, field.Invalid(vp.Child("messageExpression"), v.MessageExpression, "must be non-empty if specified"))
		} else if strings.TrimSpace(v.MessageExpression) != "" {
			// A message expression sees params, never the authorizer.
			errs = append(errs, compile(compiler, &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression},
				plugincel.OptionalVariableDeclarations{HasParams: hasParams}, vp.Child("messageExpression"))...)
		}
		if v.Message != "" && strings.TrimSpace(v.Message) == "" {
			errs = append(errs, field.Invalid(vp.Child("message"), v.Message, "must be non-empty if specified"))
		} else if newlines.MatchString(strings.TrimSpace(v.Message)) {
			errs = append(errs, field.Invalid(vp.Child("message"), v.Message, "must not contain line breaks"))
		}
		if v.Reason != nil && !slices.Contains(supportedReasons, string(*v.Reason)) {
			errs = append(errs, field.NotSupported(vp.Child("reason"), *v.Reason, supportedReasons))
		}
	}
	keys := map[string]bool{}
	for i, a := range spec.AuditAnnotations {
		ap := path.Child("auditAnnotations").Index(i)
		if expr := strings.TrimSpace(a.ValueExpression); expr == "" {
			errs = append(errs, field.Required(ap.Child("valueExpression"), "valueExpression is not specified"))
		} else {
			errs = append(errs, compileAs(compiler, &validating.AuditAnnotationCondition{ValueExpression: expr}, a.ValueExpression, vars, ap.Child("valueExpression"))...)
		}
		if keys[a.Key] {
			errs = append(errs, field.Duplicate(ap.Child("key"), a.Key))
		}
		keys[a.Key] = true
	}
	return invalid(KindVAP, p.Name, errs)
}

// compileAs is compile for an expression the API server compiles trimmed
// but quotes as written.
func compileAs(compiler plugincel.Compiler, expr plugincel.ExpressionAccessor, written string, vars plugincel.OptionalVariableDeclarations, path *field.Path) field.ErrorList {
	res := compiler.CompileCELExpression(expr, vars, environment.NewExpressions)
	if res.Error != nil {
		return field.ErrorList{celError(path, written, res.Error)}
	}
	return nil
}

var (
	supportedReinvocationPolicies = []string{string(admissionregistrationv1.IfNeededReinvocationPolicy), string(admissionregistrationv1.NeverReinvocationPolicy)}
	supportedPatchTypes           = []string{string(admissionregistrationv1.PatchTypeApplyConfiguration), string(admissionregistrationv1.PatchTypeJSONPatch)}
	supportedMutatingOperations   = []string{string(admissionregistrationv1.OperationAll), string(admissionregistrationv1.Connect), string(admissionregistrationv1.Create), string(admissionregistrationv1.Update)}
)

func validateMutatingOperations(rules []admissionregistrationv1.NamedRuleWithOperations, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, r := range rules {
		for _, op := range r.Operations {
			if !slices.Contains(supportedMutatingOperations, string(op)) {
				errs = append(errs, field.NotSupported(path, op, supportedMutatingOperations))
			}
		}
	}
	return errs
}

// validateMAP checks a MutatingAdmissionPolicy as the API server does on
// create.
func validateMAP(p *admissionregistrationv1.MutatingAdmissionPolicy) error {
	spec, path := &p.Spec, field.NewPath("spec")
	hasParams := spec.ParamKind != nil
	var errs field.ErrorList
	errs = append(errs, validateFailurePolicy(spec.FailurePolicy, path.Child("failurePolicy"))...)
	errs = append(errs, validateMatchConstraints(spec.MatchConstraints, path.Child("matchConstraints"))...)
	if spec.MatchConstraints != nil {
		errs = append(errs, validateMutatingOperations(spec.MatchConstraints.ResourceRules, path.Child("matchConstraints", "resourceRules", "operations"))...)
	}
	errs = append(errs, validateMatchConditions(spec.MatchConditions, hasParams, path.Child("matchConditions"))...)
	compiler := newCompositionCompiler()
	errs = append(errs, validateVariables(compiler, spec.Variables, hasParams, path.Child("variables"))...)
	vars := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true, HasPatchTypes: true}
	if len(spec.Mutations) == 0 {
		errs = append(errs, field.Required(path.Child("mutations"), "mutations must contain at least one item"))
	}
	for i, m := range spec.Mutations {
		mp := path.Child("mutations").Index(i)
		switch m.PatchType {
		case "":
			errs = append(errs, field.Required(mp.Child("patchType"), ""))
		case admissionregistrationv1.PatchTypeJSONPatch:
			if m.JSONPatch == nil {
				errs = append(errs, field.Required(mp.Child("jsonPatch"), "must be specified when patchType is JSONPatch"))
			} else if expr := strings.TrimSpace(m.JSONPatch.Expression); expr == "" {
				errs = append(errs, field.Required(mp.Child("jsonPatch", "expression"), ""))
			} else {
				errs = append(errs, compile(compiler, &patch.JSONPatchCondition{Expression: expr}, vars, mp.Child("jsonPatch", "expression"))...)
			}
			if m.ApplyConfiguration != nil {
				errs = append(errs, field.Invalid(mp.Child("applyConfiguration"), "{applyConfiguration}", "must not be specified when patchType is JSONPatch"))
			}
		case admissionregistrationv1.PatchTypeApplyConfiguration:
			if m.ApplyConfiguration == nil {
				errs = append(errs, field.Required(mp.Child("applyConfiguration"), "must be specified when patchType is ApplyConfiguration"))
			} else if expr := strings.TrimSpace(m.ApplyConfiguration.Expression); expr == "" {
				errs = append(errs, field.Required(mp.Child("applyConfiguration", "expression"), ""))
			} else {
				errs = append(errs, compile(compiler, &patch.ApplyConfigurationCondition{Expression: expr}, vars, mp.Child("applyConfiguration", "expression"))...)
			}
			if m.JSONPatch != nil {
				errs = append(errs, field.Invalid(mp.Child("jsonPatch"), "{jsonPatch}", "must not be specified when patchType is ApplyConfiguration"))
			}
		default:
			errs = append(errs, field.NotSupported(mp.Child("patchType"), m.PatchType, supportedPatchTypes))
		}
	}
	if spec.ReinvocationPolicy == "" {
		errs = append(errs, field.Required(path.Child("reinvocationPolicy"), ""))
	} else if !slices.Contains(supportedReinvocationPolicies, string(spec.ReinvocationPolicy)) {
		errs = append(errs, field.NotSupported(path.Child("reinvocationPolicy"), spec.ReinvocationPolicy, supportedReinvocationPolicies))
	}
	return invalid(KindMAP, p.Name, errs)
}

func validatePolicyName(name string, path *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	return nil
}

func validateParamRef(pr *admissionregistrationv1.ParamRef, path *field.Path) field.ErrorList {
	if pr == nil {
		return nil
	}
	var errs field.ErrorList
	if pr.Name != "" && pr.Selector != nil {
		const msg = "name and selector are mutually exclusive"
		errs = append(errs, field.Forbidden(path.Child("name"), msg), field.Forbidden(path.Child("selector"), msg))
	}
	if pr.Name == "" && pr.Selector == nil {
		errs = append(errs, field.Required(path, "one of name or selector must be specified"))
	}
	if pr.ParameterNotFoundAction == nil || *pr.ParameterNotFoundAction == "" {
		errs = append(errs, field.Required(path.Child("parameterNotFoundAction"), ""))
	} else if a := *pr.ParameterNotFoundAction; a != admissionregistrationv1.DenyAction && a != admissionregistrationv1.AllowAction {
		errs = append(errs, field.NotSupported(path.Child("parameterNotFoundAction"), pr.ParameterNotFoundAction,
			[]string{string(admissionregistrationv1.DenyAction), string(admissionregistrationv1.AllowAction)}))
	}
	return errs
}

var supportedValidationActions = []string{string(admissionregistrationv1.Audit), string(admissionregistrationv1.Deny), string(admissionregistrationv1.Warn)}

func validateVAPBinding(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) error {
	path := field.NewPath("spec")
	errs := validatePolicyName(b.Spec.PolicyName, path.Child("policyName"))
	errs = append(errs, validateParamRef(b.Spec.ParamRef, path.Child("paramRef"))...)
	errs = append(errs, validateMatchResources(b.Spec.MatchResources, path.Child("matchResources"))...)
	ap := path.Child("validationActions")
	seen := map[admissionregistrationv1.ValidationAction]bool{}
	for i, a := range b.Spec.ValidationActions {
		if !slices.Contains(supportedValidationActions, string(a)) {
			errs = append(errs, field.NotSupported(ap.Index(i), a, supportedValidationActions))
		}
		if seen[a] {
			errs = append(errs, field.Duplicate(ap.Index(i), a))
		}
		seen[a] = true
	}
	if seen[admissionregistrationv1.Deny] && seen[admissionregistrationv1.Warn] {
		errs = append(errs, field.Invalid(ap, b.Spec.ValidationActions, "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"))
	}
	if len(seen) == 0 {
		errs = append(errs, field.Required(ap, "at least one validation action is required"))
	}
	return invalid(kindVAPBinding, b.Name, errs)
}

func validateMAPBinding(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) error {
	path := field.NewPath("spec")
	errs := validatePolicyName(b.Spec.PolicyName, path.Child("policyName"))
	errs = append(errs, validateParamRef(b.Spec.ParamRef, path.Child("paramRef"))...)
	errs = append(errs, validateMatchResources(b.Spec.MatchResources, path.Child("matchResources"))...)
	if b.Spec.MatchResources != nil {
		errs = append(errs, validateMutatingOperations(b.Spec.MatchResources.ResourceRules, path.Child("matchResources", "resourceRules", "operations"))...)
	}
	return invalid(kindMAPBinding, b.Name, errs)
}
