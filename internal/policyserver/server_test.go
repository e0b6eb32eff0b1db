package policyserver_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/pkitest"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/policyserver"
	"github.com/wardenhq/warden/internal/wasm"
)

// testServer is a policy server on 127.0.0.1 with real TLS.
type testServer struct {
	// stop shuts the server down, as the end of the test does: its
	// exporters flush.
	stop   func()
	srv    *policyserver.Server
	client *http.Client
	base   string
	ready  string
	logs   *logtest.Buffer
}

// module returns a file:// URL of a built test policy.
func module(t *testing.T, name string) string {
	return "file://" + policybuild.ForTest(t, name)
}

// writePolicies writes a policies.yml where {name} is replaced by the
// file:// URL of the test policy name.
func writePolicies(t *testing.T, doc string) string {
	t.Helper()
	doc = policiesDoc(t, doc)
	path := filepath.Join(t.TempDir(), "policies.yml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// policiesDoc returns a policies.yml document where {name} is replaced by
// the file:// URL of the test policy name.
func policiesDoc(t *testing.T, doc string) string {
	t.Helper()
	for _, name := range []string{"labels", "mutate-labels", "wasi-log", "raw", "trap", "loop", "oom", "garbage", "wasi-garbage", "wasi-fail", "hostile"} {
		if strings.Contains(doc, "{"+name+"}") {
			doc = strings.ReplaceAll(doc, "{"+name+"}", module(t, name))
		}
	}
	return doc
}

func testOptions(t *testing.T, policies string) policyserver.Options {
	opts := policyserver.DefaultOptions()
	opts.Addr, opts.Port, opts.ReadinessProbePort = "127.0.0.1", 0, 0
	opts.PoliciesPath = policies
	opts.CacheDir = ""
	opts.Workers = 2
	return opts
}

func startServer(t *testing.T, opts policyserver.Options) *testServer {
	t.Helper()
	ts := startServerUnready(t, opts)
	ts.waitReady(t)
	return ts
}

// startServerUnready is startServer without the wait for readiness.
func startServerUnready(t *testing.T, opts policyserver.Options) *testServer {
	t.Helper()
	ca := pkitest.NewCA(t, "test-ca")
	opts.CertFile, opts.KeyFile = ca.Server(t).WriteFiles(t, t.TempDir(), "")
	logs := &logtest.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	policyserver.SetGOMAXPROCS(opts.Workers) // as Main does
	srv, err := policyserver.New(context.Background(), opts, logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	ts := &testServer{
		stop:   stop,
		srv:    srv,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}},
		base:   "https://" + srv.Addr().String(),
		ready:  "http://" + srv.ReadinessAddr().String(),
		logs:   logs,
	}
	return ts
}

func (ts *testServer) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(ts.ready + "/readiness")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the server never became ready")
}

