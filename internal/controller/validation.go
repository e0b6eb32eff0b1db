package controller

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/capabilities"
	"github.com/wardenhq/warden/internal/groupexpr"
)

// The checks of the controller's validating webhooks
// (docs/compatibility.md#controller-webhooks). The CRDs' CEL rules already
// refuse what needs no code (the immutable policyServer, protect to monitor,
// empty rules, the PDB fields); these checks repeat the ones that are cheap, so
// that a CRD installed without its rules is still guarded, and add those CEL
// rules cannot express: group expressions, matchConditions as the API server
// compiles them, namespaced rules, and what needs other objects (a
// PolicyServer's image pull Secret).

const (
	// maxMatchConditions is the API server's limit on a webhook's
	// matchConditions.
	maxMatchConditions = 64
	// maxWebhookTimeoutSeconds is the longest webhook timeout the API
	// server accepts.
	maxWebhookTimeoutSeconds = 30
)

// memberName is what a group member may be called: a CEL identifier.
var memberName = regexp.MustCompile(`^[_a-zA-Z][_a-zA-Z0-9]*$`)

// celReserved are CEL's reserved words, which cannot name members.
var celReserved = sets.New(
	"true", "false", "null", "in", "as", "break", "const", "continue", "else",
	"for", "function", "if", "import", "let", "loop", "package", "namespace",
	"return", "var", "void", "while",
)

// sensitiveResources are what namespaced policies may not target: a
// namespace owner could otherwise hide the reports about their namespace.
var sensitiveResources = []struct{ group, resource string }{
	{"wgpolicyk8s.io", "policyreports"},
}

// validatePolicy checks a policy being created (old is nil) or updated.
func validatePolicy(p, old policiesv1.Policy) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateRules(p)...)
	errs = append(errs, validateMatchConditions(p.GetMatchConditions(), field.NewPath("spec", "matchConditions"))...)
	if t, e := p.GetTimeoutSeconds(), p.GetTimeoutEvalSeconds(); t != nil && e != nil && *e > *t {
		errs = append(errs, field.Invalid(field.NewPath("spec", "timeoutEvalSeconds"), *e, "timeoutEvalSeconds cannot be greater than timeoutSeconds"))
	}
	if old != nil {
		if old.GetPolicyServer() != p.GetPolicyServer() {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "policyServer"), "the field is immutable"))
		}
		if old.GetPolicyMode() == policiesv1.PolicyModeProtect && p.GetPolicyMode() == policiesv1.PolicyModeMonitor {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "mode"), "field cannot transition from protect to monitor. Recreate instead."))
		}
	}
	if g, ok := p.(policiesv1.PolicyGroup); ok {
		errs = append(errs, validateGroup(g)...)
	}
	return errs
}

// validateRules checks that every rule names operations, API versions and
// resources, none of them empty; namespaced policies may also not match
// every resource of every group, nor the sensitive resources.
func validateRules(p policiesv1.Policy) field.ErrorList {
	path := field.NewPath("spec", "rules")
	rules := p.GetRules()
	if len(rules) == 0 {
		return field.ErrorList{field.Required(path, "a value must be specified")}
	}
	namespaced := p.GetNamespace() != ""
	var errs field.ErrorList
	for i, rule := range rules {
		rp := path.Index(i)
		switch {
		case len(rule.Operations) == 0:
			errs = append(errs, field.Required(rp.Child("operations"), "a value must be specified"))
			continue
		case len(rule.APIVersions) == 0 || len(rule.Resources) == 0:
			errs = append(errs, field.Required(rp, "apiVersions and resources must have specified values"))
			continue
		}
		for j, op := range rule.Operations {
			if op == "" {
				errs = append(errs, field.Required(rp.Child("operations").Index(j), "must be non-empty"))
			}
		}
		errs = append(errs, nonEmpty(rule.APIVersions, rp.Child("apiVersions"))...)
		errs = append(errs, nonEmpty(rule.Resources, rp.Child("resources"))...)
		if namespaced {
			errs = append(errs, namespacedRule(rule.Rule, rp)...)
		}
	}
	return errs
}

func nonEmpty(values []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, v := range values {
		if v == "" {
			errs = append(errs, field.Required(path.Index(i), "must be non-empty"))
		}
	}
	return errs
}

