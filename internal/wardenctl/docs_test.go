package wardenctl

import (
	"bufio"
	"bytes"
	"context"
	"crypto/elliptic"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"sigs.k8s.io/yaml"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/rego/regotest"
	"github.com/wardenhq/warden/internal/testkit/ociregistry"
	"github.com/wardenhq/warden/internal/wasm"
)

// docBlock is a fenced code block of a markdown file.
type docBlock struct {
	file   string // relative to the repository root
	line   int    // of the opening fence, from 1
	marker string // what the docs-test marker before the block says; "" when none
	text   string // without the fences and their indentation
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

var docMarker = regexp.MustCompile(`^<!-- docs-test: (.+?) -->$`)

// docBlocks returns the fenced blocks of README.md and docs/*.md.
func docBlocks(t *testing.T, root string) []docBlock {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var out []docBlock
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		var cur *docBlock
		var indent, lastText string
		for i, line := range strings.Split(string(doc), "\n") {
			trimmed := strings.TrimSpace(line)
			switch {
			case cur == nil && strings.HasPrefix(trimmed, "```"):
				cur = &docBlock{file: rel, line: i + 1}
				if m := docMarker.FindStringSubmatch(lastText); m != nil {
					cur.marker = m[1]
				}
				indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
			case cur != nil && trimmed == "```":
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				cur.text += strings.TrimPrefix(line, indent) + "\n"
			}
			if trimmed != "" {
				lastText = trimmed
			}
		}
	}
	return out
}

// holdsPolicy matches a block that shows a policy, its settings or a CEL
// expression: such a block must have a marker.
var holdsPolicy = regexp.MustCompile(`(?m)^\s*module:|"module"\s*:|builtin://cel|--settings-json|kind:\s*(Cluster)?AdmissionPolicy`)

// unmarked are the files whose blocks need no marker, and why the test does
// not run them.
var unmarked = map[string]string{
	filepath.Join("docs", "benchmarks.md"): "the scripts that measured the figures: they run for minutes, on the test policies that have tests of their own",
}

// TestDocs runs the policies, CEL expressions and wardenctl commands that
// README.md and docs/*.md show, so that an example that does not work fails
// a test. A fenced block that shows a policy (holdsPolicy) is preceded by a
// marker line that says how the test runs it:
//
//	<!-- docs-test: policies.yml -->            a policy server's policies.yml
//	<!-- docs-test: wardenctl walk-through -->  a shell session with wardenctl
//	<!-- docs-test: skip: <reason> -->          not run, for the reason given
func TestDocs(t *testing.T) {
	root := policybuild.RepoRootForTest(t)
	blocks := docBlocks(t, root)
	if len(blocks) == 0 {
		t.Fatal("no code block in README.md and docs/*.md")
	}
	tested := map[string]bool{} // policy ids of docsAnswers run
	for _, b := range blocks {
		switch {
		case b.marker == "policies.yml":
			t.Run(b.file+" "+b.marker, func(t *testing.T) { runDocPolicies(t, root, b, tested) })
		case b.marker == "wardenctl walk-through":
			t.Run(b.file+" "+b.marker, func(t *testing.T) { runDocWalkthrough(t, root, b) })
		case strings.HasPrefix(b.marker, "skip: "):
			t.Logf("%s: not run: %s", b, strings.TrimPrefix(b.marker, "skip: "))
		case b.marker != "":
			t.Errorf("%s: unknown marker %q: want policies.yml, wardenctl walk-through or skip: <reason>", b, b.marker)
		case holdsPolicy.MatchString(b.text) && unmarked[b.file] != "":
			t.Logf("%s: not run: %s", b, unmarked[b.file])
		case holdsPolicy.MatchString(b.text):
			t.Errorf("%s shows a policy but has no docs-test marker before it: add one (see docs_test.go)", b)
		}
	}
	for id := range docsAnswers {
		if len(tested) > 0 && !tested[id] { // unless -run left the policies out
			t.Errorf("docsAnswers has policy %s, which no policies.yml of the docs has", id)
		}
	}
}

