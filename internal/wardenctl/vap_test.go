package wardenctl

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// A ValidatingAdmissionPolicy and its binding, as a cluster administrator
// writes them, for scaffold vap.
const (
	vapMaxReplicas = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: max-replicas
spec:
  failurePolicy: Fail
  matchConstraints:
    matchPolicy: Equivalent
    resourceRules:
      - apiGroups: ["apps"]
        apiVersions: ["v1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["deployments"]
    namespaceSelector:
      matchLabels: {team: platform}
  variables:
    - name: replicas
      expression: "object.spec.replicas"
  validations:
    - expression: "variables.replicas <= 5"
      message: "at most 5 replicas"
      reason: Invalid
`
	vapMaxReplicasBinding = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: max-replicas-binding
  labels: {app: demo}
spec:
  policyName: max-replicas
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchExpressions:
        - {key: environment, operator: In, values: [prod]}
      matchLabels: {team: platform}
`
	// The resource kwctl writes for them, in its field order.
	vapMaxReplicasResource = `apiVersion: policies.kubewarden.io/v1
kind: ClusterAdmissionPolicy
metadata:
  labels:
    app: demo
  name: max-replicas-binding
spec:
  module: ghcr.io/kubewarden/policies/cel-policy:v1.3.0
  settings:
    failurePolicy: Fail
    variables:
      - expression: object.spec.replicas
        name: replicas
    validations:
      - expression: variables.replicas <= 5
        message: at most 5 replicas
        reason: Invalid
  rules:
    - apiGroups:
        - apps
      apiVersions:
        - v1
      resources:
        - deployments
      operations:
        - CREATE
        - UPDATE
  mutating: false
  matchPolicy: Equivalent
  namespaceSelector:
    matchExpressions:
      - key: environment
        operator: In
        values:
          - prod
    matchLabels:
      team: platform
`

	vapParams = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replica-limit}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
      - {apiGroups: ["apps"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["deployments"]}
  validations:
    - expression: "object.spec.replicas <= int(params.data.maxReplicas)"
      messageExpression: "'at most ' + params.data.maxReplicas + ' replicas in ' + namespaceObject.metadata.name"
`
	vapParamsBinding = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: replica-limit-binding}
spec:
  policyName: replica-limit
  validationActions: [Deny]
  paramRef: {name: limits, namespace: default}
`
	vapParamsResource = `apiVersion: policies.kubewarden.io/v1
kind: ClusterAdmissionPolicy
metadata:
  name: replica-limit-binding
spec:
  module: registry://ghcr.io/kubewarden/policies/cel-policy:v1.3.0
  settings:
    paramKind:
      apiVersion: v1
      kind: ConfigMap
    paramRef:
      name: limits
      namespace: default
      parameterNotFoundAction: Deny
    validations:
      - expression: object.spec.replicas <= int(params.data.maxReplicas)
        messageExpression: '''at most '' + params.data.maxReplicas + '' replicas in '' + namespaceObject.metadata.name'
  rules:
    - apiGroups:
        - apps
      apiVersions:
        - v1
      resources:
        - deployments
      operations:
        - CREATE
  mutating: false
  contextAwareResources:
    - apiVersion: v1
      kind: ConfigMap
    - apiVersion: v1
      kind: Namespace
`
)

// TestScaffoldVAP converts policies and bindings into the resources kwctl
// writes, and checks the warnings that go with them.
func TestScaffoldVAP(t *testing.T) {
	tests := []struct {
		name             string
		policy, binding  string
		args             []string
		want             string
		warnings, absent []string
	}{
		{
			name: "validations, variables and selectors", policy: vapMaxReplicas, binding: vapMaxReplicasBinding,
			args: []string{"--cel-policy", "ghcr.io/kubewarden/policies/cel-policy:v1.3.0"},
			want: vapMaxReplicasResource, absent: []string{"WARN"},
		},
		{
			name: "params and namespaceObject are granted", policy: vapParams, binding: vapParamsBinding,
			args: []string{"--cel-policy", "registry://ghcr.io/kubewarden/policies/cel-policy:v1.3.0"},
			want: vapParamsResource,
			warnings: []string{
				"no parameterNotFoundAction: it is set to Deny",
				"granted v1/ConfigMap in contextAwareResources",
				"granted v1/Namespace in contextAwareResources",
			},
		},
		{
			name: "latest cel-policy", policy: vapMaxReplicas, binding: vapMaxReplicasBinding,
			warnings: []string{"cel-policy:latest is not pinned to a version"},
		},
		{
			name: "dropped fields", binding: vapMaxReplicasBinding,
			policy: strings.NewReplacer("spec:\n", `spec:
  auditAnnotations: [{key: replicas, valueExpression: "string(object.spec.replicas)"}]
  matchConditions: [{name: not-system, expression: "!request.userInfo.username.startsWith('system:')"}]
`, `resources: ["deployments"]`, `resources: ["deployments"]
        resourceNames: [web]
        scope: Namespaced`).Replace(vapMaxReplicas) + `    - expression: "kw.k8s.apiVersion('v1').kind('Secret').get('x') != null"`,
			warnings: []string{
				"auditAnnotations are dropped",
				"calls kw.k8s, and contextAwareResources is empty",
				"resourceRules[0].resourceNames are dropped", "resourceRules[0].scope is dropped",
			},
			absent: []string{"matchConditions"},
		},
		{
			name: "matchConditions are kept, with the failure policy", binding: vapMaxReplicasBinding,
			policy: strings.Replace(vapMaxReplicas, "spec:\n", `spec:
  matchConditions:
  - {name: not-system, expression: "!request.userInfo.username.startsWith('system:')"}
  - {name: labelled, expression: "has(object.metadata.labels) && authorizer.group('apps').resource('deployments').check('get').allowed()"}
`, 1),
			args: []string{"--cel-policy", "ghcr.io/kubewarden/policies/cel-policy:v1.3.0"},
			want: vapMaxReplicasResource + `  failurePolicy: Fail
  matchConditions:
    - expression: '!request.userInfo.username.startsWith(''system:'')'
      name: not-system
    - expression: has(object.metadata.labels) && authorizer.group('apps').resource('deployments').check('get').allowed()
      name: labelled
`,
			absent: []string{"WARN"},
		},
		{
			name: "audit-only binding", policy: vapMaxReplicas,
			binding:  strings.Replace(vapMaxReplicasBinding, "[Deny]", "[Warn, Audit]", 1),
			warnings: []string{"validationActions (Warn, Audit) are dropped"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p, b := write(t, dir, "vap.yaml", tc.policy), write(t, dir, "binding.yaml", tc.binding)
			r := newEnv(t).mustRun(append([]string{"scaffold", "vap", "-p", p, "-b", b}, tc.args...)...)
			if tc.want != "" && r.stdout != tc.want {
				t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, tc.want)
			}
			for _, w := range tc.warnings {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			for _, w := range tc.absent {
				if strings.Contains(r.stderr, w) {
					t.Errorf("stderr has %q:\n%s", w, r.stderr)
				}
			}
		})
	}
}

// TestScaffoldVAPRefused checks what scaffold vap refuses, and why.
func TestScaffoldVAPRefused(t *testing.T) {
	spec := func(s, old, new string) string { return strings.Replace(s, old, new, 1) }
	tests := []struct {
		name            string
		policy, binding string
		args            []string
		code            int
		want            string
	}{
		{name: "binding of another policy", policy: vapMaxReplicas, binding: spec(vapMaxReplicasBinding, "policyName: max-replicas", "policyName: other"),
			code: 1, want: `binds policy "other" (spec.policyName), not this ValidatingAdmissionPolicy, "max-replicas"`},
		{name: "binding without policyName", policy: vapMaxReplicas, binding: spec(vapMaxReplicasBinding, "policyName: max-replicas", ""),
			code: 1, want: "has no spec.policyName"},
		{name: "policy without name", policy: spec(vapMaxReplicas, "name: max-replicas", "labels: {}"), binding: vapMaxReplicasBinding,
			code: 1, want: "has no metadata.name"},
		{name: "policy without spec", policy: vapMaxReplicas[:strings.Index(vapMaxReplicas, "spec:")], binding: vapMaxReplicasBinding,
			code: 1, want: "has no spec"},
		{name: "paramKind without paramRef", policy: vapParams, binding: spec(vapParamsBinding, "paramRef: {name: limits, namespace: default}", ""),
			code: 1, want: "paramKind and the binding's paramRef go together"},
		{name: "paramRef without paramKind", policy: spec(vapParams, "paramKind: {apiVersion: v1, kind: ConfigMap}", ""), binding: vapParamsBinding,
			code: 1, want: "paramKind and the binding's paramRef go together"},
		{name: "policy excludeResourceRules", policy: spec(vapMaxReplicas, "matchPolicy: Equivalent", `excludeResourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]`),
			binding: vapMaxReplicasBinding, code: 1, want: "matchConstraints.excludeResourceRules cannot be converted"},
		{name: "binding excludeResourceRules", policy: vapMaxReplicas, binding: spec(vapMaxReplicasBinding, "matchResources:", `matchResources:
    excludeResourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]`),
			code: 1, want: "matchResources.excludeResourceRules cannot be converted"},
		{name: "binding resourceRules", policy: vapMaxReplicas, binding: spec(vapMaxReplicasBinding, "matchResources:", `matchResources:
    resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]`),
			code: 1, want: "matchResources.resourceRules cannot be converted"},
		{name: "matchPolicy differs", policy: vapMaxReplicas, binding: spec(vapMaxReplicasBinding, "matchResources:", `matchResources:
    matchPolicy: Exact`), code: 1, want: "matchPolicy, Exact, differs from the policy's matchConstraints.matchPolicy, Equivalent"},
		{name: "label values differ", policy: vapMaxReplicas, binding: spec(vapMaxReplicasBinding, "{team: platform}", "{team: apps}"),
			code: 1, want: "namespaceSelector: the ValidatingAdmissionPolicy requires label team=platform and the binding team=apps"},
		{name: "unknown operation", policy: spec(vapMaxReplicas, `["CREATE", "UPDATE"]`, `["CREATE", "PATCH"]`), binding: vapMaxReplicasBinding,
			code: 1, want: `resourceRules[0] into a rule: unknown operation "PATCH"`},
		{name: "binding given as policy", policy: vapMaxReplicasBinding, binding: vapMaxReplicasBinding,
			code: 1, want: "is not a ValidatingAdmissionPolicy: want apiVersion admissionregistration.k8s.io/v1 and kind ValidatingAdmissionPolicy"},
		{name: "wrong field type", policy: spec(vapMaxReplicas, "failurePolicy: Fail", "failurePolicy: [Fail]"), binding: vapMaxReplicasBinding,
			code: 1, want: "is not a valid ValidatingAdmissionPolicy"},
		{name: "two documents", policy: vapMaxReplicas + "---\n" + vapMaxReplicas, binding: vapMaxReplicasBinding,
			code: 1, want: "want one object, found 2 documents"},
		{name: "match condition reading params", policy: spec(vapParams, "spec:\n", "spec:\n  matchConditions: [{name: small, expression: \"params.data.maxReplicas != '0'\"}]\n"),
			binding: vapParamsBinding, code: 1,
			want: "spec.matchConditions[0] (small) cannot become the ClusterAdmissionPolicy's: the API server evaluates those for its webhook, with object, oldObject, request and authorizer only (no params, variables or namespaceObject): compilation failed: ERROR: <input>:1:1: undeclared reference to 'params'"},
		{name: "match condition reading a variable", policy: spec(vapMaxReplicas, "spec:\n", "spec:\n  matchConditions: [{name: few, expression: \"variables.replicas < 3\"}]\n"),
			binding: vapMaxReplicasBinding, code: 1, want: "undeclared reference to 'variables'"},
		{name: "match condition that is not a bool", policy: spec(vapMaxReplicas, "spec:\n", "spec:\n  matchConditions: [{name: str, expression: \"'yes'\"}]\n"),
			binding: vapMaxReplicasBinding, code: 1, want: "spec.matchConditions[0] (str) cannot become the ClusterAdmissionPolicy's"},
		{name: "match condition without name", policy: spec(vapMaxReplicas, "spec:\n", "spec:\n  matchConditions: [{expression: \"true\"}]\n"),
			binding: vapMaxReplicasBinding, code: 1, want: "spec.matchConditions[0] has no name"},
		{name: "match conditions of one name", policy: spec(vapMaxReplicas, "spec:\n", "spec:\n  matchConditions: [{name: a, expression: \"true\"}, {name: a, expression: \"false\"}]\n"),
			binding: vapMaxReplicasBinding, code: 1, want: "spec.matchConditions[1]: a second match condition named a"},
		{name: "compile to wasm", policy: vapMaxReplicas, binding: vapMaxReplicasBinding, args: []string{"--compile-to-wasm", "p.wasm"},
			code: 2, want: "--compile-to-wasm and -f/--force are not supported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p, b := write(t, dir, "vap.yaml", tc.policy), write(t, dir, "binding.yaml", tc.binding)
			r := newEnv(t).run(append([]string{"scaffold", "vap", "-p", p, "-b", b}, tc.args...)...)
			if r.code != tc.code || r.stdout != "" {
				t.Fatalf("exit %d with stdout, want %d and none:\n%s", r.code, tc.code, r)
			}
			checkError(t, r, tc.want)
		})
	}

	t.Run("flags", func(t *testing.T) {
		e := newEnv(t)
		checkError(t, e.run("scaffold", "vap", "-p", "vap.yaml"), "-b/--binding required")
		r := e.run("scaffold", "vap", "-p", filepath.Join(t.TempDir(), "missing.yaml"), "-b", "b.yaml")
		if r.code != 1 {
			t.Errorf("missing file: %s", r)
		}
		checkError(t, r, "missing.yaml")
	})
}

