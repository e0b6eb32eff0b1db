//go:build cluster

package cluster_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/wardenhq/warden/internal/policybuild"
)

// vapSources are the directories the differential test's cases come from.
// A directory of a module is read from the module cache at the version
// hack/vap-corpus/go.mod pins; one of testdata/vapdiff is Warden's own.
// hack/vap-corpus/README.md says what each holds and how it is read.
var vapSources = []vapSource{
	// Kyverno's CLI tests of Kubernetes policies: a policy, the objects its
	// kyverno-test.yaml expects to pass and to fail, params, namespace
	// labels (values.yaml) and the requesting user (userinfo.yaml).
	{module: "github.com/kyverno/kyverno", dirs: kyvernoDirs("test/cli/test-validating-admission-policy",
		"check-deployment-labels", "check-deployments-replica", "check-user-info", "disallow-host-path", "match-namespaces",
		"with-bindings-1", "with-bindings-2", "with-bindings-3", "with-bindings-4", "with-match-conditions",
		"with-namespaceObject-1", "with-namespaceObject-2", "with-params")},
	{module: "github.com/kyverno/kyverno", dirs: kyvernoDirs("test/cli/test-mutating-admission-policy",
		"check-user-info", "mutate-namespace", "specify-namespace-selector", "specify-object-selector", "specify-resource-name",
		"with-apply-configuration", "with-binding-exclude-resources", "with-binding-match-resources",
		"with-binding-namespace-selector", "with-binding-object-selector", "with-json-patch", "with-match-conditions",
		"with-params", "with-two-params")},
	// Kyverno's conformance tests of its reports on Kubernetes policies:
	// a policy, its binding, the namespace and the object of each chainsaw
	// test (the *-assert.yaml files and the reports are expectations).
	{module: "github.com/kyverno/kyverno", dirs: kyvernoDirs("test/conformance/chainsaw/validating-admission-policy-reports/background",
		"validating-admission-policy-fail", "validating-admission-policy-pass", "validating-admission-policy-userinfo",
		"with-validating-admission-policy-binding-fail", "with-validating-admission-policy-binding-no-reports",
		"with-validating-admission-policy-binding-pass")},
	{module: "github.com/kyverno/kyverno", dirs: kyvernoDirs("test/conformance/chainsaw/cli/apply",
		"apply-vaps-in-cluster-mode", "apply-map-paramref", "apply-maps-in-cluster-mode")},
	// Kubernetes' own policies, from its end-to-end tests and examples,
	// with objects, users and namespaces of Warden's (testdata/vapdiff).
	{dirs: []string{"kubernetes-per-node-configmaps", "kubernetes-dra-resourceslices"}},
	// Warden's own cases: MutatingAdmissionPolicy and bad input.
	{dirs: []string{"map-json-patch", "map-apply-configuration", "map-patch-fails", "vap-does-not-compile",
		"vap-binding-to-missing-policy", "vap-missing-param", "vap-audit-annotations-and-reason"}},
}

// vapSource is a module of hack/vap-corpus (empty: testdata/vapdiff) and
// directories in it, each read by readVAPCases.
type vapSource struct {
	module string
	dirs   []string
}

func kyvernoDirs(parent string, names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = parent + "/" + n
	}
	return out
}

// vapCase is one policy of the corpus, with its bindings, the objects sent
// to it and what they need in the cluster.
type vapCase struct {
	// name says where the case comes from: module@version/dir/policy.
	name string
	// label is the value of vapCaseLabel on the case's objects and in its
	// bindings' objectSelector, which keeps the cases of one round apart.
	label    string
	policy   *unstructured.Unstructured
	mutating bool
	bindings []*unstructured.Unstructured
	// madeBinding: the source has no binding (Kyverno's CLI applies a
	// policy without one); the test binds it with validationActions Deny.
	madeBinding bool
	params      []*unstructured.Unstructured
	// namespaces are the namespaces the case's objects use and those the
	// source gives labels for, with those labels (nil: none of its own).
	namespaces map[string]map[string]string
	// user makes the requests, impersonated; nil: the test's administrator.
	user    *authenticationv1.UserInfo
	objects []*unstructured.Unstructured
}

// vapCaseLabel is the label that gives each case's objects to its own
// bindings only.
const vapCaseLabel = "vapdiff.wardenhq.io/case"

// vapModuleDirs returns the module cache directory of each module that
// hack/vap-corpus pins, downloading what is missing, and the version.
func vapModuleDirs(t *testing.T) map[string][2]string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json")
	cmd.Dir = filepath.Join(policybuild.RepoRootForTest(t), "hack", "vap-corpus")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("finding the corpus modules of hack/vap-corpus: %v\n%s", err, out)
	}
	dirs := map[string][2]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var m struct{ Path, Version, Dir, Error string }
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil || m.Error != "" || m.Dir == "" {
			t.Fatalf("finding the corpus modules of hack/vap-corpus: %v %s\n%s", err, m.Error, out)
		}
		dirs[m.Path] = [2]string{m.Dir, m.Version}
	}
	return dirs
}

