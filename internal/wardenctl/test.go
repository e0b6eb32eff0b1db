package wardenctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/engine"
)

// testSuite is a test suite file: cases evaluated with one policy.
type testSuite struct {
	// Policy is the module: a URI, builtin://cel, or a path relative to
	// the suite file; or a YAML or JSON file (relative to the suite) of one
	// policy resource, or of one Kubernetes admission policy with its
	// bindings and params, which give the settings.
	Policy string `json:"policy"`
	// Settings are the settings of every case that has none of its own.
	Settings json.RawMessage `json:"settings"`
	// ExecutionMode runs a module without metadata (see run -e).
	ExecutionMode string     `json:"executionMode"`
	Tests         []testCase `json:"tests"`
}

// testCase is one request and what the policy must answer. The request is
// a file (request), or built from objects (object, oldObject, operation),
// or inline (requestObject).
type testCase struct {
	Name      string          `json:"name"`
	Request   string          `json:"request"`
	Object    string          `json:"object"`
	OldObject string          `json:"oldObject"`
	Operation string          `json:"operation"`
	Raw       bool            `json:"raw"`
	Settings  json.RawMessage `json:"settings"`
	Expect    testExpect      `json:"expect"`
}

// testExpect is what a case checks; unset fields are not checked.
type testExpect struct {
	Allowed         *bool           `json:"allowed"`
	Message         *string         `json:"message"`
	MessageContains string          `json:"messageContains"`
	Code            *int32          `json:"code"`
	Mutated         *bool           `json:"mutated"`
	Patch           json.RawMessage `json:"patch"`
}

// TestOptions are the flags of test.
type TestOptions struct {
	Remote RemoteOptions
	// DisableWasmtimeCache compiles modules without the on-disk cache.
	DisableWasmtimeCache bool
}

// AddFlags registers the flags.
func (o *TestOptions) AddFlags(cmd *cobra.Command) {
	o.Remote.AddFlags(cmd)
	cmd.Flags().BoolVar(&o.DisableWasmtimeCache, "disable-wasmtime-cache", false, "Do not use the cache of compiled modules")
}

