package wardenctl

import (
	"regexp"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/metadata"
)

func TestScan(t *testing.T) {
	dir := t.TempDir()
	manifests := dir + "/manifests"
	write(t, manifests, "app.yaml", `apiVersion: v1
kind: Pod
metadata: {name: good, namespace: shop, labels: {team: a}}
spec: {containers: [{name: c, image: "nginx:1.27"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: bad, namespace: shop, labels: {forbidden: "yes"}}
spec: {containers: [{name: c, image: "nginx:latest"}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, labels: {forbidden: "yes"}}
data: {a: b}
`)
	write(t, manifests, "list.json", `{"apiVersion":"v1","kind":"List","items":[
  {"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"}}]}`)
	write(t, manifests, "README.md", "not a manifest")
	clean := write(t, dir+"/clean", "pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: fine}\nspec: {containers: [{name: c, image: 'nginx:1.27'}]}\n")
	labels := policy(t, "labels")
	podsOnly := write(t, dir, "policies.yaml", `apiVersion: policies.kubewarden.io/v1
kind: ClusterAdmissionPolicy
metadata: {name: no-latest}
spec:
  module: builtin://cel
  rules: [{apiGroups: [""], apiVersions: [v1], resources: [pods], operations: [CREATE]}]
  settings:
    validations:
      - expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))"
        message: "images must not use the latest tag"
`)
	tests := []struct {
		name  string
		args  []string
		code  int
		lines []string
	}{
		{name: "violations", code: 1,
			args: []string{"-p", labels, "--settings-json", `{"denied_labels":["forbidden"]}`, "-p", podsOnly, manifests},
			lines: []string{
				`^SOURCE\s+OBJECT\s+POLICY\s+MESSAGE$`,
				`^\S+/app\.yaml#2\s+Pod shop/bad\s+labels\S*\s+label forbidden is denied$`,
				`^\S+/app\.yaml#2\s+Pod shop/bad\s+no-latest\s+images must not use the latest tag$`,
				`^\S+/app\.yaml#3\s+ConfigMap default/settings\s+labels\S*\s+label forbidden is denied$`,
				// 4 objects; labels sees them all, no-latest the 2 pods
				`^4 objects, 2 policies, 6 evaluations: 3 violations$`}},
		{name: "clean", args: []string{"--policy", podsOnly, clean}, lines: []string{`^1 objects, 1 policies, 1 evaluations: 0 violations$`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newEnv(t).run(append([]string{"scan"}, tc.args...)...)
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
	if r := newEnv(t).run("scan", manifests); r.code != 2 {
		t.Errorf("scan without --policy: %s", r)
	} else {
		checkError(t, r, "at least one --policy is required")
	}
}

func TestRulesMatch(t *testing.T) {
	pod := &admissionRequest{Kind: gvk{Version: "v1", Kind: "Pod"}, Resource: gvr{Version: "v1", Resource: "pods"}, Operation: "CREATE"}
	rule := func(groups, versions, resources, ops string) metadata.Rule {
		return metadata.Rule{APIGroups: strings.Split(groups, ","), APIVersions: strings.Split(versions, ","),
			Resources: strings.Split(resources, ","), Operations: strings.Split(ops, ",")}
	}
	tests := []struct {
		name  string
		rules []metadata.Rule
		want  bool
	}{
		{"no rules", nil, true},
		{"empty rules", []metadata.Rule{}, false},
		{"exact", []metadata.Rule{rule("", "v1", "pods", "CREATE")}, true},
		{"wildcards", []metadata.Rule{rule("*", "*", "*", "*")}, true},
		{"subresource wildcard", []metadata.Rule{rule("", "v1", "pods/*", "CREATE")}, true},
		{"subresource only", []metadata.Rule{rule("", "v1", "pods/status", "CREATE")}, false},
		{"other group", []metadata.Rule{rule("apps", "v1", "pods", "CREATE")}, false},
		{"other operation", []metadata.Rule{rule("", "v1", "pods", "UPDATE,DELETE")}, false},
		{"second rule matches", []metadata.Rule{rule("apps", "*", "*", "*"), rule("", "*", "pods", "*")}, true},
	}
	for _, tc := range tests {
		if got := rulesMatch(tc.rules, pod); got != tc.want {
			t.Errorf("%s: rulesMatch = %t, want %t", tc.name, got, tc.want)
		}
	}
}