// loadVAPCorpus reads every case of vapSources.
func loadVAPCorpus(t *testing.T) []*vapCase {
	t.Helper()
	modules := vapModuleDirs(t)
	var cases []*vapCase
	for _, src := range vapSources {
		for _, dir := range src.dirs {
			root, prefix := filepath.Join("testdata", "vapdiff"), "testdata/vapdiff"
			if src.module != "" {
				m, ok := modules[src.module]
				if !ok {
					t.Fatalf("hack/vap-corpus does not pin %s", src.module)
				}
				root, prefix = m[0], src.module+"@"+m[1]
			}
			cs, err := readVAPCases(filepath.Join(root, dir), prefix+"/"+dir, modules)
			if err != nil {
				t.Fatalf("reading %s/%s: %v", prefix, dir, err)
			}
			cases = append(cases, cs...)
		}
	}
	for i, c := range cases {
		c.label = fmt.Sprintf("c%d", i)
	}
	return cases
}

// vapIgnoredFiles are the files of a directory that hold expectations or
// test drivers, not input: Kyverno's patched resources, chainsaw's asserts
// and reports.
func vapIgnoredFile(name string) bool {
	return strings.HasPrefix(name, "patched-resource") || strings.HasSuffix(name, "-assert.yaml") ||
		strings.HasPrefix(name, "report") || strings.HasPrefix(name, "policy-event") || name == "chainsaw-test.yaml"
}

