package kubepolicy

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// vapWithParams limits the keys of a ConfigMap to params.data.max; params
// are ConfigMaps too.
func vapWithParams(failurePolicy string) string {
	return `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: max-keys}
spec:
  failurePolicy: ` + failurePolicy + `
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: "!has(object.data) || object.data.size() <= int(params.data.max)"
    messageExpression: "'at most ' + params.data.max + ' keys (' + params.metadata.name + ')'"
`
}

func paramBinding(name, paramRef string) string {
	return `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: ` + name + `}
spec:
  policyName: max-keys
  validationActions: [Deny]
  paramRef: ` + paramRef + `
`
}

func configMapParam(name, ns, max string, labels string) string {
	return `
apiVersion: v1
kind: ConfigMap
metadata: {name: ` + name + `, namespace: ` + ns + `, labels: {` + labels + `}}
data: {max: "` + max + `"}
`
}

const forbiddenPrefix = `configmaps "cm" is forbidden: `

func TestReviewParams(t *testing.T) {
	threeKeys := map[string]any{"data": map[string]any{"a": "1", "b": "2", "c": "3"}}
	tests := []struct {
		name    string
		docs    []string
		allowed bool
		message string
	}{
		{name: "paramRef by name",
			docs:    []string{vapWithParams("Fail"), paramBinding("b", "{name: limits, parameterNotFoundAction: Deny}"), configMapParam("limits", "default", "2", "")},
			message: forbiddenPrefix + "ValidatingAdmissionPolicy 'max-keys' with binding 'b' denied request: at most 2 keys (limits)"},
		{name: "paramRef by name in another namespace",
			docs:    []string{vapWithParams("Fail"), paramBinding("b", "{name: limits, namespace: policies, parameterNotFoundAction: Deny}"), configMapParam("limits", "policies", "5", "")},
			allowed: true},
		{name: "paramRef by selector, every param is checked",
			docs: []string{vapWithParams("Fail"), paramBinding("b", "{selector: {matchLabels: {tier: limits}}, parameterNotFoundAction: Deny}"),
				configMapParam("loose", "default", "9", "tier: limits"), configMapParam("strict", "default", "1", "tier: limits"), configMapParam("ignored", "default", "0", "tier: other")},
			message: forbiddenPrefix + "ValidatingAdmissionPolicy 'max-keys' with binding 'b' denied request: at most 1 keys (strict)"},
		{name: "missing param, parameterNotFoundAction Deny",
			docs:    []string{vapWithParams("Fail"), paramBinding("b", "{name: limits, parameterNotFoundAction: Deny}")},
			message: forbiddenPrefix + "ValidatingAdmissionPolicy 'max-keys' with binding 'b' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"},
		{name: "missing param, parameterNotFoundAction Deny, failurePolicy Ignore",
			docs:    []string{vapWithParams("Ignore"), paramBinding("b", "{name: limits, parameterNotFoundAction: Deny}")},
			allowed: true},
		{name: "missing param, parameterNotFoundAction Allow",
			docs:    []string{vapWithParams("Fail"), paramBinding("b", "{name: limits, parameterNotFoundAction: Allow}")},
			allowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := load(t, Options{}, tt.docs...)
			resp, err := p.Review(context.Background(), request(admissionv1.Create, "default", threeKeys))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Allowed != tt.allowed {
				t.Fatalf("allowed = %v, want %v (%v)", resp.Allowed, tt.allowed, resp.Result)
			}
			if !tt.allowed && (resp.Result.Message != tt.message || resp.Result.Code != 422 || resp.Result.Reason != metav1.StatusReasonInvalid) {
				t.Errorf("result = %q %d %s\nwant     %q 422 Invalid", resp.Result.Message, resp.Result.Code, resp.Result.Reason, tt.message)
			}
		})
	}
}

const vapNamespaces = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: prod-owner}
spec:
  matchConstraints:
    namespaceSelector: {matchExpressions: [{key: env, operator: Exists}]}
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  matchConditions:
  - name: not-exempt
    expression: "!has(object.metadata.labels) || !('exempt' in object.metadata.labels)"
  validations:
  - expression: "namespaceObject.metadata.labels.env != 'prod' || (has(object.data) && 'owner' in object.data)"
    messageExpression: "'an owner is required in ' + namespaceObject.metadata.name"