// namespacedRule checks a rule of an AdmissionPolicy or AdmissionPolicyGroup.
// As Kubewarden does, the rule's groups are read from apiGroups and, when
// those are empty, from apiVersions.
func namespacedRule(rule admissionregistrationv1.Rule, path *field.Path) field.ErrorList {
	groups, groupsField := rule.APIGroups, "apiGroups"
	if len(groups) == 0 {
		groups, groupsField = rule.APIVersions, "apiVersions"
	}
	var errs field.ErrorList
	g := indexOf(groups, func(s string) bool { return s == "*" })
	r := indexOf(rule.Resources, func(s string) bool { return s == "*" || s == "*/*" })
	if g >= 0 && r >= 0 {
		errs = append(errs,
			field.Forbidden(path.Child(groupsField).Index(g), groupsField+" cannot use wildcards when using AdmissionPolicy or AdmissionPolicyGroup"),
			field.Forbidden(path.Child("resources").Index(r), "resources cannot use wildcards when using AdmissionPolicy or AdmissionPolicyGroup"))
	}
	for _, s := range sensitiveResources {
		groupHit := indexOf(groups, func(x string) bool { return x == s.group || x == "*" }) >= 0
		resourceHit := indexOf(rule.Resources, func(x string) bool {
			return x == s.resource || x == "*" || x == "*/*" || strings.HasPrefix(x, s.resource+"/")
		}) >= 0
		if groupHit && resourceHit {
			errs = append(errs, field.Forbidden(path, fmt.Sprintf("{APIGroup: %s, Resource: %s} resources cannot be targeted by AdmissionPolicy or AdmissionPolicyGroup", s.group, s.resource)))
		}
	}
	return errs
}

func indexOf(values []string, match func(string) bool) int {
	for i, v := range values {
		if match(v) {
			return i
		}
	}
	return -1
}

// matchConditionCompiler compiles matchConditions as the API server does.
// Building its environments takes a while, so it is made on first use.
var matchConditionCompiler = sync.OnceValue(func() plugincel.Compiler {
	return plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
})

// validateMatchConditions checks matchConditions as the API server checks
// them on a webhook configuration: at most 64, unique qualified names, and
// expressions that compile.
func validateMatchConditions(conds []admissionregistrationv1.MatchCondition, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(conds) > maxMatchConditions {
		errs = append(errs, field.TooMany(path, len(conds), maxMatchConditions))
	}
	names := sets.New[string]()
	for i, c := range conds {
		cp := path.Index(i)
		if expr := strings.TrimSpace(c.Expression); expr == "" {
			errs = append(errs, field.Required(cp.Child("expression"), ""))
		} else if err := compileMatchCondition(expr); err != nil {
			errs = append(errs, matchConditionError(cp.Child("expression"), expr, err))
		}
		switch {
		case c.Name == "":
			errs = append(errs, field.Required(cp.Child("name"), ""))
		case names.Has(c.Name):
			errs = append(errs, field.Duplicate(cp.Child("name"), c.Name))
		default:
			names.Insert(c.Name)
			for _, msg := range validation.IsQualifiedName(c.Name) {
				errs = append(errs, field.Invalid(cp.Child("name"), c.Name, msg))
			}
		}
	}
	return errs
}

func compileMatchCondition(expr string) error {
	result := matchConditionCompiler().CompileCELExpression(&matchconditions.MatchCondition{Expression: expr},
		plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.NewExpressions)
	if result.Error != nil {
		return result.Error
	}
	return nil
}

func matchConditionError(path *field.Path, expr string, err error) *field.Error {
	if celErr, ok := err.(*apiservercel.Error); ok {
		switch celErr.Type {
		case apiservercel.ErrorTypeRequired:
			return field.Required(path, celErr.Detail)
		case apiservercel.ErrorTypeInvalid:
			return field.Invalid(path, expr, celErr.Detail)
		}
	}
	return field.InternalError(path, err)
}

// validateGroup checks what only groups have: members, their timeouts, the
// expression and the message.
func validateGroup(g policiesv1.PolicyGroup) field.ErrorList {
	var errs field.ErrorList
	members := g.GetPolicyGroupMembersWithContext()
	membersPath := field.NewPath("spec", "policies")
	if len(members) == 0 {
		errs = append(errs, field.Required(membersPath, "policy groups must have at least one policy member"))
	}
	names := make([]string, 0, len(members))
	var sum int32
	groupTimeout := g.GetTimeoutSeconds()
	for _, name := range sets.List(sets.KeySet(members)) {
		names = append(names, name)
		if celReserved.Has(name) || !memberName.MatchString(name) {
			errs = append(errs, field.Invalid(membersPath, name, "policy group member name is invalid"))
		}
		t := members[name].TimeoutEvalSeconds
		if t == nil {
			continue
		}
		sum += *t
		tp := membersPath.Key(name).Child("timeoutEvalSeconds")
		if *t > maxWebhookTimeoutSeconds {
			errs = append(errs, field.Invalid(tp, *t, fmt.Sprintf("timeoutEvalSeconds cannot be greater than %d (Kubernetes webhook max timeout)", maxWebhookTimeoutSeconds)))
		}
		if groupTimeout != nil && *t > *groupTimeout {
			errs = append(errs, field.Invalid(tp, *t, fmt.Sprintf("timeoutEvalSeconds cannot be greater than group timeoutSeconds (%d)", *groupTimeout)))
		}
	}
	if groupTimeout != nil && sum > *groupTimeout {
		errs = append(errs, field.Invalid(membersPath, sum, fmt.Sprintf("the sum of all members' timeoutEvalSeconds cannot be greater than group timeoutSeconds (%d)", *groupTimeout)))
	}
	if sum > maxWebhookTimeoutSeconds {
		errs = append(errs, field.Invalid(membersPath, sum, fmt.Sprintf("the sum of all members' timeoutEvalSeconds cannot be greater than %d (Kubernetes webhook max timeout)", maxWebhookTimeoutSeconds)))
	}

	exprPath := field.NewPath("spec", "expression")
	if g.GetExpression() == "" {
		errs = append(errs, field.Required(exprPath, "must be non-empty"))
	} else if _, err := groupexpr.Compile(g.GetExpression(), names); err != nil {
		errs = append(errs, field.Invalid(exprPath, g.GetExpression(), fmt.Sprintf("compilation failed: %v", err)))
	}
	if g.GetMessage() == "" {
		errs = append(errs, field.Required(field.NewPath("spec", "message"), "must be non-empty"))
	}
	return errs
}