// readVAPCases reads the YAML files of dir (and, for a testdata directory,
// the module files its include.yaml names) and returns one case per
// policy. Documents are sorted by kind: policies and bindings
// (admissionregistration.k8s.io, any version, read as v1), Kyverno's Value
// (namespace labels) and UserInfo, Namespaces (labels, or objects when a
// policy matches namespaces), params (the kind of a policy's paramKind),
// and the objects sent, everything else but Kyverno's and chainsaw's own
// kinds.
func readVAPCases(dir, name string, modules map[string][2]string) ([]*vapCase, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if n := e.Name(); !e.IsDir() && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) && !vapIgnoredFile(n) && n != "include.yaml" {
			files = append(files, filepath.Join(dir, n))
		}
	}
	var docs []*unstructured.Unstructured
	if inc, err := os.ReadFile(filepath.Join(dir, "include.yaml")); err == nil {
		var include struct {
			Module string   `json:"module"`
			Files  []string `json:"files"`
		}
		if err := yaml.UnmarshalStrict(inc, &include); err != nil {
			return nil, fmt.Errorf("include.yaml: %w", err)
		}
		m, ok := modules[include.Module]
		if !ok {
			return nil, fmt.Errorf("include.yaml: hack/vap-corpus does not pin %s", include.Module)
		}
		name = include.Module + "@" + m[1] + "/{" + strings.Join(include.Files, ",") + "} with " + name
		// Only the policies and bindings of an included file are taken.
		for _, f := range include.Files {
			ds, err := readYAMLDocs(filepath.Join(m[0], f))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			for _, d := range ds {
				if strings.HasPrefix(d.GetAPIVersion(), "admissionregistration.k8s.io/") {
					docs = append(docs, d)
				}
			}
		}
	}
	// objectFiles holds the documents of files that hold only objects to
	// send, even of a paramKind's kind.
	objectFiles := map[*unstructured.Unstructured]bool{}
	for _, f := range files {
		ds, err := readYAMLDocs(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		base := filepath.Base(f)
		for _, d := range ds {
			objectFiles[d] = base == "objects.yaml" || strings.HasPrefix(base, "resource")
		}
		docs = append(docs, ds...)
	}

	var policies, bindings, namespaceDocs []*unstructured.Unstructured
	var rest []*unstructured.Unstructured
	labels := map[string]map[string]string{}
	var user *authenticationv1.UserInfo
	for _, d := range docs {
		gv, kind := d.GetAPIVersion(), d.GetKind()
		switch {
		case strings.HasPrefix(gv, "admissionregistration.k8s.io/"):
			d.SetAPIVersion("admissionregistration.k8s.io/v1")
			if strings.HasSuffix(kind, "Binding") {
				bindings = append(bindings, d)
			} else {
				policies = append(policies, d)
			}
		case gv == "cli.kyverno.io/v1alpha1" && kind == "Value":
			var v struct {
				NamespaceSelector []struct {
					Name   string            `json:"name"`
					Labels map[string]string `json:"labels"`
				} `json:"namespaceSelector"`
			}
			if err := fromUnstructured(d, &v); err != nil {
				return nil, err
			}
			for _, ns := range v.NamespaceSelector {
				labels[ns.Name] = ns.Labels
			}
		case (gv == "cli.kyverno.io/v1alpha1" || gv == "vapdiff.wardenhq.io/v1") && kind == "UserInfo":
			var v struct {
				UserInfo authenticationv1.UserInfo `json:"userInfo"`
			}
			if err := fromUnstructured(d, &v); err != nil {
				return nil, err
			}
			user = &v.UserInfo
		case strings.Contains(gv, "kyverno.io/") || strings.Contains(gv, "wgpolicyk8s.io/") || strings.Contains(gv, "openreports.io/"):
			// Kyverno's own policies and tests, and reports.
		case gv == "v1" && kind == "Namespace":
			namespaceDocs = append(namespaceDocs, d)
		default:
			rest = append(rest, d)
		}
	}
	if len(policies) == 0 {
		return nil, errors.New("no ValidatingAdmissionPolicy or MutatingAdmissionPolicy")
	}

	var cases []*vapCase
	for _, p := range policies {
		c := &vapCase{name: name + "/" + p.GetName(), policy: p, mutating: p.GetKind() == "MutatingAdmissionPolicy", user: user,
			namespaces: map[string]map[string]string{}}
		policyNames := map[string]bool{}
		for _, q := range policies {
			policyNames[q.GetName()] = true
		}
		for _, b := range bindings {
			// A binding to a policy the directory lacks goes with every
			// policy: the API server keeps it and binds nothing.
			if pn, _, _ := unstructured.NestedString(b.Object, "spec", "policyName"); pn == p.GetName() || !policyNames[pn] {
				c.bindings = append(c.bindings, b.DeepCopy())
			}
		}
		if len(bindings) == 0 {
			c.madeBinding = true
			c.bindings = []*unstructured.Unstructured{madeBinding(p)}
		}
		paramKind, _, _ := unstructured.NestedStringMap(p.Object, "spec", "paramKind")
		matchesNamespaces := policyMatchesNamespaces(p)
		for _, d := range rest {
			if paramKind != nil && d.GetAPIVersion() == paramKind["apiVersion"] && d.GetKind() == paramKind["kind"] && !objectFiles[d] {
				c.params = append(c.params, d.DeepCopy())
			} else {
				c.objects = append(c.objects, d.DeepCopy())
			}
		}
		for _, ns := range namespaceDocs {
			if matchesNamespaces {
				c.objects = append(c.objects, ns.DeepCopy())
			} else {
				c.namespaces[ns.GetName()] = ns.GetLabels()
			}
		}
		for n, l := range labels {
			c.namespaces[n] = l
		}
		for _, o := range append(slices.Clone(c.objects), c.params...) {
			if o.GetKind() != "Namespace" && o.GetNamespace() == "" && vapNamespaced(o) {
				o.SetNamespace("default")
			}
			if ns := o.GetNamespace(); ns != "" {
				if _, ok := c.namespaces[ns]; !ok {
					c.namespaces[ns] = nil
				}
			}
		}
		if len(c.objects) == 0 {
			return nil, fmt.Errorf("policy %s: no object to send", p.GetName())
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// madeBinding binds p to every object it matches, with Deny.
func madeBinding(p *unstructured.Unstructured) *unstructured.Unstructured {
	spec := map[string]any{"policyName": p.GetName()}
	if p.GetKind() == "ValidatingAdmissionPolicy" {
		spec["validationActions"] = []any{"Deny"}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": p.GetKind() + "Binding",
		"metadata": map[string]any{"name": p.GetName() + "-vapdiff"}, "spec": spec,
	}}
}

// policyMatchesNamespaces reports whether p's resource rules name
// namespaces, so that the Namespaces beside it are objects to send.
func policyMatchesNamespaces(p *unstructured.Unstructured) bool {
	rules, _, _ := unstructured.NestedSlice(p.Object, "spec", "matchConstraints", "resourceRules")
	for _, r := range rules {
		res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
		if slices.Contains(res, "namespaces") || slices.Contains(res, "*") {
			return true
		}
	}
	return false
}

// vapClusterScoped are the cluster-scoped kinds the corpus sends; every
// other kind is namespaced.
var vapClusterScoped = []string{"Namespace", "ResourceSlice", "ClusterRole", "Node", "PersistentVolume"}

func vapNamespaced(o *unstructured.Unstructured) bool {
	return !slices.Contains(vapClusterScoped, o.GetKind())
}

// readYAMLDocs returns the objects of a YAML (or JSON) file with several
// documents; empty documents are skipped.
func readYAMLDocs(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(obj) > 0 {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
}

func fromUnstructured(u *unstructured.Unstructured, v any) error {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