// TestScaffoldVAPRun evaluates the resource scaffold vap writes, with
// Warden's native cel-policy, as the policy server would.
func TestScaffoldVAPRun(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t)
	p, b := write(t, dir, "vap.yaml", vapMaxReplicas), write(t, dir, "binding.yaml", vapMaxReplicasBinding)
	res := write(t, dir, "policy.yaml", e.mustRun("scaffold", "vap", "-p", p, "-b", b, "--cel-policy", "builtin://cel").stdout)
	for _, tc := range []struct {
		replicas string
		want     string
	}{
		{"3", `"allowed":true`},
		{"7", `"allowed":false,"status":{"message":"at most 5 replicas"`},
	} {
		obj := write(t, dir, "deploy.yaml", `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec: {replicas: `+tc.replicas+`, selector: {matchLabels: {app: web}}, template: {metadata: {labels: {app: web}}, spec: {containers: [{name: web, image: "nginx:1.27"}]}}}
`)
		req := write(t, dir, "request.json", e.mustRun("scaffold", "admission-request", "-o", "CREATE", "--object", obj).stdout)
		if r := e.mustRun("run", "-r", req, res); !strings.Contains(r.stdout, tc.want) {
			t.Errorf("%s replicas: %s, want %s", tc.replicas, r.stdout, tc.want)
		}
	}
}