`

func TestReviewNamespaces(t *testing.T) {
	const prod = `
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {env: prod}}
`
	fromSettings := load(t, Options{}, vapNamespaces, binding("b", "prod-owner", "Deny"), prod)
	live := load(t, Options{Namespace: func(_ context.Context, name string) (*corev1.Namespace, error) {
		if name != "billing" {
			return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
		}
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"env": "prod"}}}, nil
	}}, vapNamespaces, binding("b", "prod-owner", "Deny"))
	tests := []struct {
		name    string
		policy  *Policy
		ns      string
		labels  map[string]any
		allowed bool
		message string
		code    int32
	}{
		{name: "namespace from the settings", policy: fromSettings, ns: "shop",
			message: `configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'prod-owner' with binding 'b' denied request: an owner is required in shop`, code: 422},
		{name: "matchConditions exclude the object", policy: fromSettings, ns: "shop", labels: map[string]any{"exempt": "yes"}, allowed: true},
		{name: "namespaceSelector does not match an assumed namespace", policy: fromSettings, ns: "dev", allowed: true},
		{name: "namespace from the live source", policy: live, ns: "billing",
			message: `configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'prod-owner' with binding 'b' denied request: an owner is required in billing`, code: 422},
		{name: "namespace the live source does not have", policy: live, ns: "gone",
			// The namespaceSelector cannot be evaluated: a configuration
			// error of the policy, denied under failurePolicy Fail.
			message: `configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'prod-owner' denied request: failed to configure policy: namespaces "gone" not found`, code: 422},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := map[string]any{"name": "cm", "namespace": tt.ns}
			if tt.labels != nil {
				md["labels"] = tt.labels
			}
			obj := map[string]any{"metadata": md}
			resp, err := tt.policy.Review(context.Background(), request(admissionv1.Create, tt.ns, obj))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Allowed != tt.allowed {
				t.Fatalf("allowed = %v, want %v (%v)", resp.Allowed, tt.allowed, resp.Result)
			}
			if !tt.allowed && (resp.Result.Message != tt.message || resp.Result.Code != tt.code) {
				t.Errorf("result = %q %d, want %q %d", resp.Result.Message, resp.Result.Code, tt.message, tt.code)
			}
		})
	}
}

func TestLoadRefuses(t *testing.T) {
	tests := []struct {
		name string
		docs []string
		want string
	}{
		{name: "validation that does not compile", docs: []string{strings.Replace(vapConfigMaps, `"has(object.data) && 'owner' in object.data"`, `"object.data == missingVar"`, 1)},
			want: `ValidatingAdmissionPolicy.admissionregistration.k8s.io "cm-policy" is invalid: spec.validations[0].expression: Invalid value: "object.data == missingVar": compilation failed: ERROR: <input>:1:16: undeclared reference to 'missingVar' (in container '')`},
		{name: "matchCondition that does not compile", docs: []string{strings.Replace(vapNamespaces, `"!has(object.metadata.labels) || !('exempt' in object.metadata.labels)"`, `"object.metadata.labels.exempt"`, 1)},
			want: `ValidatingAdmissionPolicy.admissionregistration.k8s.io "prod-owner" is invalid: spec.matchConditions[0].expression: Invalid value: "object.metadata.labels.exempt": must evaluate to bool`},
		{name: "messageExpression that reads the authorizer", docs: []string{strings.Replace(vapConfigMaps, `"object.data.missing + 'x'"`, `"authorizer.group('').resource('pods').check('get').reason()"`, 1)},
			want: `ValidatingAdmissionPolicy.admissionregistration.k8s.io "cm-policy" is invalid: spec.validations[2].messageExpression: Invalid value: "authorizer.group('').resource('pods').check('get').reason()": compilation failed: ERROR: <input>:1:1: undeclared reference to 'authorizer' (in container '')`},
		{name: "resource rule without operations", docs: []string{strings.Replace(vapConfigMaps, `      operations: ["CREATE", "UPDATE"]
`, "", 1)},
			want: `ValidatingAdmissionPolicy.admissionregistration.k8s.io "cm-policy" is invalid: spec.matchConstraints.resourceRules[0].operations: Required value`},
		{name: "binding without validationActions", docs: []string{vapConfigMaps, binding("b", "cm-policy")},
			want: `ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io "b" is invalid: spec.validationActions: Required value: at least one validation action is required`},
		{name: "binding with Deny and Warn", docs: []string{vapConfigMaps, binding("b", "cm-policy", "Deny", "Warn")},
			want: `ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io "b" is invalid: spec.validationActions: Invalid value: ["Deny","Warn"]: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)`},
		{name: "paramRef without parameterNotFoundAction", docs: []string{vapWithParams("Fail"), paramBinding("b", "{name: limits}")},
			want: `ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io "b" is invalid: spec.paramRef.parameterNotFoundAction: Required value`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Load(settingsOf(t, tt.docs...), Options{})
			if err == nil {
				p.Close()
				t.Fatal("loaded")
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error:\n%s\nwant a first line of\n%s", err, tt.want)
			}
		})
	}
}