// docPod is a pod the policies of the docs are run against.
type docPod struct {
	name, namespace string
	labels          string // JSON object, "" for none
	image           string
	privileged      bool
}

// docPods: with and without the team label the docs' policies check, with
// and without other labels, with a latest image, privileged, in a reserved
// namespace.
var docPods = []docPod{
	{name: "team", namespace: "default", labels: `{"team":"platform"}`, image: "nginx:1.27"},
	{name: "other labels", namespace: "default", labels: `{"app":"web"}`, image: "nginx:1.27"},
	{name: "no labels", namespace: "default", image: "nginx:1.27"},
	{name: "no labels, latest", namespace: "default", image: "nginx:latest"},
	{name: "team, privileged", namespace: "default", labels: `{"team":"platform"}`, image: "nginx:1.27", privileged: true},
	{name: "team, kube-system", namespace: "kube-system", labels: `{"team":"platform"}`, image: "nginx:1.27"},
}

func (p docPod) request(t *testing.T) *admission.Request {
	t.Helper()
	meta := `{"name":"web"`
	if p.labels != "" {
		meta += `,"labels":` + p.labels
	}
	meta += "}"
	pod := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":%s,"spec":{"containers":[{"name":"c","image":%q,"securityContext":{"privileged":%t}}]}}`,
		meta, p.image, p.privileged)
	return admissiontest.New(admissiontest.WithUID("docs"), admissiontest.WithName("web"), admissiontest.WithNamespace(p.namespace),
		admissiontest.WithObject(pod)).Decode(t)
}

// docsAnswers are whether each policy of the docs' policies.yml (and each
// member of a group, as group/member) allows each of docPods.
var docsAnswers = map[string]map[string]bool{
	"pod-privileged": {"team": true, "other labels": true, "no labels": true, "no labels, latest": true,
		"team, privileged": false, "team, kube-system": true},
	"required-labels": {"team": true, "other labels": false, "no labels": false, "no labels, latest": false,
		"team, privileged": true, "team, kube-system": true},
	"reserved-namespaces": {"team": true, "other labels": true, "no labels": true, "no labels, latest": true,
		"team, privileged": true, "team, kube-system": false},
	"no-latest-images": {"team": true, "other labels": false, "no labels": false, "no labels, latest": false,
		"team, privileged": true, "team, kube-system": true},
	"pod-hardening": {"team": true, "other labels": true, "no labels": true, "no labels, latest": false,
		"team, privileged": false, "team, kube-system": true},
	"pod-hardening/not_privileged": {"team": true, "other labels": true, "no labels": true, "no labels, latest": true,
		"team, privileged": false, "team, kube-system": true},
	"pod-hardening/trusted_team": {"team": true, "other labels": false, "no labels": false, "no labels, latest": false,
		"team, privileged": true, "team, kube-system": true},
	"pod-hardening/no_latest_tag": {"team": true, "other labels": true, "no labels": true, "no labels, latest": false,
		"team, privileged": true, "team, kube-system": true},
	// builtin://vap: the team label its param names.
	"require-team": {"team": true, "other labels": false, "no labels": false, "no labels, latest": false,
		"team, privileged": true, "team, kube-system": true},
}