// validatePolicyServer checks a PolicyServer. Its image pull Secret and
// sigstore trust ConfigMap are read from namespace through c.
func validatePolicyServer(ctx context.Context, c client.Reader, namespace string, ps *policiesv1.PolicyServer) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if len(ps.Name) > validation.DNS1035LabelMaxLength {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), ps.Name,
			fmt.Sprintf("the PolicyServer name cannot be longer than %d characters", validation.DNS1035LabelMaxLength)))
	}
	if ps.Spec.MinAvailable != nil && ps.Spec.MaxUnavailable != nil {
		errs = append(errs, field.Invalid(spec, fmt.Sprintf("minAvailable: %s, maxUnavailable: %s", ps.Spec.MinAvailable, ps.Spec.MaxUnavailable),
			"minAvailable and maxUnavailable cannot be both set"))
	}
	if name := ps.Spec.ImagePullSecret; name != "" {
		var secret corev1.Secret
		err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &secret)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(spec.Child("imagePullSecret"), name, fmt.Sprintf("cannot get spec.imagePullSecret: %v", err)))
		case secret.Type != corev1.SecretTypeDockerConfigJson:
			errs = append(errs, field.Invalid(spec.Child("imagePullSecret"), name,
				fmt.Sprintf("spec.imagePullSecret secret %q is not of type %s", name, corev1.SecretTypeDockerConfigJson)))
		}
	}
	if name := ps.Spec.SigstoreTrustConfig; name != "" {
		var cm corev1.ConfigMap
		err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &cm)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(spec.Child("sigstoreTrustConfig"), name, fmt.Sprintf("cannot get spec.sigstoreTrustConfig ConfigMap: %v", err)))
		case cm.Data[sigstoreTrustConfigKey] == "":
			errs = append(errs, field.Invalid(spec.Child("sigstoreTrustConfig"), name,
				fmt.Sprintf("spec.sigstoreTrustConfig ConfigMap %q does not contain required key %q", name, sigstoreTrustConfigKey)))
		}
	}
	errs = append(errs, validateResources(ps.Spec.Limits, ps.Spec.Requests)...)
	for i, pattern := range ps.Spec.NamespacedPoliciesCapabilities {
		if err := capabilities.Check(pattern); err != nil {
			errs = append(errs, field.Invalid(spec.Child("namespacedPoliciesCapabilities").Index(i), pattern, err.Error()))
		}
	}
	return errs
}

// validateResources checks that no quantity is negative and no request
// exceeds its limit.
func validateResources(limits, requests corev1.ResourceList) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	for name, q := range limits {
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(spec.Child("limits").Key(string(name)), q.String(), apivalidation.IsNegativeErrorMsg))
		}
	}
	for name, q := range requests {
		p := spec.Child("requests").Key(string(name))
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(p, q.String(), apivalidation.IsNegativeErrorMsg))
			continue
		}
		if limit, ok := limits[name]; ok && q.Cmp(limit) > 0 {
			errs = append(errs, field.Invalid(p, q.String(), fmt.Sprintf("must be less than or equal to %s limit of %s", name, limit.String())))
		}
	}
	return errs
}

// invalid is the error a webhook answers for errs about obj: 422 Invalid,
// with one cause per field error, as the API server's own validation.
func invalid(kind, name string, errs field.ErrorList) *apierrors.StatusError {
	return apierrors.NewInvalid(policiesv1.GroupVersion.WithKind(kind).GroupKind(), name, errs)
}
