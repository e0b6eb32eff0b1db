package policyserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/engine"
)

// reloadWait bounds the wait for one reload to be applied.
const reloadWait = time.Minute

// replaceFile writes a policies file as an editor or the kubelet would:
// "rename" writes a new file and renames it over the old one; "inplace"
// truncates and rewrites the file; "symlink" swaps a ..data symlink to a new
// directory, as a ConfigMap volume is updated (path must then be the
// ConfigMap-style symlink that setUpSymlinked made).
func replaceFile(t *testing.T, path, how, doc string) {
	t.Helper()
	var err error
	switch how {
	case "rename":
		tmp := path + ".tmp"
		if err = os.WriteFile(tmp, []byte(doc), 0o600); err == nil {
			err = os.Rename(tmp, path)
		}
	case "inplace":
		err = os.WriteFile(path, []byte(doc), 0o600)
	case "symlink":
		dir := filepath.Dir(path)
		ts, mkErr := os.MkdirTemp(dir, "..ts-")
		if mkErr != nil {
			t.Fatal(mkErr)
		}
		if err = os.WriteFile(filepath.Join(ts, filepath.Base(path)), []byte(doc), 0o600); err == nil {
			tmpLink := filepath.Join(dir, "..data_tmp")
			if err = os.Symlink(filepath.Base(ts), tmpLink); err == nil {
				err = os.Rename(tmpLink, filepath.Join(dir, "..data"))
			}
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// setUpSymlinked lays a policies file out as the kubelet mounts a ConfigMap
// key: policies.yml -> ..data/policies.yml, ..data -> ..ts-1.
func setUpSymlinked(t *testing.T, doc string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "..ts-1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "..ts-1", "policies.yml"), []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"..data": "..ts-1", "policies.yml": "..data/policies.yml"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "policies.yml")
}

// verdict sends a Pod with labels to a policy and says "accept", "reject",
// or what went wrong.
func (ts *testServer) verdict(policy string, labels map[string]string) string {
	resp, err := ts.client.Post(ts.base+"/validate/"+policy, "application/json", bytes.NewReader(admissiontest.New(admissiontest.WithUID("u"), admissiontest.WithLabels(labels)).JSON()))
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("status %d: %s", resp.StatusCode, body)
	}
	var out struct {
		Response struct {
			Allowed bool `json:"allowed"`
		} `json:"response"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return "error: " + err.Error()
	}
	if out.Response.Allowed {
		return "accept"
	}
	return "reject"
}

// waitVerdict waits until a policy answers want for a Pod with labels.
func (ts *testServer) waitVerdict(t *testing.T, policy string, labels map[string]string, want string) {
	t.Helper()
	deadline := time.Now().Add(reloadWait)
	got := ""
	for time.Now().Before(deadline) {
		if got = ts.verdict(policy, labels); got == want {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s still answers %q for labels %v, want %q", policy, got, labels, want)
}

// getPolicies decodes the answer of GET /policies into out.
func (ts *testServer) getPolicies(t *testing.T, out any) {
	t.Helper()
	resp, err := http.Get(ts.ready + "/policies")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

// policiesStatus reads GET /policies.
func (ts *testServer) policiesStatus(t *testing.T) (fileError string, byID map[string]engine.PolicyStatus) {
	t.Helper()
	var out struct {
		FileError string                `json:"fileError"`
		Policies  []engine.PolicyStatus `json:"policies"`
	}
	ts.getPolicies(t, &out)
	byID = map[string]engine.PolicyStatus{}
	for _, p := range out.Policies {
		byID[p.ID] = p
	}
	return out.FileError, byID
}

// TestHotReloadUnderLoad rewrites the policies file many times, in each of
// the ways it changes in practice, while clients keep sending requests and
// polling readiness. Every version denies the label "always" and none
// denies "never", so any other answer to those is wrong; version i also
// denies "v<i>", which tells when the server serves it. The same process
// must pick up every version, with no failed request and readiness never
// lost.
func TestHotReloadUnderLoad(t *testing.T) {
	version := func(i int) string {
		return policiesDoc(t, fmt.Sprintf("p: {module: {labels}, settings: {denied_labels: [always, v%d]}}\n"+
			"other: {module: {wasi-log}}\n", i))
	}
	path := setUpSymlinked(t, version(0))
	ts := startServer(t, testOptions(t, path))

	ctx, cancel := context.WithCancel(context.Background())
	var wrong []string
	var mu sync.Mutex
	var requests atomic.Int64
	report := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		if len(wrong) < 10 {
			wrong = append(wrong, s)
		}
	}
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				label, want, policy := "always", "reject", "p"
				switch c {
				case 1:
					label, want = "never", "accept"
				case 2:
					policy, want = "other", "accept"
				}
				if got := ts.verdict(policy, map[string]string{label: "x"}); got != want {
					report(fmt.Sprintf("%s with label %s: %s", policy, label, got))
				}
				requests.Add(1)
			}
		})
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			resp, err := http.Get(ts.ready + "/readiness")
			if err != nil {
				report("readiness: " + err.Error())
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				report(fmt.Sprintf("readiness: status %d", resp.StatusCode))
			}
			time.Sleep(time.Millisecond)
		}
	})

	// Symlink swaps first: a rename then replaces the symlink by a file,
	// which is rewritten in place last.
	const versions = 12
	for i := 1; i <= versions; i++ {
		how := []string{"symlink", "rename", "inplace"}[(i-1)*3/versions]
		replaceFile(t, path, how, version(i))
		ts.waitVerdict(t, "p", map[string]string{fmt.Sprintf("v%d", i): "x"}, "reject")
		if got := ts.verdict("p", map[string]string{fmt.Sprintf("v%d", i-1): "x"}); got != "accept" {
			t.Errorf("version %d (%s) served, but the previous version's label is still denied: %s", i, how, got)
		}
	}
	cancel()
	wg.Wait()
	if len(wrong) > 0 {
		t.Errorf("wrong answers during %d requests:\n%s", requests.Load(), strings.Join(wrong, "\n"))
	}
	_, status := ts.policiesStatus(t)
	if st := status["p"]; st.State != engine.StateActive || st.Generation < 2 || st.LastError != "" {
		t.Errorf("status of p after the reloads: %+v", st)
	}
	if st := status["other"]; st.Generation != 1 {
		t.Errorf("the unchanged policy was reloaded: %+v", st)
	}
	t.Logf("%d requests during %d reloads", requests.Load(), versions)
}

// TestHotReloadFailures breaks the policies file in each way a reload can
// fail: the policies that serve keep serving, the failure shows in GET
// /policies and in the reload metric, and fixing the file recovers.
func TestHotReloadFailures(t *testing.T) {
	good := policiesDoc(t, "p: {module: {labels}, settings: {denied_labels: [bad]}}\n")
	path := writePolicies(t, good)
	// Reloads on Reload (SIGHUP) only: the file watch would apply some of
	// the steps a second time, and the counts checked below would race.
	opts := testOptions(t, path)
	opts.WatchPolicies = false
	ts := startServer(t, opts)
	bad := map[string]string{"bad": "x"}

	steps := []struct {
		name, doc string
		// wantFile and wantState check GET /policies; wantNew is the
		// verdict of policy "new" (absent unless added).
		wantFile, wantState, wantErr string
		wantNew                      string
	}{
		{name: "bad YAML of the whole file", doc: "p: [unclosed\n", wantFile: "policies.yml", wantState: "active"},
		// As a file rewritten in place is between truncation and write.
		{name: "an empty file", doc: "\n", wantFile: "the file is empty: every policy keeps serving", wantState: "active"},
		{name: "invalid settings", doc: strings.Replace(good, "[bad]", "7", 1), wantState: "stale",
			wantErr: "Policy settings are invalid: denied_labels must be a list of strings"},
		{name: "missing module", doc: "p: {module: 'file:///nonexistent/policy.wasm'}\n", wantState: "stale",
			wantErr: "no such file or directory"},
		{name: "registry down", doc: "p: {module: 'registry://127.0.0.1:1/policies/p:v1'}\n", wantState: "stale",
			wantErr: "127.0.0.1:1"},
		{name: "a new policy that fails is absent", doc: good + "new: {module: 'file:///nonexistent/new.wasm'}\n", wantState: "active",
			wantNew: `status 404: {"message":"unknown policy: new","status":404}`},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(s.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			changes := ts.srv.Reload(t.Context())
			fileErr, status := ts.policiesStatus(t)
			// A remote module is fetched in the background: the reload
			// that follows its fetch reports the outcome.
			for deadline := time.Now().Add(reloadWait); status["p"].State == "fetching" && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
				fileErr, status = ts.policiesStatus(t)
			}
			if (s.wantFile == "") != (fileErr == "") || !strings.Contains(fileErr, s.wantFile) {
				t.Errorf("file error %q, want one naming %q", fileErr, s.wantFile)
			}
			if st := status["p"]; st.State != s.wantState || !strings.Contains(st.LastError, s.wantErr) || (s.wantErr == "") != (st.LastError == "") {
				t.Errorf("status of p = %+v, want state %s and an error with %q (changes %+v)", st, s.wantState, s.wantErr, changes)
			}
			if got := ts.verdict("p", bad); got != "reject" {
				t.Errorf("the serving version of p answers %q, want reject", got)
			}
			if s.wantNew != "" {
				if got := ts.verdict("new", bad); !strings.HasPrefix(got, s.wantNew) {
					t.Errorf("new answers %q, want %q", got, s.wantNew)
				}
				if st := status["new"]; st.State != engine.StateFailed || !strings.Contains(st.LastError, "new.wasm") {
					t.Errorf("status of new = %+v", st)
				}
			}
		})
	}
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	ts.srv.Reload(t.Context())
	if fileErr, status := ts.policiesStatus(t); fileErr != "" || status["p"].State != engine.StateActive || status["p"].LastError != "" || len(status) != 1 {
		t.Errorf("after the file is fixed: file error %q, status %+v", fileErr, status)
	}
	resp, err := http.Get(ts.ready + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`warden_policy_reload_total{action="read",result="failure"} 2`,
		`warden_policy_reload_total{action="update",policy_name="p",result="failure"} 3`,
		`warden_policy_reload_total{action="add",policy_name="new",result="failure"} 1`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if !strings.Contains(ts.logs.String(), "policy change failed: the previous version keeps serving") {
		t.Errorf("no failed change logged:\n%s", ts.logs.String())
	}
}

// TestReloadRetainsTheReflectorsOfServedPolicies: after a reload, the
// policy server keeps copies of the kinds its policies serving may read
// and of no other (test/cluster's TestReflectedLists stops the reflectors
// themselves on a real API server). A policy whose new version failed still
// serves its previous one, and keeps its kinds.
func TestReloadRetainsTheReflectorsOfServedPolicies(t *testing.T) {
	doc := func(pKind, qKind string, pModule string) string {
		d := fmt.Sprintf("p: {module: %s, contextAwareResources: [{apiVersion: v1, kind: %s}]}\n", pModule, pKind)
		if qKind != "" {
			d += fmt.Sprintf("q: {module: {labels}, contextAwareResources: [{apiVersion: v1, kind: %s}]}\n", qKind)
		}
		return policiesDoc(t, d)
	}
	path := writePolicies(t, doc("ConfigMap", "Namespace", "{labels}"))
	opts := testOptions(t, path)
	opts.WatchPolicies = false
	var mu sync.Mutex
	var retained []string
	opts.Reflect = func(string, string) error { return nil }
	opts.RetainReflectors = func(_ context.Context, kinds []schema.GroupVersionKind) {
		mu.Lock()
		defer mu.Unlock()
		retained = retained[:0]
		for _, k := range kinds {
			retained = append(retained, k.Kind)
		}
		slices.Sort(retained)
	}
	ts := startServer(t, opts)
	steps := []struct {
		name, doc string
		want      []string
	}{
		{"q removed", doc("ConfigMap", "", "{labels}"), []string{"ConfigMap"}},
		{"q added again", doc("ConfigMap", "Namespace", "{labels}"), []string{"ConfigMap", "Namespace"}},
		{"p's new version fails", doc("Secret", "Namespace", "'file:///nonexistent/policy.wasm'"), []string{"ConfigMap", "Namespace"}},
		{"p's kind changes", doc("Secret", "Namespace", "{labels}"), []string{"Namespace", "Secret"}},
	}
	for _, s := range steps {
		replaceFile(t, path, "rename", s.doc)
		ts.srv.Reload(t.Context())
		mu.Lock()
		got := slices.Clone(retained)
		mu.Unlock()
		if !slices.Equal(got, s.want) {
			t.Errorf("%s: kinds retained %v, want %v", s.name, got, s.want)
		}
	}
}
