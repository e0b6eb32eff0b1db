package wardenctl

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestTestCommand(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "objects/pod.yaml", podYAML)
	write(t, dir, "requests/forbidden.json", string(podReview(t, `{"forbidden": "yes"}`).RequestJSON()))
	write(t, dir, "requests/plain.json", string(podReview(t, `{"app": "web"}`).RequestJSON()))
	labels := policy(t, "labels")
	mutate := policy(t, "mutate-labels")

	passing := write(t, dir, "passing.yaml", fmt.Sprintf(`policy: %s
settings: {denied_labels: [forbidden]}
tests:
  - name: rejects a denied label
    request: requests/forbidden.json
    expect: {allowed: false, message: "label forbidden is denied"}
  - name: accepts a scaffolded pod
    object: objects/pod.yaml
    expect: {allowed: true, mutated: false}
  - name: its own settings
    object: objects/pod.yaml
    settings: {denied_labels: [app]}
    expect: {allowed: false, messageContains: "app is denied"}
  - name: invalid settings are refused
    request: requests/plain.json
    settings: {denied_labels: 3}
    expect: {allowed: false, message: "Policy settings are invalid: denied_labels must be a list of strings", code: 500}
`, labels))
	mutating := write(t, dir, "mutating.yaml", fmt.Sprintf(`policy: %s
tests:
  - name: adds the label
    request: requests/plain.json
    expect:
      allowed: true
      patch:
        - {op: add, path: /metadata/labels/warden.io~1mutated, value: "true"}
`, mutate))
	failing := write(t, dir, "failing.yaml", `policy: builtin://cel
settings:
  validations:
    - expression: "object.metadata.name != 'nginx'"
      message: "no nginx"
tests:
  - name: wrong verdict
    object: objects/pod.yaml
    expect: {allowed: true}
  - name: wrong message
    object: objects/pod.yaml
    expect: {allowed: false, message: "something else"}
  - name: right
    object: objects/pod.yaml
    expect: {allowed: false, message: "no nginx", mutated: false, patch: []}
  - name: wrong patch
    object: objects/pod.yaml
    expect: {patch: [{op: add, path: /x, value: 1}]}
`)
	tests := []struct {
		name  string
		args  []string
		code  int
		lines []string // regular expressions of lines of stdout
	}{
		{name: "passing suite", args: []string{passing}, lines: []string{
			`^CASE\s+RESULT\s+DETAIL$`,
			`^rejects a denied label\s+PASS$`, `^accepts a scaffolded pod\s+PASS$`, `^its own settings\s+PASS$`,
			`^invalid settings are refused\s+PASS$`, `^4 cases: 4 passed, 0 failed$`}},
		{name: "patch", args: []string{mutating}, lines: []string{`^adds the label\s+PASS$`}},
		{name: "failing suite", args: []string{passing, failing}, code: 1, lines: []string{
			`^wrong verdict\s+FAIL\s+allowed: want true, got false \("no nginx"\)$`,
			`^wrong message\s+FAIL\s+message: want "something else", got "no nginx"$`,
			`^right\s+PASS$`, `^wrong patch\s+FAIL\s+patch: want \[\{"op":"add","path":"/x","value":1\}\], got none$`,
			`^4 cases: 1 passed, 3 failed$`, `^4 cases: 4 passed, 0 failed$`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newEnv(t).run(append([]string{"test"}, tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s", r.code, tc.code, r)
			}
			if strings.Contains(r.stderr, "Error:") {
				t.Errorf("an error was printed\n%s", r)
			}
			for _, l := range tc.lines {
				if !regexp.MustCompile("(?m)" + l).MatchString(r.stdout) {
					t.Errorf("no line matches %s\n%s", l, r.stdout)
				}
			}
		})
	}
}

func TestTestCommandErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, suite, wantErr string
	}{
		{"unknown key", "policy: builtin://cel\ntests: [{name: a, object: x.yaml, expect: {alowed: true}}]\n", `unknown field "alowed"`},
		{"no tests", "policy: builtin://cel\n", "a suite needs a policy and at least one test"},
		{"no request", "policy: builtin://cel\ntests: [{name: a, expect: {allowed: true}}]\n", "a: a case needs request, or object"},
		{"missing file", "policy: builtin://cel\ntests: [{name: a, request: nope.json}]\n", "nope.json"},
		{"missing policy", "policy: nope.wasm\ntests: [{name: a, request: nope.json}]\n", "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			suite := write(t, dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml", tc.suite)
			r := newEnv(t).run("test", suite)
			if r.code != 1 {
				t.Fatalf("exit code %d, want 1\n%s", r.code, r)
			}
			checkError(t, r, "suite "+filepath.Join(dir, filepath.Base(suite))+": ")
			checkError(t, r, tc.wantErr)
		})
	}
}
