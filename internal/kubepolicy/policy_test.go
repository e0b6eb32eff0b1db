package kubepolicy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// settingsOf joins YAML manifests into builtin://vap settings: the first is
// the policy; the others are bindings, params or namespaces by their kind.
func settingsOf(t testing.TB, docs ...string) []byte {
	t.Helper()
	s := map[string]any{}
	for i, d := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(d), &obj); err != nil {
			t.Fatal(err)
		}
		key := "params"
		switch kind, _ := obj["kind"].(string); {
		case i == 0:
			s["policy"] = obj
			continue
		case strings.HasSuffix(kind, "Binding"):
			key = "bindings"
		case kind == "Namespace":
			key = "namespaces"
		}
		list, _ := s[key].([]any)
		s[key] = append(list, obj)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func load(t *testing.T, opts Options, docs ...string) *Policy {
	t.Helper()
	p, err := Load(settingsOf(t, docs...), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// request is an AdmissionRequest for a v1 ConfigMap in namespace ns.
func request(op admissionv1.Operation, ns string, object map[string]any) *admissionv1.AdmissionRequest {
	obj := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "cm", "namespace": ns}}
	for k, v := range object {
		obj[k] = v
	}
	raw, _ := json.Marshal(obj)
	req := &admissionv1.AdmissionRequest{
		UID:       "uid-1",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		Name:      "cm",
		Namespace: ns,
		Operation: op,
		UserInfo:  authenticationUser("alice"),
	}
	if op == admissionv1.Delete {
		req.OldObject.Raw = raw
	} else {
		req.Object.Raw = raw
	}
	return req
}

const vapConfigMaps = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: cm-policy}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["configmaps"]
  validations:
  - expression: "has(object.data) && 'owner' in object.data"
    message: "an owner is required"
  - expression: "!has(object.data) || !('forbidden' in object.data)"
    reason: Forbidden
    messageExpression: "'key forbidden in ' + object.metadata.name"
  - expression: "!has(object.data) || !('broken' in object.data)"
    messageExpression: "object.data.missing + 'x'"
  - expression: "!has(object.data) || !('plain' in object.data)"
`

func binding(name, policy string, actions ...string) string {
	return `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: ` + name + `}
spec:
  policyName: ` + policy + `
  validationActions: [` + strings.Join(actions, ", ") + `]
`
}

func TestReviewVAP(t *testing.T) {
	deny := load(t, Options{}, vapConfigMaps, binding("cm-deny", "cm-policy", "Deny"))
	warn := load(t, Options{}, vapConfigMaps, binding("cm-warn", "cm-policy", "Warn", "Audit"))
	other := load(t, Options{}, vapConfigMaps, binding("elsewhere", "another-policy", "Deny"))
	tests := []struct {
		name     string
		policy   *Policy
		req      *admissionv1.AdmissionRequest
		allowed  bool
		message  string
		code     int32
		reason   metav1.StatusReason
		warnings []string
		audit    map[string]string
	}{
		{name: "valid", policy: deny, req: request(admissionv1.Create, "default", map[string]any{"data": map[string]any{"owner": "me"}}), allowed: true},
		{name: "message, default reason Invalid", policy: deny, req: request(admissionv1.Create, "default", nil),
			message: `configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'cm-policy' with binding 'cm-deny' denied request: an owner is required`,
			code:    422, reason: metav1.StatusReasonInvalid},
		{name: "messageExpression, reason Forbidden", policy: deny, req: request(admissionv1.Create, "default", map[string]any{"data": map[string]any{"owner": "me", "forbidden": "x"}}),
			message: `configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'cm-policy' with binding 'cm-deny' denied request: key forbidden in cm`,
			code:    403, reason: metav1.StatusReasonForbidden},
		{name: "failing messageExpression falls back to the expression", policy: deny, req: request(admissionv1.Update, "default", map[string]any{"data": map[string]any{"owner": "me", "broken": "x"}}),
			message: `configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'cm-policy' with binding 'cm-deny' denied request: failed expression: !has(object.data) || !('broken' in object.data)`,
			code:    422, reason: metav1.StatusReasonInvalid},
		{name: "no message: the expression", policy: deny, req: request(admissionv1.Create, "default", map[string]any{"data": map[string]any{"owner": "me", "plain": "x"}}),
			message: `configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'cm-policy' with binding 'cm-deny' denied request: failed expression: !has(object.data) || !('plain' in object.data)`,
			code:    422, reason: metav1.StatusReasonInvalid},
		{name: "operation outside matchConstraints", policy: deny, req: request(admissionv1.Delete, "default", nil), allowed: true},
		{name: "warn and audit", policy: warn, req: request(admissionv1.Create, "default", nil), allowed: true,
			warnings: []string{"Validation failed for ValidatingAdmissionPolicy 'cm-policy' with binding 'cm-warn': an owner is required"},
			audit:    map[string]string{"validation.policy.admission.k8s.io/validation_failure": `[{"message":"an owner is required","policy":"cm-policy","binding":"cm-warn","expressionIndex":0,"validationActions":["Warn","Audit"]}]`}},
		{name: "binding of another policy", policy: other, req: request(admissionv1.Create, "default", nil), allowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := tt.policy.Review(context.Background(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Allowed != tt.allowed {
				t.Fatalf("allowed = %v, want %v (%+v)", resp.Allowed, tt.allowed, resp.Result)
			}
			if resp.UID != tt.req.UID {
				t.Errorf("uid = %q", resp.UID)
			}
			if !tt.allowed {
				if resp.Result.Message != tt.message || resp.Result.Code != tt.code || resp.Result.Reason != tt.reason {
					t.Errorf("result = %q %d %s\nwant     %q %d %s", resp.Result.Message, resp.Result.Code, resp.Result.Reason, tt.message, tt.code, tt.reason)
				}
			}
			if strings.Join(resp.Warnings, "\n") != strings.Join(tt.warnings, "\n") {
				t.Errorf("warnings = %q, want %q", resp.Warnings, tt.warnings)
			}
			if len(resp.AuditAnnotations) != len(tt.audit) {
				t.Errorf("audit annotations = %v, want %v", resp.AuditAnnotations, tt.audit)
			}
			for k, v := range tt.audit {
				if resp.AuditAnnotations[k] != v {
					t.Errorf("audit annotation %s = %q, want %q", k, resp.AuditAnnotations[k], v)
				}
			}
		})
	}
}

func authenticationUser(name string) authenticationv1.UserInfo {
	return authenticationv1.UserInfo{Username: name}
}