// TestCheckCELPolicyRef checks which modules scaffold vap warns about.
func TestCheckCELPolicyRef(t *testing.T) {
	digest := "@sha256:" + strings.Repeat("a", 64)
	tests := []struct {
		module string
		want   string // "" for no warning
	}{
		{"ghcr.io/kubewarden/policies/cel-policy:v1.3.0", ""},
		{"registry://ghcr.io/kubewarden/policies/cel-policy:v1.3.0", ""},
		{"ghcr.io/kubewarden/policies/cel-policy" + digest, ""},
		{"builtin://cel", ""},
		{"https://example.com/cel-policy.wasm", ""},
		{"ghcr.io/kubewarden/policies/cel-policy:latest", "is not pinned to a version"},
		{"ghcr.io/kubewarden/policies/cel-policy", "is not pinned to a version"},
		{"registry://ghcr.io/kubewarden/policies/cel-policy", "is not pinned to a version"},
		{"ghcr.io/Kubewarden/Cel Policy", "is not a valid OCI reference"},
	}
	for _, tc := range tests {
		t.Run(tc.module, func(t *testing.T) {
			var got []string
			checkCELPolicyRef(tc.module, func(format string, a ...any) { got = append(got, fmt.Sprintf(format, a...)) })
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("warnings %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("warnings %q, want one with %q", got, tc.want)
			}
		})
	}
}
