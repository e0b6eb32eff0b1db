package engine

import (
	"strings"
	"testing"
)

func TestParsePolicies(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		wantErr string
		check   func(t *testing.T, got map[string]*PolicyConfig)
	}{
		{
			name: "yaml single policy with every field",
			doc: `
pod-privileged:
  module: file:///tmp/policy.wasm
  policyMode: monitor
  allowedToMutate: true
  settings: {denied: [a]}
  contextAwareResources: [{apiVersion: v1, kind: Namespace}]
  message: custom
  timeoutEvalSeconds: 3
  hostCapabilities: ["oci/*"]
  namespacedName: {namespace: default, name: x}
`,
			check: func(t *testing.T, got map[string]*PolicyConfig) {
				p := got["pod-privileged"]
				if p.Mode() != ModeMonitor || !p.AllowedToMutate || p.Message != "custom" || *p.TimeoutEvalSeconds != 3 {
					t.Errorf("fields not decoded: %+v", p)
				}
				if string(p.Settings) != `{"denied":["a"]}` {
					t.Errorf("settings = %s", p.Settings)
				}
				if p.ContextAwareResources[0].Kind != "Namespace" || p.HostCapabilities[0] != "oci/*" || p.IsGroup() {
					t.Errorf("unexpected %+v", p)
				}
			},
		},
		{
			name: "json and default mode",
			doc:  `{"a": {"module": "file:///a.wasm"}}`,
			check: func(t *testing.T, got map[string]*PolicyConfig) {
				if got["a"].Mode() != ModeProtect || len(got["a"].Settings) != 0 {
					t.Errorf("unexpected %+v", got["a"])
				}
			},
		},
		{
			name: "group",
			doc: `
g:
  expression: "a() && b()"
  message: rejected
  policies:
    a: {module: "file:///a.wasm"}
    b: {module: "file:///b.wasm", settings: {x: 1}, timeoutEvalSeconds: 2}
`,
			check: func(t *testing.T, got map[string]*PolicyConfig) {
				if !got["g"].IsGroup() || len(got["g"].Policies) != 2 || string(got["g"].Policies["b"].Settings) != `{"x":1}` {
					t.Errorf("unexpected %+v", got["g"])
				}
			},
		},
		{name: "id with slash", doc: `"a/b": {module: "file:///a.wasm"}`, wantErr: "policy ids cannot contain '/'"},
		{name: "missing module", doc: `a: {settings: {}}`, wantErr: "module is required"},
		{name: "bad mode", doc: `a: {module: "file:///a", policyMode: enforce}`, wantErr: `a.policyMode: must be "protect" or "monitor", not "enforce"`},
		{name: "bad capability", doc: `a: {module: "file:///a", hostCapabilities: ["oci/v9/*"]}`, wantErr: `invalid host capability "oci/v9/*"`},
		{name: "zero timeout", doc: `a: {module: "file:///a", timeoutEvalSeconds: 0}`, wantErr: "a.timeoutEvalSeconds: must be positive"},
		{name: "not a map", doc: `[1, 2]`, wantErr: "must be a map of policy id to policy"},
		{name: "group member unknown field", doc: `g: {expression: "a()", message: m, policies: {a: {module: "file:///a", mode: x}}}`, wantErr: `g.policies.a.mode: unknown key of a group member`},
		{name: "group without message", doc: `g: {expression: "a()", policies: {a: {module: "file:///a"}}}`, wantErr: "needs expression, message and at least one member"},
		{name: "group with module", doc: `g: {module: "file:///x", expression: "a()", message: m, policies: {a: {module: "file:///a"}}}`, wantErr: "a policy group takes its modules"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePolicies([]byte(tt.doc))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, got)
		})
	}
}