func (a *app) testCommand() *cobra.Command {
	var o TestOptions
	cmd := &cobra.Command{
		Use:   "test [flags] <suite.yaml>...",
		Short: "Run test suites of requests against a policy (Warden extension)",
		Long: `Run declarative test suites. A suite is a YAML file:

  policy: ./policy.wasm          # a path (relative to the suite), a URI or builtin://cel
  settings: {denied_labels: [forbidden]}
  tests:
    - name: rejects a denied label
      object: objects/pod.yaml   # a CREATE request for this object (or request: a request file)
      expect: {allowed: false, message: "label forbidden is denied"}
    - name: invalid settings are refused
      request: requests/pod.json
      settings: {denied_labels: 3}
      expect: {allowed: false, messageContains: "settings are invalid"}

The policy may also be a YAML or JSON file (relative to the suite) holding one policy
resource, or one ValidatingAdmissionPolicy or MutatingAdmissionPolicy with its bindings,
params and Namespaces (as run takes them): its settings come from the file, so neither
the suite nor a case gives settings.

A case may set operation (CREATE, UPDATE, DELETE) with object and oldObject, raw: true
for a raw request, and settings of its own. expect may check allowed, message,
messageContains, code, mutated and patch (the JSONPatch, as YAML or JSON). Every case
is evaluated as run evaluates; the exit code is non-zero when a case fails.`,
		Args: args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			failed := 0
			for i, path := range argv {
				if i > 0 {
					fmt.Fprintln(a.out)
				}
				n, err := a.runSuite(cmd.Context(), path, o)
				if err != nil {
					return fmt.Errorf("suite %s: %w", path, err)
				}
				failed += n
			}
			if failed > 0 {
				return &failedError{fmt.Sprintf("%d test cases failed", failed)}
			}
			return nil
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// runSuite runs one suite file and prints its table; it returns the number
// of failed cases.
func (a *app) runSuite(ctx context.Context, path string, o TestOptions) (int, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var s testSuite
	if err := yaml.UnmarshalStrict(doc, &s); err != nil {
		return 0, fmt.Errorf("decoding: %w", err)
	}
	if s.Policy == "" || len(s.Tests) == 0 {
		return 0, errors.New("a suite needs a policy and at least one test")
	}
	mode, err := parseExecutionMode(s.ExecutionMode)
	if err != nil {
		return 0, err
	}
	dir := filepath.Dir(path)
	var ref policyRef
	var manifest *namedPolicy // the policy of a manifest file, which every case runs
	if isYAMLFile(s.Policy) {
		if manifest, err = a.suiteManifest(ctx, dir, &s); err != nil {
			return 0, err
		}
		ref.URI = fmt.Sprintf("%s: %s, %s", s.Policy, manifest.ID, manifest.Config.Module)
		if manifest.Config.IsGroup() {
			ref.URI = fmt.Sprintf("%s: %s, a policy group", s.Policy, manifest.ID)
		}
	} else if ref, err = a.resolvePolicy(relativeTo(dir, s.Policy)); err != nil {
		return 0, err
	}
	type prepared struct {
		id  string
		req *admission.Request
		raw json.RawMessage
	}
	cases := make([]prepared, len(s.Tests))
	cfgs := map[string]*engine.PolicyConfig{}
	if manifest != nil {
		cfgs[manifest.ID] = manifest.Config
	}
	for i, tc := range s.Tests {
		if tc.Name == "" {
			s.Tests[i].Name = fmt.Sprintf("case %d", i+1)
		}
		req, raw, err := a.caseRequest(dir, tc)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", s.Tests[i].Name, err)
		}
		if manifest != nil {
			cases[i] = prepared{id: manifest.ID, req: req, raw: raw}
			continue
		}
		settings := s.Settings
		if tc.Settings != nil {
			settings = tc.Settings
		}
		id := fmt.Sprintf("case-%d", i+1)
		cfgs[id] = &engine.PolicyConfig{Module: ref.Fetch, PolicyMode: engine.ModeProtect, AllowedToMutate: true,
			Settings: settings, HostCapabilities: []string{"*"}}
		cases[i] = prepared{id: id, req: req, raw: raw}
	}
	sess, err := a.loadSession(ctx, cfgs, sessionOptions{Remote: o.Remote, ExecutionMode: mode,
		DisableCache: o.DisableWasmtimeCache, ContinueOnErrors: true})
	if err != nil {
		return 0, err
	}
	defer sess.Close(ctx)

	fmt.Fprintf(a.out, "%s (%s)\n", path, ref.URI)
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tRESULT\tDETAIL")
	failed := 0
	for i, c := range cases {
		tc := s.Tests[i]
		resp, err := sess.evaluate(ctx, c.id, c.req, c.raw)
		var problems []string
		if err != nil {
			problems = []string{err.Error()}
		} else {
			problems = tc.Expect.check(resp)
		}
		result, detail := "PASS", ""
		if len(problems) > 0 {
			result, detail = "FAIL", strings.Join(problems, "; ")
			failed++
		}
		if detail == "" {
			fmt.Fprintf(tw, "%s\t%s\n", tc.Name, result) // no trailing padding
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", tc.Name, result, oneLine(detail))
		}
	}
	if err := tw.Flush(); err != nil {
		return 0, err
	}
	fmt.Fprintf(a.out, "%d cases: %d passed, %d failed\n", len(cases), len(cases)-failed, failed)
	return failed, nil
}

// relativeTo makes a local path relative to dir; URIs are kept.
func relativeTo(dir, p string) string {
	if p == "" || strings.Contains(p, "://") || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// caseRequest builds the request of a case.
func (a *app) caseRequest(dir string, tc testCase) (*admission.Request, json.RawMessage, error) {
	switch {
	case tc.Request != "" && (tc.Object != "" || tc.OldObject != ""):
		return nil, nil, errors.New("give request, or object/oldObject, not both")
	case tc.Request != "":
		doc, err := os.ReadFile(relativeTo(dir, tc.Request))
		if err != nil {
			return nil, nil, err
		}
		return decodeRequest(doc, tc.Raw)
	case tc.Object == "" && tc.OldObject == "":
		return nil, nil, errors.New("a case needs request, or object (and oldObject)")
	case tc.Raw:
		return nil, nil, errors.New("a raw case needs a request file")
	}
	op := tc.Operation
	if op == "" {
		op = "CREATE"
	}
	ro := AdmissionRequestOptions{Operation: op, Object: tc.Object, OldObject: tc.OldObject}
	if err := ro.Validate(); err != nil {
		return nil, nil, err
	}
	var obj, old json.RawMessage
	var err error
	if tc.Object != "" {
		if obj, err = a.readObject(relativeTo(dir, tc.Object)); err != nil {
			return nil, nil, err
		}
	}
	if tc.OldObject != "" {
		if old, err = a.readObject(relativeTo(dir, tc.OldObject)); err != nil {
			return nil, nil, err
		}
	}
	r, _, err := newAdmissionRequest(op, obj, old)
	if err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, nil, err
	}
	req, err := admission.DecodeRequest(b)
	return req, nil, err
}

// check returns what in resp differs from the expectation.
func (e testExpect) check(resp *admission.Response) []string {
	var out []string
	msg, code := "", int32(0)
	if resp.Status != nil {
		msg, code = resp.Status.Message, resp.Status.Code
	}
	if e.Allowed != nil && *e.Allowed != resp.Allowed {
		s := fmt.Sprintf("allowed: want %t, got %t", *e.Allowed, resp.Allowed)
		if msg != "" {
			s += fmt.Sprintf(" (%q)", msg)
		}
		out = append(out, s)
	}
	if e.Message != nil && *e.Message != msg {
		out = append(out, fmt.Sprintf("message: want %q, got %q", *e.Message, msg))
	}
	if e.MessageContains != "" && !strings.Contains(msg, e.MessageContains) {
		out = append(out, fmt.Sprintf("message: want it to contain %q, got %q", e.MessageContains, msg))
	}
	if e.Code != nil && *e.Code != code {
		out = append(out, fmt.Sprintf("code: want %d, got %d", *e.Code, code))
	}
	mutated := len(resp.Patch) > 0
	if e.Mutated != nil && *e.Mutated != mutated {
		out = append(out, fmt.Sprintf("mutated: want %t, got %t", *e.Mutated, mutated))
	}
	if e.Patch != nil {
		if d := comparePatch(e.Patch, resp.Patch); d != "" {
			out = append(out, d)
		}
	}
	return out
}

// comparePatch compares JSONPatch documents as JSON values; an empty or
// null expectation means no patch.
func comparePatch(want json.RawMessage, got []byte) string {
	var w, g any
	if err := json.Unmarshal(want, &w); err != nil {
		return fmt.Sprintf("patch: the expected patch is not JSON: %v", err)
	}
	if l, ok := w.([]any); (ok && len(l) == 0) || w == nil {
		w = nil
	}
	if len(got) > 0 {
		if err := json.Unmarshal(got, &g); err != nil {
			return fmt.Sprintf("patch: the policy's patch is not JSON: %v", err)
		}
	}
	if !reflect.DeepEqual(w, g) {
		return fmt.Sprintf("patch: want %s, got %s", compact(want), orNone(string(got)))
	}
	return ""
}

func compact(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}