func (ts *testServer) post(t *testing.T, path, contentType string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := ts.client.Post(ts.base+path, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// review sends an AdmissionReview and returns the response of a 200 answer.
func (ts *testServer) review(t *testing.T, path string, review []byte) *admission.Response {
	t.Helper()
	status, body := ts.post(t, path, "application/json", review)
	if status != http.StatusOK {
		t.Fatalf("%s: status %d: %s", path, status, body)
	}
	var out struct {
		APIVersion string              `json:"apiVersion"`
		Kind       string              `json:"kind"`
		Response   *admission.Response `json:"response"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%s: %v: %s", path, err, body)
	}
	if !strings.HasPrefix(path, "/validate_raw/") && (out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview") {
		t.Errorf("%s: not an AdmissionReview: %s", path, body)
	}
	if out.Response == nil {
		t.Fatalf("%s: no response: %s", path, body)
	}
	return out.Response
}

const mainPolicies = `
labels:
  module: {labels}
  settings: {denied_labels: [forbidden]}
labels-custom-message:
  module: {labels}
  settings: {denied_labels: [forbidden]}
  message: "the platform team does not allow this"
labels-monitor:
  module: {labels}
  policyMode: monitor
  settings: {denied_labels: [forbidden]}
mutate:
  module: {mutate-labels}
  allowedToMutate: true
mutate-not-allowed:
  module: {mutate-labels}
mutate-delete:
  module: {mutate-labels}
  allowedToMutate: true
  settings: {mutate_without_object: true}
mutate-monitor:
  module: {mutate-labels}
  policyMode: monitor
  allowedToMutate: true
wasi-log:
  module: {wasi-log}
raw:
  module: {raw}
  settings: {forbidden_resources: [banana]}
trap:
  module: {trap}
loop:
  module: {loop}
  timeoutEvalSeconds: 1
oom:
  module: {oom}
garbage:
  module: {garbage}
wasi-garbage:
  module: {wasi-garbage}
wasi-fail:
  module: {wasi-fail}
`

func TestEvaluation(t *testing.T) {
	opts := testOptions(t, writePolicies(t, mainPolicies))
	opts.AlwaysAcceptNS = "kube-system"
	opts.MemoryLimitMiB = 64
	ts := startServer(t, opts)

	ok := map[string]string{"app": "web"}
	bad := map[string]string{"app": "web", "forbidden": "yes"}
	const notAllowedToMutate = "Request rejected by policy mutate-not-allowed. The policy attempted to mutate the request, but it is currently configured to not allow mutations."

	tests := []struct {
		name        string
		path        string
		review      *admissiontest.Review
		allowed     bool
		message     string // exact status message, "" for no status
		code        int32
		wantPatch   bool
		wantCauses  []string
		messageHead string // prefix match instead of exact
	}{
		{name: "accept", path: "/validate/labels", review: admissiontest.New(admissiontest.WithUID("u1"), admissiontest.WithLabels(ok)), allowed: true},
		{name: "reject", path: "/validate/labels", review: admissiontest.New(admissiontest.WithUID("u2"), admissiontest.WithLabels(bad)), message: "label forbidden is denied"},
		{name: "always-accept namespace", path: "/validate/labels", review: admissiontest.New(admissiontest.WithUID("u3"), admissiontest.WithNamespace("kube-system"), admissiontest.WithLabels(bad)), allowed: true},
		{name: "custom message", path: "/validate/labels-custom-message", review: admissiontest.New(admissiontest.WithUID("u4"), admissiontest.WithLabels(bad)),
			message: "the platform team does not allow this", wantCauses: []string{"label forbidden is denied"}},
		{name: "monitor accepts a rejection", path: "/validate/labels-monitor", review: admissiontest.New(admissiontest.WithUID("u5"), admissiontest.WithLabels(bad)), allowed: true},
		{name: "audit ignores monitor mode", path: "/audit/labels-monitor", review: admissiontest.New(admissiontest.WithUID("u6"), admissiontest.WithLabels(bad)), message: "label forbidden is denied"},
		{name: "mutation", path: "/validate/mutate", review: admissiontest.New(admissiontest.WithUID("u7"), admissiontest.WithLabels(ok)), allowed: true, wantPatch: true},
		{name: "mutation not allowed", path: "/validate/mutate-not-allowed", review: admissiontest.New(admissiontest.WithUID("u8"), admissiontest.WithLabels(ok)), message: notAllowedToMutate},
		{name: "audit returns the raw patch", path: "/audit/mutate-not-allowed", review: admissiontest.New(admissiontest.WithUID("u9"), admissiontest.WithLabels(ok)), allowed: true, wantPatch: true},
		{name: "monitor drops the patch", path: "/validate/mutate-monitor", review: admissiontest.New(admissiontest.WithUID("u10"), admissiontest.WithLabels(ok)), allowed: true},
		{name: "mutation of a DELETE", path: "/validate/mutate-delete", review: admissiontest.New(admissiontest.WithUID("u11"), admissiontest.WithOperation("DELETE"), admissiontest.WithObject("null")),
			message: "Incoming object is null, which happens only with DELETE operations, but the policy is attempting a mutation. This is not allowed"},
		{name: "wasi policy", path: "/validate/wasi-log", review: admissiontest.New(admissiontest.WithUID("u12"), admissiontest.WithLabels(ok)), allowed: true},
		{name: "wasi policy rejects", path: "/validate/wasi-log", review: admissiontest.New(admissiontest.WithUID("u13"), admissiontest.WithLabels(map[string]string{"reject": "true"})), message: "rejected by wasi-log"},
		{name: "trap", path: "/validate/trap", review: admissiontest.New(admissiontest.WithUID("u14"), admissiontest.WithLabels(ok)), code: 500, messageHead: "internal server error: Guest call failure: "},
		{name: "loop", path: "/validate/loop", review: admissiontest.New(admissiontest.WithUID("u15"), admissiontest.WithLabels(ok)), code: 500,
			message: "Policy execution interrupted because it exceeded the allowed execution time"},
		{name: "oom", path: "/validate/oom", review: admissiontest.New(admissiontest.WithUID("u16"), admissiontest.WithLabels(ok)), code: 500, messageHead: "internal server error: Guest call failure: "},
		{name: "garbage", path: "/validate/garbage", review: admissiontest.New(admissiontest.WithUID("u17"), admissiontest.WithLabels(ok)), code: 500, messageHead: "internal server error: invalid response from policy: "},
		{name: "wasi garbage", path: "/validate/wasi-garbage", review: admissiontest.New(admissiontest.WithUID("u18"), admissiontest.WithLabels(ok)), code: 500,
			messageHead: "internal server error: Cannot deserialize policy validation response: "},
		{name: "wasi exit 1", path: "/validate/wasi-fail", review: admissiontest.New(admissiontest.WithUID("u19"), admissiontest.WithLabels(ok)), code: 500, message: "internal server error: something went wrong"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.review(t, tt.path, tt.review.JSON())
			if uid := tt.review.Decode(t).UID; resp.UID != uid {
				t.Errorf("uid = %q, want %q", resp.UID, uid)
			}
			if resp.Allowed != tt.allowed {
				t.Errorf("allowed = %v, want %v (%+v)", resp.Allowed, tt.allowed, resp.Status)
			}
			var msg string
			var code int32
			if resp.Status != nil {
				msg, code = resp.Status.Message, resp.Status.Code
			}
			switch {
			case tt.messageHead != "":
				if !strings.HasPrefix(msg, tt.messageHead) {
					t.Errorf("message = %q, want prefix %q", msg, tt.messageHead)
				}
			case msg != tt.message:
				t.Errorf("message = %q, want %q", msg, tt.message)
			}
			// A guest's goroutine dump (out of memory, panic) stays in the
			// debug log, out of the response.
			if strings.Contains(msg, "\n") || strings.Contains(msg, "goroutine ") {
				t.Errorf("message carries the guest's stderr dump: %q", msg)
			}
			if code != tt.code {
				t.Errorf("code = %d, want %d", code, tt.code)
			}
			if (resp.Patch != nil) != tt.wantPatch {
				t.Errorf("patch = %s, want patch: %v", resp.Patch, tt.wantPatch)
			}
			if tt.wantCauses != nil {
				if resp.Status.Details == nil || len(resp.Status.Details.Causes) != 1 || resp.Status.Details.Causes[0].Message != tt.wantCauses[0] {
					t.Errorf("causes = %+v, want %q", resp.Status.Details, tt.wantCauses)
				}
			}
		})
	}

	t.Run("the patch adds the label", func(t *testing.T) {
		status, body := ts.post(t, "/validate/mutate", "application/json", admissiontest.New(admissiontest.WithUID("p1"), admissiontest.WithLabels(ok)).JSON())
		var raw struct {
			Response struct {
				Patch     string `json:"patch"`
				PatchType string `json:"patchType"`
			} `json:"response"`
		}
		if err := json.Unmarshal(body, &raw); err != nil || status != 200 {
			t.Fatalf("%d %s %v", status, body, err)
		}
		patch, err := base64.StdEncoding.DecodeString(raw.Response.Patch)
		if err != nil {
			t.Fatal(err)
		}
		var ops []map[string]any
		if err := json.Unmarshal(patch, &ops); err != nil {
			t.Fatalf("patch is not a JSON array: %s", patch)
		}
		if raw.Response.PatchType != "JSONPatch" || len(ops) != 1 || ops[0]["op"] != "add" || ops[0]["path"] != "/metadata/labels/warden.io~1mutated" || ops[0]["value"] != "true" {
			t.Errorf("patch = %s (%s)", patch, raw.Response.PatchType)
		}
	})

	t.Run("monitor mode logs what it would have done", func(t *testing.T) {
		ts.review(t, "/validate/mutate-monitor", admissiontest.New(admissiontest.WithUID("m1"), admissiontest.WithLabels(ok)).JSON())
		logs := ts.logs.String()
		if !strings.Contains(logs, `msg="policy evaluation (monitor mode)" policy_id=mutate-monitor`) || !strings.Contains(logs, "mutated_object=") {
			t.Errorf("no monitor-mode log with the mutated object:\n%s", logs)
		}
	})

	t.Run("raw", func(t *testing.T) {
		status, body := ts.post(t, "/validate_raw/raw", "application/json", []byte(`{"request":{"uid":"r1","user":"alice","action":"eat","resource":"banana"}}`))
		if status != 200 || !strings.Contains(string(body), `"uid":"r1"`) || !strings.Contains(string(body), `resource banana is forbidden`) || !strings.HasPrefix(string(body), `{"response":`) {
			t.Errorf("%d %s", status, body)
		}
		status, body = ts.post(t, "/validate_raw/raw", "application/json", []byte(`{"request":{"user":"alice","resource":"apple"}}`))
		if status != 200 || !strings.Contains(string(body), `"allowed":true`) {
			t.Errorf("%d %s", status, body)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		// Its own evaluations: a rejection in a namespace of its own, counted
		// once, a mutation in monitor mode, a failure.
		ts.review(t, "/validate/labels", admissiontest.New(admissiontest.WithUID("x1"), admissiontest.WithNamespace("metrics"), admissiontest.WithLabels(bad)).JSON())
		ts.review(t, "/validate/mutate-monitor", admissiontest.New(admissiontest.WithUID("x2"), admissiontest.WithLabels(ok)).JSON())
		ts.review(t, "/validate/trap", admissiontest.New(admissiontest.WithUID("x3"), admissiontest.WithLabels(ok)).JSON())
		resp, err := http.Get(ts.ready + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{
			`kubewarden_policy_evaluations_total{accepted="false",mutated="false",policy_mode="protect",policy_name="labels",request_origin="validate",resource_kind="Pod",resource_namespace="metrics",resource_request_operation="CREATE"} 1`,
			`kubewarden_policy_evaluations_total{accepted="true",mutated="true",policy_mode="monitor",policy_name="mutate-monitor"`,
			`kubewarden_policy_evaluations_total{accepted="false",error_code="500",mutated="false",policy_mode="protect",policy_name="trap"`,
			`kubewarden_policy_evaluation_latency_milliseconds_bucket{`,
		} {
			if !strings.Contains(string(body), want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

func TestBadRequests(t *testing.T) {
	opts := testOptions(t, writePolicies(t, "labels: {module: {labels}}\n"))
	opts.MaxRequestBodySize = 16 << 20
	ts := startServer(t, opts)
	valid := admissiontest.New(admissiontest.WithUID("u")).JSON()
	big := append([]byte(`{"request":{"uid":"x","object":{"data":"`), bytes.Repeat([]byte("a"), 50<<20)...)
	big = append(big, `"}}}`...)
	tests := []struct {
		name        string
		path        string
		contentType string
		body        []byte
		status      int
		message     string
	}{
		{"malformed", "/validate/labels", "application/json", []byte(`{"request": {"uid": }`), 400, "Failed to parse the request body as JSON: "},
		{"truncated", "/validate/labels", "application/json", valid[:len(valid)/2], 400, "Failed to parse the request body as JSON: "},
		{"empty body", "/validate/labels", "application/json", nil, 400, "Failed to parse the request body as JSON: "},
		{"not an object", "/validate/labels", "application/json", []byte(`[1,2]`), 422, "Failed to deserialize the JSON body into the target type: "},
		{"no request", "/validate/labels", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1"}`), 422, "Failed to deserialize the JSON body into the target type: "},
		{"wrong field type", "/validate/labels", "application/json", []byte(`{"request":{"uid":1}}`), 422, "Failed to deserialize the JSON body into the target type: "},
		{"wrong content type", "/validate/labels", "text/plain", valid, 415, "Expected request with `Content-Type: application/json`"},
		{"unknown policy", "/validate/nope", "application/json", valid, 404, "unknown policy: nope"},
		{"unknown group member", "/validate/labels/member", "application/json", valid, 404, "unknown policy: labels/member"},
		{"unknown raw policy", "/validate_raw/nope", "application/json", []byte(`{"request":{}}`), 404, "unknown policy: nope"},
		{"raw without request", "/validate_raw/labels", "application/json", []byte(`{}`), 422, "Failed to deserialize the JSON body into the target type: "},
		{"50 MB body", "/validate/labels", "application/json", big, 413, "Failed to buffer the request body: length limit exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := ts.post(t, tt.path, tt.contentType, tt.body)
			var e struct {
				Message string `json:"message"`
				Status  int    `json:"status"`
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("error body is not JSON: %s", body)
			}
			if status != tt.status || e.Status != tt.status || !strings.HasPrefix(e.Message, tt.message) {
				t.Errorf("got %d %q, want %d %q", status, e.Message, tt.status, tt.message)
			}
		})
	}
	// And the server still answers.
	if resp := ts.review(t, "/validate/labels", valid); !resp.Allowed {
		t.Errorf("after bad requests: %+v", resp)
	}
	status, _ := ts.post(t, "/validate/labels", "application/json", nil)
	if status != 400 {
		t.Errorf("GET-like empty post: %d", status)
	}
}

// TestLoopingPolicyDoesNotBlockOthers keeps a looping policy busy on every
// slot it may take and checks that another policy answers meanwhile: its
// requests all complete before the looping ones do.
func TestLoopingPolicyDoesNotBlockOthers(t *testing.T) {
	opts := testOptions(t, writePolicies(t, "labels: {module: {labels}}\nloop: {module: {loop}, timeoutEvalSeconds: 3}\n"))
	ts := startServer(t, opts)
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i := 0; i < 2*opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := ts.review(t, "/validate/loop", admissiontest.New(admissiontest.WithUID("loop")).JSON())
			if resp.Status == nil || !strings.Contains(resp.Status.Message, "exceeded the allowed execution time") {
				t.Errorf("loop: %+v", resp.Status)
			}
			mu.Lock()
			order = append(order, "loop")
			mu.Unlock()
		}()
	}
	time.Sleep(200 * time.Millisecond) // let the loops start; correctness does not depend on it
	for i := 0; i < 20; i++ {
		if resp := ts.review(t, "/validate/labels", admissiontest.New(admissiontest.WithUID("ok")).JSON()); !resp.Allowed {
			t.Fatalf("labels: %+v", resp)
		}
	}
	mu.Lock()
	loopsDone := len(order)
	mu.Unlock()
	if loopsDone != 0 {
		t.Errorf("the labels policy waited for %d looping evaluations to end", loopsDone)
	}
	wg.Wait()
}

// TestShutdownInterruptsLoops stops a server while a looping evaluation
// with a long time limit runs and a good one waits behind nothing: the good
// request is answered, the loop is interrupted and answered, and Serve
// returns long before the loop's time limit.
func TestShutdownInterruptsLoops(t *testing.T) {
	opts := testOptions(t, writePolicies(t, "labels: {module: {labels}}\nloop: {module: {loop}, timeoutEvalSeconds: 600}\n"))
	ts := startServer(t, opts)
	loopAnswer := make(chan *admission.Response, 1)
	go func() {
		loopAnswer <- ts.review(t, "/validate/loop", admissiontest.New(admissiontest.WithUID("loop")).JSON())
	}()
	time.Sleep(200 * time.Millisecond) // let the loop start; correctness does not depend on it
	stopped := make(chan struct{})
	go func() {
		ts.stop()
		close(stopped)
	}()
	select {
	case resp := <-loopAnswer:
		if resp.Allowed || resp.Status == nil || !strings.Contains(resp.Status.Message, "the policy server is shutting down") {
			t.Errorf("the interrupted loop answered %+v", resp.Status)
		}
	case <-time.After(5 * time.Minute):
		t.Fatal("the looping request was not answered after the shutdown began")
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Minute):
		t.Fatal("Serve did not return")
	}
}

func TestStartupFailures(t *testing.T) {
	dir := t.TempDir()
	notWasm := filepath.Join(dir, "not.wasm")
	if err := os.WriteFile(notWasm, []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(policybuild.ForTest(t, "labels"))
	if err != nil {
		t.Fatal(err)
	}
	stripped, err := wasm.WithoutCustomSection(b, metadata.SectionName)
	if err != nil {
		t.Fatal(err)
	}
	noMeta := filepath.Join(dir, "nometa.wasm")
	if err := os.WriteFile(noMeta, stripped, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, policies, want string
	}{
		{"invalid settings", "labels: {module: {labels}, settings: {denied_labels: 3}}",
			`policy "labels": Policy settings are invalid: denied_labels must be a list of strings`},
		{"not wasm", "x: {module: file://" + notWasm + "}", "not a WebAssembly module"},
		{"no metadata", "x: {module: file://" + noMeta + "}", "Policy is missing protocol version, which is required for KubewardenWapc execution mode"},
		{"missing file", "x: {module: file://" + dir + "/missing.wasm}", "no such file or directory"},
		{"registry down", "x: {module: registry://127.0.0.1:1/policies/pod-privileged:v1.0.0}", "fetching registry://127.0.0.1:1/policies/pod-privileged:v1.0.0: "},
		{"group expression names an unknown member", "g: {expression: 'a() && b()', message: m, policies: {a: {module: {labels}}}}",
			`policy "g": g: ERROR: <input>:1:9: undeclared reference to 'b'`},
		{"group member with invalid settings", "g: {expression: 'a() && b()', message: m, policies: {a: {module: {labels}}, b: {module: {labels}, settings: {denied_labels: 3}}}}",
			`policy "g": g/b: settings not valid: Policy settings are invalid: denied_labels must be a list of strings`},
		{"bad yaml", "labels: [", "policies.yml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := startFailure(t, testOptions(t, writePolicies(t, tt.policies)))
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// startFailure creates a server that must fail to load its policies, and
// returns the error.
func startFailure(t *testing.T, opts policyserver.Options) error {
	t.Helper()
	srv, err := policyserver.New(context.Background(), opts, slog.New(slog.DiscardHandler))
	if err == nil {
		srv.Close(context.Background())
		t.Fatal("the server started")
	}
	return err
}

func TestContinueOnErrors(t *testing.T) {
	opts := testOptions(t, writePolicies(t, `
good: {module: {labels}, settings: {denied_labels: [forbidden]}}
bad-settings: {module: {labels}, settings: {denied_labels: 3}}
bad-group: {expression: "a() && b()", message: m, policies: {a: {module: {labels}}, b: {module: {labels}, settings: {denied_labels: 3}}}}
`))
	opts.ContinueOnErrors = true
	ts := startServer(t, opts)
	resp := ts.review(t, "/validate/bad-settings", admissiontest.New(admissiontest.WithUID("u")).JSON())
	if resp.Allowed || resp.Status == nil || resp.Status.Code != 500 ||
		resp.Status.Message != "Policy settings are invalid: denied_labels must be a list of strings" {
		t.Errorf("broken policy answered %+v %+v", resp, resp.Status)
	}
	if resp := ts.review(t, "/validate/good", admissiontest.New(admissiontest.WithUID("u"), admissiontest.WithLabels(map[string]string{"forbidden": "x"})).JSON()); resp.Allowed {
		t.Error("the working policy stopped working")
	}
	resp = ts.review(t, "/validate/bad-group", admissiontest.New(admissiontest.WithUID("u")).JSON())
	if resp.Allowed || resp.Status == nil || resp.Status.Code != 500 ||
		resp.Status.Message != "bad-group/b: settings not valid: Policy settings are invalid: denied_labels must be a list of strings" {
		t.Errorf("broken group answered %+v %+v", resp, resp.Status)
	}
	if resp := ts.review(t, "/validate/bad-group/a", admissiontest.New(admissiontest.WithUID("u")).JSON()); !resp.Allowed {
		t.Errorf("the group's working member answered %+v", resp.Status)
	}
	m, err := http.Get(ts.ready + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(m.Body)
	m.Body.Close()
	if !strings.Contains(string(body), `initialization_error="Policy settings are invalid: denied_labels must be a list of strings",policy_name="bad-settings"`) {
		t.Errorf("no initialization-error metric:\n%s", body)
	}
}

func TestMutualTLS(t *testing.T) {
	clientCA := pkitest.NewCA(t, "client-ca")
	dir := t.TempDir()
	caFile := filepath.Join(dir, "client-ca.pem")
	if err := os.WriteFile(caFile, clientCA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	opts := testOptions(t, writePolicies(t, "labels: {module: {labels}}\n"))
	opts.ClientCAFiles = []string{caFile}
	ts := startServer(t, opts)

	if _, err := ts.client.Post(ts.base+"/validate/labels", "application/json", bytes.NewReader(admissiontest.New(admissiontest.WithUID("u"), admissiontest.WithNamespace("d")).JSON())); err == nil {
		t.Error("a client without a certificate was served")
	}
	tr := ts.client.Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.Certificates = []tls.Certificate{clientCA.Client(t, "apiserver").TLSCertificate(t)}
	ts.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	if resp := ts.review(t, "/validate/labels", admissiontest.New(admissiontest.WithUID("u"), admissiontest.WithNamespace("d")).JSON()); !resp.Allowed {
		t.Errorf("client with a certificate: %+v", resp)
	}
}
