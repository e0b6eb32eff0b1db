package wardenctl

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/wardenhq/warden/internal/testkit"
)

// requireLabel is a ValidatingAdmissionPolicy whose param (a ConfigMap)
// names the label pods must carry; reasonLine is inserted under its
// validation (a reason, or nothing for the default Invalid).
func requireLabel(reasonLine string) string {
	return `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: require-label}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  validations:
  - expression: "has(object.metadata.labels) && params.data.label in object.metadata.labels"
    messageExpression: "'pods need the ' + params.data.label + ' label'"
` + reasonLine + `  auditAnnotations:
  - {key: checked, valueExpression: "'label ' + params.data.label"}
`
}

// requireLabelBinding binds requireLabel with validation actions (a YAML
// list) to the param team-label.
func requireLabelBinding(actions string) string {
	return `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: require-label-` + strings.ToLower(strings.Trim(actions, "[]")) + `}
spec:
  policyName: require-label
  validationActions: ` + actions + `
  paramRef: {name: team-label, namespace: policies, parameterNotFoundAction: Deny}
`
}

const (
	teamLabelParam = `apiVersion: v1
kind: ConfigMap
metadata: {name: team-label, namespace: policies}
data: {label: team}
`
	// addTeam is a MutatingAdmissionPolicy and its binding: pods get the
	// label team=unknown.
	addTeam = `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: add-team}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{labels: {'team': 'unknown'}}}"
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: add-team}
spec: {policyName: add-team}
`
)

// yamlDocs joins YAML documents into one file.
func yamlDocs(docs ...string) string { return strings.Join(docs, "---\n") }

