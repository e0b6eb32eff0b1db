package engine

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/wasm"
)

// vapPolicies serves one ValidatingAdmissionPolicy four ways (protect,
// monitor, in a group, and granted namespace reads) and a
// MutatingAdmissionPolicy.
const vapPolicies = `
vap: &vap
  module: builtin://vap
  settings: &vapSettings
    policy:
      apiVersion: admissionregistration.k8s.io/v1
      kind: ValidatingAdmissionPolicy
      metadata: {name: team-label}
      spec:
        matchConstraints:
          resourceRules:
          - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
        validations:
        - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
          messageExpression: "'pod ' + object.metadata.name + ' needs a team label'"
          reason: Forbidden
        - expression: "!('frozen' in namespaceObject.metadata.labels)"
          message: "the namespace is frozen"
    bindings:
    - apiVersion: admissionregistration.k8s.io/v1
      kind: ValidatingAdmissionPolicyBinding
      metadata: {name: team-label}
      spec: {policyName: team-label, validationActions: [Deny]}
vap-monitor:
  <<: *vap
  policyMode: monitor
vap-live-namespaces:
  <<: *vap
  contextAwareResources: [{apiVersion: v1, kind: Namespace}]
  hostCapabilities: ["kubernetes/get_resource"]
group:
  expression: "team()"
  message: group says no
  policies:
    team: {module: builtin://vap, settings: *vapSettings}
map:
  module: builtin://map
  allowedToMutate: true
  settings:
    policy:
      apiVersion: admissionregistration.k8s.io/v1
      kind: MutatingAdmissionPolicy
      metadata: {name: team-default}
      spec:
        matchConstraints:
          resourceRules:
          - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
        reinvocationPolicy: Never
        mutations:
        - patchType: ApplyConfiguration
          applyConfiguration:
            expression: 'Object{metadata: Object.metadata{labels: {"team": "unassigned"}}}'
    bindings:
    - apiVersion: admissionregistration.k8s.io/v1
      kind: MutatingAdmissionPolicyBinding
      metadata: {name: team-default}
      spec: {policyName: team-default}
`

// namespaces answers kubernetes get_resource for v1 Namespaces: frozen
// exists, anything else does not.
type namespaces struct{}

func (namespaces) HostCall(_ context.Context, namespace, operation string, payload []byte) ([]byte, error) {
	var r struct{ Name string }
	if err := json.Unmarshal(payload, &r); err != nil || namespace != kubernetesNamespace || operation != "get_resource" {
		return nil, errors.New("unexpected host call")
	}
	if r.Name != "frozen" {
		return nil, errors.New("Cannot find v1/Namespace named '" + r.Name + "' inside of namespace 'None'")
	}
	return []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"frozen","labels":{"frozen":"true"}}}`), nil
}

func loadVAPEngine(t *testing.T) *Engine {
	t.Helper()
	configs, err := ParsePolicies([]byte(vapPolicies))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := wasm.NewRuntime(context.Background(), wasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	e, err := Load(context.Background(), configs, Options{Runtime: rt, HostCapabilities: namespaces{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

func TestKubePolicyModules(t *testing.T) {
	e := loadVAPEngine(t)
	labelled := admissiontest.WithLabels(map[string]string{"team": "a"})
	tests := []struct {
		name    string
		policy  string
		review  *admissiontest.Review
		allowed bool
		message string
		code    int32
		patch   string
	}{
		{name: "VAP accepts", policy: "vap", review: admissiontest.New(labelled), allowed: true},
		{name: "VAP denies with the API server's message and the code of its reason", policy: "vap", review: admissiontest.New(),
			message: `pods "nginx" is forbidden: ValidatingAdmissionPolicy 'team-label' with binding 'team-label' denied request: pod nginx needs a team label`, code: 403},
		{name: "VAP ignores what it does not match", policy: "vap", review: admissiontest.New(admissiontest.WithOperation("UPDATE"),
			admissiontest.WithOldObject(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"nginx"}}`)), allowed: true},
		{name: "monitor mode accepts", policy: "vap-monitor", review: admissiontest.New(), allowed: true},
		{name: "a VAP in a group", policy: "group", review: admissiontest.New(labelled), allowed: true},
		{name: "a VAP in a group denies", policy: "group", review: admissiontest.New(), message: "group says no", code: 0},
		{name: "namespaces assumed without namespace reads", policy: "vap", review: admissiontest.New(labelled, admissiontest.WithNamespace("frozen")), allowed: true},
		{name: "namespaces read through the host capability", policy: "vap-live-namespaces", review: admissiontest.New(labelled, admissiontest.WithNamespace("frozen")),
			message: `pods "nginx" is forbidden: ValidatingAdmissionPolicy 'team-label' with binding 'team-label' denied request: the namespace is frozen`, code: 422},
		{name: "a namespace the host capability does not find", policy: "vap-live-namespaces", review: admissiontest.New(labelled, admissiontest.WithNamespace("gone")),
			message: `namespaces "gone" not found`, code: 404},
		{name: "MAP mutates", policy: "map", review: admissiontest.New(), allowed: true, patch: `[{"op":"add","path":"/metadata/labels","value":{"team":"unassigned"}}]`},
		{name: "MAP finds nothing to change", policy: "map", review: admissiontest.New(admissiontest.WithLabels(map[string]string{"team": "unassigned"})), allowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.review.Decode(t)
			resp, err := e.Validate(context.Background(), tt.policy, req, OriginValidate)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Allowed != tt.allowed {
				t.Fatalf("allowed = %v, want %v (%+v)", resp.Allowed, tt.allowed, resp.Status)
			}
			if !tt.allowed && (resp.Status == nil || resp.Status.Message != tt.message || resp.Status.Code != tt.code) {
				t.Errorf("status = %+v, want %q %d", resp.Status, tt.message, tt.code)
			}
			if tt.patch == "" && resp.Patch != nil {
				t.Errorf("patch = %s, want none", resp.Patch)
			}
			if tt.patch != "" {
				var got, want any
				if err := json.Unmarshal(resp.Patch, &got); err != nil {
					t.Fatalf("patch %s: %v", resp.Patch, err)
				}
				_ = json.Unmarshal([]byte(tt.patch), &want)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("patch = %s, want %s", resp.Patch, tt.patch)
				}
			}
		})
	}
}

func TestKubePolicySettingsRefused(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{name: "a validation that does not compile",
			doc:  strings.Replace(vapPolicies, `"!('frozen' in namespaceObject.metadata.labels)"`, `"!(frozen in namespaceObject.metadata.labels)"`, 1),
			want: `Policy settings are invalid: ValidatingAdmissionPolicy.admissionregistration.k8s.io "team-label" is invalid: spec.validations[1].expression: Invalid value: "!(frozen in namespaceObject.metadata.labels)": compilation failed: ERROR: <input>:1:3: undeclared reference to 'frozen'`},
		{name: "a MAP served as builtin://vap",
			doc:  strings.Replace(vapPolicies, "  module: builtin://map", "  module: builtin://vap", 1),
			want: "Policy settings are invalid: builtin://vap serves a ValidatingAdmissionPolicy: the settings' policy is not one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			configs, err := ParsePolicies([]byte(tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			rt, err := wasm.NewRuntime(context.Background(), wasm.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = rt.Close(context.Background()) }()
			e, err := Load(context.Background(), configs, Options{Runtime: rt})
			if err == nil {
				e.Close(context.Background())
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v\nwant it to contain %s", err, tt.want)
			}
		})
	}
}