// offlineModules are what the test runs in place of the modules the docs
// name but a test cannot fetch (a registry, paths on the reader's machine):
// Warden's own equivalents, built from this repository. The native
// modules (builtin://cel, builtin://vap, builtin://map) need none.
var offlineModules = map[string]func(t *testing.T, root string) string{
	// The examples' Go reimplementation of Kubewarden's pod-privileged.
	"registry://ghcr.io/kubewarden/policies/pod-privileged:v1.0.8": func(t *testing.T, root string) string {
		p, err := policybuild.Build(t.Context(), filepath.Join(root, "examples", "policies", "pod-privileged"), policybuild.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return "file://" + p
	},
	// Built as the comment above it in the README says (opa build -t wasm).
	"file:///policies/required-labels.wasm": func(t *testing.T, root string) string {
		return regotest.ModuleFile(t, filepath.Join(root, "testdata", "rego", "gatekeeper", "required_labels.rego"),
			"k8srequiredlabels/violation", metadata.ModeGatekeeper)
	},
	"file:///policies/reserved-namespaces.wasm": func(t *testing.T, root string) string {
		return regotest.ModuleFile(t, filepath.Join(root, "testdata", "rego", "opa", "reserved_namespaces.rego"),
			"policy/main", metadata.ModeOPA)
	},
}

// runDocPolicies loads a policies.yml of the docs as the policy server does
// (the modules of offlineModules swapped in) and checks each policy's and
// each group member's answer to docPods against docsAnswers: no evaluation
// may fail, on pods with or without the labels the expressions read.
func runDocPolicies(t *testing.T, root string, b docBlock, tested map[string]bool) {
	var doc map[string]map[string]any
	if err := yaml.Unmarshal([]byte(b.text), &doc); err != nil {
		t.Fatalf("not a policies.yml: %v", err)
	}
	offline := func(where string, entry any) {
		m, _ := entry.(map[string]any)
		mod, _ := m["module"].(string)
		if mod == engine.NativeCELModule || isKubePolicyModule(mod) {
			return
		}
		build, ok := offlineModules[mod]
		if !ok {
			t.Fatalf("%s: module %q: the docs test cannot fetch it and has no stand-in for it in offlineModules", where, mod)
		}
		m["module"] = build(t, root)
	}
	var ids []string
	for id, entry := range doc {
		ids = append(ids, id)
		members, group := entry["policies"].(map[string]any)
		if !group {
			offline(id, entry)
			continue
		}
		for name, m := range members {
			offline(id+"/"+name, m)
			ids = append(ids, id+"/"+name)
		}
	}
	slices.Sort(ids)
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	configs, err := engine.ParsePolicies(js)
	if err != nil {
		t.Fatal(err)
	}
	env := newEnv(t)
	var logs bytes.Buffer
	a := &app{errOut: &logs, getenv: func(k string) string { return env.env[k] }}
	ctx := context.Background()
	sess, err := a.loadSession(ctx, configs, sessionOptions{})
	if err != nil {
		t.Fatalf("loading the policies: %v\n%s", err, logs.String())
	}
	defer sess.Close(ctx)
	for _, id := range ids {
		tested[id] = true
		want, ok := docsAnswers[id]
		if !ok {
			t.Errorf("policy %s: no expected answers in docsAnswers", id)
			continue
		}
		for _, pod := range docPods {
			resp, err := sess.eng.Validate(ctx, id, pod.request(t), engine.OriginValidate)
			if err != nil {
				t.Fatalf("policy %s, pod %q: %v", id, pod.name, err)
			}
			if msg := evaluationFailure(resp); msg != "" {
				t.Errorf("policy %s, pod %q: the evaluation failed: %s", id, pod.name, msg)
			}
			if resp.Allowed != want[pod.name] {
				t.Errorf("policy %s, pod %q: allowed %t, want %t (%+v)", id, pod.name, resp.Allowed, want[pod.name], resp.Status)
			}
		}
	}
	if l := logs.String(); strings.Contains(l, "level=ERROR") {
		t.Errorf("errors logged:\n%s", l)
	}
}

// evaluationFailure returns the message of a response, or of one of its
// causes, that says the evaluation failed rather than answered.
func evaluationFailure(resp *admission.Response) string {
	if resp.Status == nil {
		return ""
	}
	if resp.Status.Code == 500 {
		return resp.Status.Message
	}
	if resp.Status.Details != nil {
		for _, c := range resp.Status.Details.Causes {
			if strings.Contains(c.Message, "internal server error") {
				return c.Field + ": " + c.Message
			}
		}
	}
	return ""
}

// walkthroughSkips are the wardenctl commands of a walk-through the test
// does not run, and why.
var walkthroughSkips = map[string]string{
	"bench": "it measures for seconds by design (bench_test.go tests bench)",
}

// docRegistryHost is the registry the walk-throughs use; the test serves
// one of its own, over plain HTTP as a local registry:2 is, in its place.
const docRegistryHost = "localhost:5000"

// buildTestPolicy matches the walk-through's build of a test policy, run in
// a subshell.
var buildTestPolicy = regexp.MustCompile(`^\(cd (\S+) && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o (\S+) \./([\w-]+)\)$`)

// walkthrough is the state of a shell session of the docs that the test
// runs.
type walkthrough struct {
	t       *testing.T
	root    string // the repository
	sandbox string // where the session runs, testdata linked in
	cwd     string
	env     *testEnv
	// registry is the host:port of the registry serving docRegistryHost.
	registry string
	// written are the files the session writes, relative to the sandbox.
	written []string
	// last is the last wardenctl run, to which an answer shown after it
	// belongs.
	last *walkRun
}

// runDocWalkthrough runs a shell session of the docs in a copy of the
// repository's layout (testdata is linked in): heredocs, printf, mkdir, cd,
// the builds (the test policy is built by policybuild, wardenctl runs in
// process) and every wardenctl command but bench, against a registry of the
// test's own in place of localhost:5000, with an ECDSA key pair standing in
// for cosign generate-key-pair's. Each run is repeated with the request's
// object stripped of its labels. Every file the session writes must be
// under scratch/, which .gitignore must ignore with private keys.
func runDocWalkthrough(t *testing.T, root string, b docBlock) {
	w := &walkthrough{t: t, root: root, sandbox: t.TempDir(), env: newEnv(t)}
	if err := os.Symlink(filepath.Join(root, "testdata"), filepath.Join(w.sandbox, "testdata")); err != nil {
		t.Fatal(err)
	}
	w.registry = ociregistry.Start(t, ociregistry.Plain()).Host
	w.cwd = w.sandbox
	t.Chdir(w.cwd)

	sc := bufio.NewScanner(strings.NewReader(b.text))
	line := 0
	next := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		line++
		return sc.Text(), true
	}
	for {
		text, ok := next()
		if !ok {
			break
		}
		text = strings.TrimSpace(text)
		if doc, ok := strings.CutPrefix(text, "#"); ok {
			if doc = strings.TrimSpace(doc); strings.HasPrefix(doc, "{") && w.last != nil {
				w.last.checkDocumented(t, doc)
			}
			continue
		}
		if text == "" {
			continue
		}
		w.last = nil
		for strings.HasSuffix(text, `\`) {
			more, ok := next()
			if !ok {
				t.Fatalf("line %d: a continuation at the end of the block", line)
			}
			text = strings.TrimSuffix(text, `\`) + " " + strings.TrimSpace(more)
		}
		where := fmt.Sprintf("%s, line %d of the block: %s", b, line, text)
		if m := buildTestPolicy.FindStringSubmatch(text); m != nil {
			if filepath.Join(w.cwd, m[1]) != filepath.Join(w.sandbox, "testdata", "policies") {
				t.Fatalf("%s: builds outside of testdata/policies", where)
			}
			w.write(filepath.Join(m[1], m[2]), testPolicyWithoutMetadata(t, root, m[3]))
			continue
		}
		words, err := shellWords(strings.ReplaceAll(text, docRegistryHost, w.registry))
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		for _, cmd := range splitAnd(words) {
			env := map[string]string{}
			for len(cmd) > 0 && strings.Contains(cmd[0], "=") {
				k, v, _ := strings.Cut(cmd[0], "=")
				env[k], cmd = v, cmd[1:]
			}
			var stdout string
			if i := slices.Index(cmd, ">"); i >= 0 && i+1 < len(cmd) {
				stdout = cmd[i+1]
				cmd = slices.Delete(cmd, i, i+2)
			}
			var heredoc string
			if n := len(cmd); n > 0 && strings.HasPrefix(cmd[n-1], "<<") {
				end := strings.TrimPrefix(cmd[n-1], "<<")
				cmd = cmd[:n-1]
				for {
					l, ok := next()
					if !ok {
						t.Fatalf("%s: no %s ends the heredoc", where, end)
					}
					if l == end {
						break
					}
					heredoc += l + "\n"
				}
			}
			if len(cmd) == 0 {
				t.Fatalf("%s: no command", where)
			}
			switch name := cmd[0]; {
			case name == "go" && slices.Equal(cmd, []string{"go", "build", "-o", "bin/wardenctl", "./cmd/wardenctl"}):
				// wardenctl runs in process
			case name == "export" && len(cmd) == 2 && strings.HasPrefix(cmd[1], "PATH="):
				// so that "wardenctl" is bin/wardenctl
			case name == "mkdir" && len(cmd) == 3 && cmd[1] == "-p":
				if err := os.MkdirAll(filepath.Join(w.cwd, cmd[2]), 0o755); err != nil {
					t.Fatal(err)
				}
			case name == "cd" && len(cmd) == 2:
				w.cwd = filepath.Join(w.cwd, cmd[1])
				if rel, err := filepath.Rel(w.sandbox, w.cwd); err != nil || strings.HasPrefix(rel, "..") {
					t.Fatalf("%s: leaves the repository", where)
				}
				t.Chdir(w.cwd)
			case name == "cat" && stdout != "" && len(cmd) == 1:
				w.write(stdout, []byte(heredoc))
			case name == "printf" && stdout != "" && len(cmd) == 2 && !strings.Contains(cmd[1], "%"):
				w.write(stdout, []byte(strings.ReplaceAll(cmd[1], `\n`, "\n")))
			case filepath.Base(name) == "wardenctl": // on the PATH, or bin/wardenctl
				w.wardenctl(where, cmd[1:], env, stdout)
			default:
				t.Fatalf("%s: the docs test does not know how to run %q: teach runDocWalkthrough", where, name)
			}
		}
	}
	for _, f := range w.written {
		if !strings.HasPrefix(f, "scratch"+string(filepath.Separator)) {
			t.Errorf("the walk-through writes %s outside of scratch/, into the repository", f)
		}
	}
	ignore, err := os.ReadFile(filepath.Join(root, ".gitignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/scratch/", "*.key"} {
		if !slices.Contains(strings.Split(string(ignore), "\n"), want) {
			t.Errorf(".gitignore does not ignore %s", want)
		}
	}
}

// write writes a file of the session, path relative to its directory.
func (w *walkthrough) write(path string, content []byte) {
	w.t.Helper()
	write(w.t, w.cwd, path, string(content))
	w.wrote(path)
}

// wrote records that the session wrote path, relative to its directory.
func (w *walkthrough) wrote(path string) {
	w.t.Helper()
	rel, err := filepath.Rel(w.sandbox, filepath.Join(w.cwd, path))
	if err != nil {
		w.t.Fatal(err)
	}
	w.written = append(w.written, rel)
}

// wardenctl runs one wardenctl command of the session with the environment
// variables given before it, or says why not. A run is repeated on the
// request without labels.
func (w *walkthrough) wardenctl(where string, args []string, env map[string]string, stdout string) {
	t := w.t
	t.Helper()
	sub := args[0]
	if why, ok := walkthroughSkips[sub]; ok {
		t.Logf("%s: not run: %s", where, why)
		return
	}
	for i, a := range args {
		if (a == "--key" || a == "-k") && i+1 < len(args) {
			w.keyPair(args[i+1], env["COSIGN_PASSWORD"])
		}
	}
	getenv := func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		return w.env.env[k]
	}
	run := func(args []string) string {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), args, strings.NewReader(""), &out, &errOut, getenv)
		if code != 0 || strings.Contains(errOut.String(), "level=ERROR") {
			t.Errorf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", where, code, out.String(), errOut.String())
		}
		if sub == "run" {
			for _, resp := range decodeResponses(t, out.String()) {
				if msg := evaluationFailure(&resp); msg != "" {
					t.Errorf("%s: the evaluation failed: %s", where, msg)
				}
			}
		}
		return out.String()
	}
	out := run(args)
	if stdout != "" {
		w.write(stdout, []byte(out))
	}
	if i := slices.Index(args, "-o"); i > 0 && i+1 < len(args) {
		w.wrote(args[i+1])
	}
	if sub != "run" {
		return
	}
	if i := slices.IndexFunc(args, func(a string) bool { return a == "-r" || a == "--request-path" }); i >= 0 && i+1 < len(args) {
		unlabelled := slices.Clone(args)
		unlabelled[i+1] = withoutLabels(t, args[i+1])
		run(unlabelled)
	}
	w.last = &walkRun{args: args, stdout: out}
}

// keyPair writes, for a key file of the session that does not exist, the
// pair cosign generate-key-pair writes beside each other: cosign.key,
// encrypted with password, and cosign.pub.
func (w *walkthrough) keyPair(file, password string) {
	w.t.Helper()
	if _, err := os.Stat(filepath.Join(w.cwd, file)); err == nil {
		return
	}
	priv, pub, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), cryptoutils.StaticPasswordFunc([]byte(password)))
	if err != nil {
		w.t.Fatal(err)
	}
	base := strings.TrimSuffix(strings.TrimSuffix(file, ".key"), ".pub")
	w.write(base+".key", priv)
	w.write(base+".pub", pub)
}

// walkRun is a wardenctl run command of a walk-through and its output.
type walkRun struct {
	args   []string
	stdout string
}

// testPolicyWithoutMetadata builds testdata/policies/<name> of the
// repository at root, as the walk-through does: without metadata.
func testPolicyWithoutMetadata(t *testing.T, root, name string) []byte {
	t.Helper()
	path, err := policybuild.Build(t.Context(), filepath.Join(root, "testdata", "policies", name), policybuild.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, err = wasm.WithoutCustomSection(b, metadata.SectionName); err != nil {
		t.Fatal(err)
	}
	return b
}

// checkDocumented compares the answer a walk-through shows after a run (a
// uid of "..." stands for any) with the one it printed.
func (r *walkRun) checkDocumented(t *testing.T, documented string) {
	t.Helper()
	var want, got map[string]any
	if err := json.Unmarshal([]byte(documented), &want); err != nil {
		t.Fatalf("the answer shown after wardenctl %s is not JSON: %v", strings.Join(r.args, " "), err)
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("wardenctl %s printed %q: %v", strings.Join(r.args, " "), r.stdout, err)
	}
	if want["uid"] == "..." {
		want["uid"] = got["uid"]
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("wardenctl %s printed\n%s\nthe docs show\n%s", strings.Join(r.args, " "), strings.TrimSpace(r.stdout), documented)
	}
}

// withoutLabels writes a copy of a request file whose object has no labels
// and returns its path.
func withoutLabels(t *testing.T, path string) string {
	t.Helper()
	var review map[string]any
	if err := json.Unmarshal([]byte(mustRead(t, path)), &review); err != nil {
		t.Fatal(err)
	}
	req := review
	if r, ok := review["request"].(map[string]any); ok {
		req = r
	}
	obj, _ := req["object"].(map[string]any)
	meta, _ := obj["metadata"].(map[string]any)
	if _, ok := meta["labels"]; !ok {
		t.Fatalf("the object of %s has no labels", path)
	}
	delete(meta, "labels")
	b, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	return write(t, t.TempDir(), "unlabelled.json", string(b))
}

// shellWords splits a command line as a POSIX shell does, for what the docs
// use: quotes, backslashes, comments; no expansion.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' at %d", i)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i == len(s) {
				return nil, fmt.Errorf("unterminated \" in %q", s)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			return words, nil
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// splitAnd splits words at && into commands.
func splitAnd(words []string) [][]string {
	var out [][]string
	for {
		i := slices.Index(words, "&&")
		if i < 0 {
			return append(out, words)
		}
		out = append(out, words[:i])
		words = words[i+1:]
	}
}
