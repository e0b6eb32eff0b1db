package policyserver_test

import (
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
)

const celPolicies = `
no-latest-images:
  module: builtin://cel
  settings:
    variables:
      - name: containers
        expression: "object.spec.containers"
    validations:
      - expression: "variables.containers.all(c, !c.image.endsWith(':latest'))"
        message: "images must not use the latest tag"
      - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
        messageExpression: "'pod ' + object.metadata.name + ' has no team label'"
        reason: Forbidden
kubewarden-cel-policy:
  module: registry://ghcr.io/kubewarden/policies/cel-policy:v1.3.0
  settings:
    validations:
      - expression: "object.metadata.name != 'forbidden'"
pod-hardening:
  expression: "trusted_team() || no_latest_tag()"
  message: "the pod does not follow the hardening rules"
  policies:
    trusted_team: {module: builtin://cel, settings: {validations: [{expression: "object.metadata.labels.team == 'platform'"}]}}
    no_latest_tag: {module: builtin://cel, settings: {validations: [{expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))"}]}}
`

func TestCELPolicies(t *testing.T) {
	ts := startServer(t, testOptions(t, writePolicies(t, celPolicies)))
	team := map[string]string{"team": "web"}
	tests := []struct {
		name, path string
		review     []byte
		allowed    bool
		message    string
		code       int32
	}{
		{"accepts", "/validate/no-latest-images", admissiontest.New(admissiontest.WithUID("uid-c"), admissiontest.WithName("web"), admissiontest.WithImage("nginx:1.27"), admissiontest.WithLabels(team)).JSON(), true, "", 0},
		{"message", "/validate/no-latest-images", admissiontest.New(admissiontest.WithUID("uid-c"), admissiontest.WithName("web"), admissiontest.WithImage("nginx:latest"), admissiontest.WithLabels(team)).JSON(), false, "images must not use the latest tag", 400},
		{"message expression and reason", "/validate/no-latest-images", admissiontest.New(admissiontest.WithUID("uid-c"), admissiontest.WithName("web"), admissiontest.WithImage("nginx:1.27"), admissiontest.WithLabels(map[string]string{"app": "web"})).JSON(), false, "pod web has no team label", 403},
		{"Kubewarden's cel-policy module runs natively", "/validate/kubewarden-cel-policy", admissiontest.New(admissiontest.WithUID("uid-c"), admissiontest.WithName("forbidden"), admissiontest.WithImage("nginx"), admissiontest.WithLabels(team)).JSON(), false,
			"failed expression: object.metadata.name != 'forbidden'", 400},
		{"group of CEL members accepts", "/validate/pod-hardening", admissiontest.New(admissiontest.WithUID("uid-c"), admissiontest.WithName("web"), admissiontest.WithImage("nginx:latest"), admissiontest.WithLabels(map[string]string{"team": "platform"})).JSON(), true, "", 0},
		{"group of CEL members rejects", "/validate/pod-hardening", admissiontest.New(admissiontest.WithUID("uid-c"), admissiontest.WithName("web"), admissiontest.WithImage("nginx:latest"), admissiontest.WithLabels(team)).JSON(), false, "the pod does not follow the hardening rules", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.review(t, tt.path, tt.review)
			var msg string
			var code int32
			if resp.Status != nil {
				msg, code = resp.Status.Message, resp.Status.Code
			}
			if resp.Allowed != tt.allowed || msg != tt.message || code != tt.code {
				t.Errorf("got allowed %v %q (%d), want allowed %v %q (%d)", resp.Allowed, msg, code, tt.allowed, tt.message, tt.code)
			}
		})
	}
}

func TestCELLoadErrors(t *testing.T) {
	const invalid = `policy "x": Policy settings are invalid: `
	tests := []struct {
		name, policies string
		want           []string // substrings of the error
	}{
		{"syntax error", "x: {module: builtin://cel, settings: {validations: [{expression: 'object.metadata.name =='}]}}", []string{invalid, "Syntax error"}},
		{"type error", "x: {module: builtin://cel, settings: {validations: [{expression: '1 + \"a\"'}]}}", []string{invalid, "no matching overload"}},
		{"no validations", "x: {module: builtin://cel, settings: {}}", []string{invalid, "validations must contain at least one item"}},
		{"cel-policy in wasm needs its module", "x: {module: 'registry://127.0.0.1:1/kubewarden/policies/cel-policy:v1.3.0'}", []string{"fetching registry://127.0.0.1:1/"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := startFailure(t, testOptions(t, writePolicies(t, tt.policies)))
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error = %v, want it to contain %q", err, want)
				}
			}
		})
	}
}
