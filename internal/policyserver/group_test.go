package policyserver_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/admission/admissiontest"
)

const groupPolicies = `
labels-group:
  expression: "no_forbidden() && no_secret()"
  message: "the pod breaks the labels rules"
  policies:
    no_forbidden: {module: {labels}, settings: {denied_labels: [forbidden]}}
    no_secret: {module: {labels}, settings: {denied_labels: [secret]}}
either-group:
  expression: "no_forbidden() || no_secret()"
  message: "both rules are broken"
  policies:
    no_forbidden: {module: {labels}, settings: {denied_labels: [forbidden]}}
    no_secret: {module: {labels}, settings: {denied_labels: [secret]}}
mutating-group:
  expression: "mutate() && no_forbidden()"
  message: "rejected"
  policies:
    mutate: {module: {mutate-labels}}
    no_forbidden: {module: {labels}, settings: {denied_labels: [forbidden]}}
slow-group:
  expression: "slow() || no_forbidden()"
  message: "rejected"
  policies:
    slow: {module: {loop}, timeoutEvalSeconds: 1}
    no_forbidden: {module: {labels}, settings: {denied_labels: [forbidden]}}
monitor-group:
  policyMode: monitor
  expression: "no_forbidden()"
  message: "rejected"
  policies:
    no_forbidden: {module: {labels}, settings: {denied_labels: [forbidden]}}
`

func TestPolicyGroups(t *testing.T) {
	ts := startServer(t, testOptions(t, writePolicies(t, groupPolicies)))

	labels := func(keys ...string) map[string]string {
		m := map[string]string{"app": "web"}
		for _, k := range keys {
			m[k] = "yes"
		}
		return m
	}
	rejected := func(message string, causes ...admission.Cause) *admission.Status {
		return &admission.Status{Message: message, Details: &admission.StatusDetails{Causes: causes}}
	}
	cause := func(member, message string) admission.Cause {
		return admission.Cause{Field: "spec.policies." + member, Message: message}
	}
	const timeout = "Policy execution interrupted because it exceeded the allowed execution time"

	tests := []struct {
		name    string
		path    string
		labels  map[string]string
		allowed bool
		status  *admission.Status
	}{
		{"every member accepts", "/validate/labels-group", labels(), true, nil},
		{"the first member rejects and the second is not evaluated", "/validate/labels-group", labels("forbidden", "secret"), false,
			rejected("the pod breaks the labels rules", cause("no_forbidden", "label forbidden is denied"))},
		{"the second member rejects", "/validate/labels-group", labels("secret"), false,
			rejected("the pod breaks the labels rules", cause("no_secret", "label secret is denied"))},
		{"or accepts when one member accepts", "/validate/either-group", labels("secret"), true, nil},
		{"or rejects with every evaluated member as a cause", "/validate/either-group", labels("forbidden", "secret"), false,
			rejected("both rules are broken", cause("no_forbidden", "label forbidden is denied"), cause("no_secret", "label secret is denied"))},
		{"a member that mutates is a rejection", "/validate/mutating-group", labels(), false,
			rejected("rejected", cause("mutate", "mutation is not allowed inside of policy group"))},
		{"a member that times out is a rejection", "/validate/slow-group", labels(), true, nil},
		{"a timed-out member is a cause", "/validate/slow-group", labels("forbidden"), false,
			rejected("rejected", cause("no_forbidden", "label forbidden is denied"), cause("slow", timeout))},
		{"monitor mode accepts", "/validate/monitor-group", labels("forbidden"), true, nil},
		{"audit ignores monitor mode", "/audit/monitor-group", labels("forbidden"), false,
			rejected("rejected", cause("no_forbidden", "label forbidden is denied"))},
		{"a member is a policy of its own", "/validate/labels-group/no_secret", labels("secret"), false,
			&admission.Status{Message: "label secret is denied"}},
		{"a member runs without mutation", "/validate/mutating-group/mutate", labels(), false,
			&admission.Status{Message: "Request rejected by policy mutating-group/mutate. The policy attempted to mutate the request, but it is currently configured to not allow mutations."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.review(t, tt.path, admissiontest.New(admissiontest.WithUID("uid-1"), admissiontest.WithLabels(tt.labels)).JSON())
			if resp.UID != "uid-1" || resp.Allowed != tt.allowed || resp.Patch != nil {
				t.Errorf("got uid %q allowed %v patch %s, want allowed %v", resp.UID, resp.Allowed, resp.Patch, tt.allowed)
			}
			if !reflect.DeepEqual(resp.Status, tt.status) {
				got, _ := json.Marshal(resp.Status)
				want, _ := json.Marshal(tt.status)
				t.Errorf("status\n got  %s\n want %s", got, want)
			}
		})
	}
}