// TestRunKubePolicy runs Kubernetes admission policies given as manifest
// files and as builtin://vap settings, and checks the AdmissionResponse
// printed: the API server's message and code, warnings, audit annotations
// and, for a MutatingAdmissionPolicy, the JSONPatch.
func TestRunKubePolicy(t *testing.T) {
	env := newEnv(t)
	dir := t.TempDir()
	unlabelled := requestFile(t, `{"app": "web"}`, false)
	labelled := requestFile(t, `{"team": "a"}`, true)
	// The API server words a denial so whatever its reason; the code
	// comes from the reason.
	const denied = `pods "nginx" is forbidden: ValidatingAdmissionPolicy 'require-label' with binding 'require-label-deny' denied request: pods need the team label`
	vapList := func() string {
		var items []any
		for _, d := range []string{requireLabel(""), requireLabelBinding("[Deny]"), teamLabelParam} {
			var o any
			if err := yaml.Unmarshal([]byte(d), &o); err != nil {
				t.Fatal(err)
			}
			items = append(items, o)
		}
		b, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	settings := func() string {
		var s map[string]any
		doc := "policy:\n" + indent(requireLabel("")) + "bindings:\n- " + indent(requireLabelBinding("[Deny]"))[2:] + "params:\n- " + indent(teamLabelParam)[2:]
		if err := yaml.Unmarshal([]byte(doc), &s); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	tests := []struct {
		name     string
		args     []string
		want     string // the AdmissionResponse, JSON
		wantWarn string // on stderr
	}{
		{name: "denied with the default reason Invalid: 422",
			args: []string{write(t, dir, "invalid.yaml", yamlDocs(requireLabel(""), requireLabelBinding("[Deny]"), teamLabelParam))},
			want: `{"uid":"u-1","allowed":false,"status":{"message":` + quote(denied) + `,"code":422},"auditAnnotations":{"require-label/checked":"label team"}}`},
		{name: "denied with reason Forbidden: 403",
			args: []string{write(t, dir, "forbidden.yaml", yamlDocs(requireLabel("    reason: Forbidden\n"), requireLabelBinding("[Deny]"), teamLabelParam))},
			want: `{"uid":"u-1","allowed":false,"status":{"message":` + quote(denied) + `,"code":403},"auditAnnotations":{"require-label/checked":"label team"}}`},
		{name: "a Warn binding warns and allows",
			args: []string{write(t, dir, "warn.yaml", yamlDocs(requireLabel(""), requireLabelBinding("[Warn]"), teamLabelParam))},
			want: `{"uid":"u-1","allowed":true,"auditAnnotations":{"require-label/checked":"label team"},` +
				`"warnings":["Validation failed for ValidatingAdmissionPolicy 'require-label' with binding 'require-label-warn': pods need the team label"]}`},
		{name: "a List in a JSON file",
			args: []string{write(t, dir, "list.json", vapList())},
			want: `{"uid":"u-1","allowed":false,"status":{"message":` + quote(denied) + `,"code":422},"auditAnnotations":{"require-label/checked":"label team"}}`},
		{name: "builtin://vap with --settings-json",
			args: []string{"--settings-json", settings(), "builtin://vap"},
			want: `{"uid":"u-1","allowed":false,"status":{"message":` + quote(denied) + `,"code":422},"auditAnnotations":{"require-label/checked":"label team"}}`},
		{name: "a MutatingAdmissionPolicy patches",
			args: []string{write(t, dir, "map.yaml", addTeam)},
			want: `{"uid":"u-1","allowed":true,"patchType":"JSONPatch","patch":` + quote(base64Of(`[{"value":"unknown","op":"add","path":"/metadata/labels/team"}]`)) + `}`},
		{name: "no binding: allowed, with a warning",
			args:     []string{write(t, dir, "unbound.yaml", yamlDocs(requireLabel(""), teamLabelParam))},
			want:     `{"uid":"u-1","allowed":true}`,
			wantWarn: `level=WARN msg="the policy has no binding: the API server evaluates it for no request, so every request is allowed; add a binding that names it" policy_id=require-label module=builtin://vap`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := env.run(append([]string{"run", "-r", unlabelled}, tc.args...)...)
			if r.code != 0 {
				t.Fatalf("%s", r)
			}
			if got := strings.TrimSpace(r.stdout); !testkit.JSONEqual(t, []byte(got), []byte(tc.want)) {
				t.Errorf("printed\n%s\nwant\n%s", got, tc.want)
			}
			if tc.wantWarn != "" && !strings.Contains(r.stderr, tc.wantWarn) {
				t.Errorf("stderr lacks %q:\n%s", tc.wantWarn, r.stderr)
			}
			if tc.wantWarn == "" && strings.Contains(r.stderr, "level=WARN") {
				t.Errorf("unexpected warning:\n%s", r.stderr)
			}
		})
	}

	t.Run("klog's lines show only with -v", func(t *testing.T) {
		pol := write(t, dir, "logs.yaml", yamlDocs(requireLabel(""), requireLabelBinding("[Deny]"), teamLabelParam))
		const line = `level=DEBUG msg="Caches are synced"`
		if r := env.run("-v", "run", "-r", unlabelled, pol); r.code != 0 || !strings.Contains(r.stderr, line) {
			t.Errorf("with -v, want %q on stderr: %s", line, r)
		}
		if r := env.run("run", "-r", unlabelled, pol); r.code != 0 || strings.Contains(r.stderr, "Caches are synced") {
			t.Errorf("without -v, want no klog line on stderr: %s", r)
		}
	})

	t.Run("a labelled pod is allowed", func(t *testing.T) {
		r := env.run("run", "-r", labelled, write(t, dir, "allowed.yaml", yamlDocs(requireLabel(""), requireLabelBinding("[Deny]"), teamLabelParam)))
		if r.code != 0 {
			t.Fatalf("%s", r)
		}
		if got := decodeResponses(t, r.stdout); len(got) != 1 || !got[0].Allowed {
			t.Errorf("got %s", r.stdout)
		}
	})
}

// TestRunKubePolicyFiles checks how run reads manifest files: what belongs
// to which policy, and what it refuses.
func TestRunKubePolicyFiles(t *testing.T) {
	env := newEnv(t)
	dir := t.TempDir()
	req := requestFile(t, `{"app": "web"}`, false)
	tests := []struct {
		name, doc string
		wantErr   string
	}{
		{name: "a binding of a policy the file lacks",
			doc:     yamlDocs(requireLabel(""), teamLabelParam, strings.Replace(requireLabelBinding("[Deny]"), "policyName: require-label", "policyName: other", 1)),
			wantErr: `reading bad.yaml: document 3: the ValidatingAdmissionPolicyBinding require-label-deny binds "other", and the file holds no ValidatingAdmissionPolicy of that name`},
		{name: "an object no policy uses",
			doc:     yamlDocs(requireLabel(""), requireLabelBinding("[Deny]"), teamLabelParam, podYAML),
			wantErr: "reading bad.yaml: document 4 is a v1 Pod, which no policy of the file uses"},
		{name: "a MutatingAdmissionPolicyBinding does not bind a ValidatingAdmissionPolicy",
			doc: yamlDocs(requireLabel(""), teamLabelParam, "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicyBinding\n"+
				"metadata: {name: b}\nspec: {policyName: require-label}\n"),
			wantErr: `document 3: the MutatingAdmissionPolicyBinding b binds "require-label", and the file holds no MutatingAdmissionPolicy of that name`},
		{name: "two policies of one name",
			doc:     yamlDocs(requireLabel(""), requireLabel("")),
			wantErr: "reading bad.yaml: document 2: a second ValidatingAdmissionPolicy named require-label (the first is document 1)"},
		{name: "objects without a policy",
			doc:     yamlDocs(requireLabelBinding("[Deny]"), teamLabelParam),
			wantErr: "reading bad.yaml: document 1 is a admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding, not a Kubewarden policy resource"},
		{name: "a policy the API server refuses",
			doc:     yamlDocs(strings.Replace(requireLabel(""), "params.data.label in object", "params.data.label in", 1), requireLabelBinding("[Deny]"), teamLabelParam),
			wantErr: `Policy settings are invalid: ValidatingAdmissionPolicy.admissionregistration.k8s.io "require-label" is invalid: spec.validations[0].expression: Invalid value:`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(dir)
			write(t, dir, "bad.yaml", tc.doc)
			r := env.run("run", "-r", req, "bad.yaml")
			if r.code == 0 {
				t.Fatalf("want a failure: %s", r)
			}
			checkError(t, r, tc.wantErr)
		})
	}
}

