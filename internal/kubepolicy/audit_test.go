package kubepolicy

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// vapAudit publishes an audit annotation, evaluates an expression that can
// fail, and asks the authorizer.
func vapAudit(failurePolicy string) string {
	return `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: cm-audit}
spec:
  failurePolicy: ` + failurePolicy + `
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  auditAnnotations:
  - key: owner
    valueExpression: "'owner is ' + object.data.owner"
  validations:
  - expression: "object.data.size == '1'"
  - expression: "authorizer.group('').resource('configmaps').namespace('default').check('delete').allowed()"
    message: "only those who may delete configmaps may create them"
    reason: RequestEntityTooLarge
`
}

// allowAlice allows alice everything and has no opinion on anyone else.
type allowAlice struct{}

func (allowAlice) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetUser().GetName() == "alice" {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func TestReviewAuditAndAuthorizer(t *testing.T) {
	withSize := map[string]any{"data": map[string]any{"owner": "me", "size": "1"}}
	noSize := map[string]any{"data": map[string]any{"owner": "me"}}
	tests := []struct {
		name    string
		policy  *Policy
		object  map[string]any
		allowed bool
		message string
		code    int32
	}{
		{name: "the authorizer allows", policy: load(t, Options{Authorizer: allowAlice{}}, vapAudit("Fail"), binding("b", "cm-audit", "Deny")),
			object: withSize, allowed: true},
		{name: "no authorizer: no opinion, not allowed; code of RequestEntityTooLarge", policy: load(t, Options{}, vapAudit("Fail"), binding("b", "cm-audit", "Deny")),
			object:  withSize,
			message: `configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'cm-audit' with binding 'b' denied request: only those who may delete configmaps may create them`, code: 413},
		{name: "an expression that fails, failurePolicy Fail", policy: load(t, Options{Authorizer: allowAlice{}}, vapAudit("Fail"), binding("b", "cm-audit", "Deny")),
			object:  noSize,
			message: `configmaps "cm" is forbidden: ValidatingAdmissionPolicy 'cm-audit' with binding 'b' denied request: expression 'object.data.size == '1'' resulted in error: no such key: size`, code: 422},
		{name: "an expression that fails, failurePolicy Ignore", policy: load(t, Options{Authorizer: allowAlice{}}, vapAudit("Ignore"), binding("b", "cm-audit", "Deny")),
			object: noSize, allowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := tt.policy.Review(context.Background(), request(admissionv1.Create, "default", tt.object))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Allowed != tt.allowed {
				t.Fatalf("allowed = %v, want %v (%v)", resp.Allowed, tt.allowed, resp.Result)
			}
			if !tt.allowed && (resp.Result.Message != tt.message || resp.Result.Code != tt.code) {
				t.Errorf("result = %q %d\nwant     %q %d", resp.Result.Message, resp.Result.Code, tt.message, tt.code)
			}
			// The policy's audit annotation, under its name, whatever the
			// verdict.
			if got := resp.AuditAnnotations["cm-audit/owner"]; got != "owner is me" {
				t.Errorf("audit annotations = %v", resp.AuditAnnotations)
			}
		})
	}
}