// TestScanKubePolicy scans manifests with a ValidatingAdmissionPolicy: a
// pod without the label is a violation, a pod with it and objects the
// policy does not match are not.
func TestScanKubePolicy(t *testing.T) {
	env := newEnv(t)
	dir := t.TempDir()
	pol := write(t, dir, "policy.yaml", yamlDocs(requireLabel(""), requireLabelBinding("[Deny]"), teamLabelParam))
	write(t, dir, "manifests/bad.yaml", podYAML)
	write(t, dir, "manifests/good.yaml", strings.Replace(podYAML, "app: web", "team: a", 1))
	write(t, dir, "manifests/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: default}\n")
	r := env.run("scan", "-p", pol, fileIn(dir, "manifests"))
	if r.code != 1 {
		t.Fatalf("want exit 1 for the violation: %s", r)
	}
	want := `pods "nginx" is forbidden: ValidatingAdmissionPolicy 'require-label' with binding 'require-label-deny' denied request: pods need the team label`
	if !strings.Contains(r.stdout, "manifests/bad.yaml") || !strings.Contains(r.stdout, want) || strings.Contains(r.stdout, "good.yaml") ||
		!strings.Contains(r.stdout, "3 objects, 1 policies, 3 evaluations: 1 violations") {
		t.Errorf("got\n%s", r.stdout)
	}
}

// TestTestKubePolicySuite runs suites whose policy is a manifest file: the
// cases' verdicts, messages, codes and patches are checked, a wrong
// expectation fails, and settings are refused.
func TestTestKubePolicySuite(t *testing.T) {
	env := newEnv(t)
	dir := t.TempDir()
	write(t, dir, "vap.yaml", yamlDocs(requireLabel("    reason: Forbidden\n"), requireLabelBinding("[Deny]"), teamLabelParam))
	write(t, dir, "map.yaml", addTeam)
	write(t, dir, "objects/web.yaml", podYAML)
	write(t, dir, "objects/team.yaml", strings.Replace(podYAML, "app: web", "team: a", 1))
	passing := write(t, dir, "passing.yaml", `policy: vap.yaml
tests:
- name: a pod without the label is denied
  object: objects/web.yaml
  expect: {allowed: false, code: 403, message: "pods \"nginx\" is forbidden: ValidatingAdmissionPolicy 'require-label' with binding 'require-label-deny' denied request: pods need the team label"}
- name: a pod with it is allowed
  object: objects/team.yaml
  expect: {allowed: true}
- name: deleting is not matched
  operation: DELETE
  oldObject: objects/web.yaml
  expect: {allowed: true}
`)
	mutating := write(t, dir, "mutating.yaml", `policy: map.yaml
tests:
- name: the label is added
  object: objects/web.yaml
  expect: {allowed: true, patch: [{op: add, path: /metadata/labels/team, value: unknown}]}
`)
	failing := write(t, dir, "failing.yaml", `policy: vap.yaml
tests:
- name: wrong code
  object: objects/web.yaml
  expect: {allowed: false, code: 422}
`)
	withSettings := write(t, dir, "settings.yaml", `policy: vap.yaml
tests:
- name: settings of its own
  object: objects/web.yaml
  settings: {}
  expect: {allowed: true}
`)

	r := env.run("test", passing, mutating)
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	for _, want := range []string{"passing.yaml (vap.yaml: require-label, builtin://vap)", "3 cases: 3 passed, 0 failed",
		"mutating.yaml (map.yaml: add-team, builtin://map)", "1 cases: 1 passed, 0 failed"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}

	r = env.run("test", failing)
	if r.code != 1 || !strings.Contains(r.stdout, "wrong code  FAIL    code: want 422, got 403") {
		t.Errorf("want the case to fail on its code: %s", r)
	}

	r = env.run("test", withSettings)
	checkError(t, r, "the settings of vap.yaml come from the file: remove settings from the suite and its cases")
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ") + "\n"
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func base64Of(s string) string {
	b, _ := json.Marshal([]byte(s))
	return strings.Trim(string(b), `"`)
}

func fileIn(dir, name string) string { return dir + "/" + name }
