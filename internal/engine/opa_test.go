package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/rego/regotest"
	"github.com/wardenhq/warden/internal/wasm"
)

const regoDir = "../../testdata/rego/"

func newTestRuntime(t testing.TB) *wasm.Runtime {
	t.Helper()
	rt, err := wasm.NewRuntime(context.Background(), wasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

// regoPolicy names a Rego test policy and how it is built and run.
type regoPolicy struct {
	file, entrypoint, mode string
}

var (
	requiredLabels  = regoPolicy{"gatekeeper/required_labels.rego", "k8srequiredlabels/violation", metadata.ModeGatekeeper}
	disallowedTags  = regoPolicy{"gatekeeper/disallowed_tags.rego", "k8sdisallowedtags/violation", metadata.ModeGatekeeper}
	containerLimits = regoPolicy{"gatekeeper/container_limits.rego", "k8scontainerlimits/violation", metadata.ModeGatekeeper}
	unparsable      = regoPolicy{"gatekeeper/unparsable.rego", "unparsable/violation", metadata.ModeGatekeeper}
	conflict        = regoPolicy{"gatekeeper/conflict.rego", "conflict/violation", metadata.ModeGatekeeper}
	httpSend        = regoPolicy{"gatekeeper/http_send.rego", "httpsend/violation", metadata.ModeGatekeeper}
	loop            = regoPolicy{"gatekeeper/loop.rego", "loop/violation", metadata.ModeGatekeeper}
	reservedNS      = regoPolicy{"opa/reserved_namespaces.rego", "policy/main", metadata.ModeOPA}
	defaultTeam     = regoPolicy{"opa/default_team.rego", "policy/main", metadata.ModeOPA}
	noResponse      = regoPolicy{"opa/no_response.rego", "policy/main", metadata.ModeOPA}
)

// regoBuild builds p to wasm.
func regoBuild(t testing.TB, p regoPolicy) []byte {
	t.Helper()
	return regotest.Build(t, regoDir+p.file, p.entrypoint)
}

func (p regoPolicy) runner(t testing.TB, rt *wasm.Runtime, settings string, logger *slog.Logger) (runner, error) {
	t.Helper()
	mod, err := rt.CompileOPA(context.Background(), regoBuild(t, p))
	if err != nil {
		t.Fatal(err)
	}
	return newRegoRunner(context.Background(), rt, mod, p.mode, json.RawMessage(settings), nil, 2, logger)
}

func (p regoPolicy) mustRunner(t testing.TB, rt *wasm.Runtime, settings string, logger *slog.Logger) runner {
	t.Helper()
	r, err := p.runner(t, rt, settings, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.close(context.Background()) })
	return r
}

// pod is a Pod named name with labels (JSON) and containers (JSON objects).
func pod(name, labels string, containers ...string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"labels":%s},"spec":{"containers":[%s]}}`,
		name, labels, strings.Join(containers, ","))
}

func container(name, image, cpu, memory string) string {
	limits := map[string]string{}
	if cpu != "" {
		limits["cpu"] = cpu
	}
	if memory != "" {
		limits["memory"] = memory
	}
	l, _ := json.Marshal(limits)
	return fmt.Sprintf(`{"name":%q,"image":%q,"resources":{"limits":%s}}`, name, image, l)
}

// requestOf is the request of review that Engine.evaluate hands a runner.
func requestOf(tb testing.TB, review *admissiontest.Review) request {
	tb.Helper()
	return admissionRequest(review.Decode(tb))
}

// rawRequestOf is the request of a raw request, any JSON value, that
// Engine.evaluate hands a runner.
func rawRequestOf(raw string) request {
	return rawRequest(admission.DecodeRawRequest(json.RawMessage(raw)))
}

// answer evaluates req with r and settings and converts the result as the
// engine does.
func answer(ctx context.Context, r runner, req request, settings json.RawMessage) *admission.Response {
	vr, err := r.validate(ctx, nil, req, settings)
	if err != nil {
		return internalError("u1", err.Error())
	}
	resp, err := toAdmissionResponse("u1", req.object, vr)
	if err != nil {
		return internalError("u1", err.Error())
	}
	return resp
}

// sameMessage compares rejection messages as sets of ", "-separated parts:
// Rego sets have no order.
func sameMessage(got, want string) bool {
	g, w := strings.Split(got, ", "), strings.Split(want, ", ")
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}

func TestRegoRunners(t *testing.T) {
	rt := newTestRuntime(t)
	labelParams := `{"labels":[{"key":"owner"},{"key":"team","allowedRegex":"^[a-z]+$"}]}`
	tagParams := `{"tags":["latest","dev"],"exemptImages":["registry.internal/"]}`
	limitParams := `{"cpu":"1","memory":"1Gi"}`
	tests := []struct {
		name     string
		policy   regoPolicy
		settings string
		review   *admissiontest.Review
		raw      string // a raw request, instead of review
		want     admission.Response
		patch    string
	}{
		{
			name:     "gatekeeper violations are joined",
			policy:   requiredLabels,
			settings: labelParams,
			review:   admissiontest.New(admissiontest.WithName("web"), admissiontest.WithObject(pod("web", `{"team":"Blue"}`))),
			want: admission.Response{Status: &admission.Status{
				Message: `you must provide labels: {"owner"}, label <team: Blue> does not match the allowed regex ^[a-z]+$`}},
		},
		{
			name:     "gatekeeper without violations accepts",
			policy:   requiredLabels,
			settings: labelParams,
			review:   admissiontest.New(admissiontest.WithName("web"), admissiontest.WithObject(pod("web", `{"owner":"bob","team":"blue"}`))),
			want:     admission.Response{Allowed: true},
		},
		{
			name:     "disallowed and missing image tags",
			policy:   disallowedTags,
			settings: tagParams,
			review: admissiontest.New(admissiontest.WithName("web"), admissiontest.WithObject(pod("web", `{}`,
				container("app", "nginx:latest", "", ""), container("sidecar", "ghcr.io/acme/proxy", "", ""),
				container("internal", "registry.internal/tool:dev", "", "")))),
			want: admission.Response{Status: &admission.Status{Message: `container <app> uses a disallowed tag <nginx:latest>; ` +
				`disallowed tags are ["latest", "dev"], container <sidecar> does not name an image tag <ghcr.io/acme/proxy>`}},
		},
		{
			name:     "image tags allowed",
			policy:   disallowedTags,
			settings: tagParams,
			review:   admissiontest.New(admissiontest.WithName("web"), admissiontest.WithObject(pod("web", `{}`, container("app", "registry.example:5000/nginx:1.27", "", "")))),
			want:     admission.Response{Allowed: true},
		},
		{
			name:     "container limits above the maximum or unreadable",
			policy:   containerLimits,
			settings: limitParams,
			review: admissiontest.New(admissiontest.WithName("web"), admissiontest.WithObject(pod("web", `{}`,
				container("big", "nginx:1", "1500m", "2Gi"), container("odd", "nginx:1", "500m", "lots"),
				container("none", "nginx:1", "", "512Mi")))),
			want: admission.Response{Status: &admission.Status{Message: "container <big> memory limit <2Gi> is higher than the maximum allowed of <1Gi>, " +
				"container <big> cpu limit <1500m> is higher than the maximum allowed of <1>, " +
				"container <odd> memory limit <lots> cannot be parsed, container <none> has no cpu limit"}},
		},
		{
			name:     "container limits within the maximum",
			policy:   containerLimits,
			settings: limitParams,
			review:   admissiontest.New(admissiontest.WithName("web"), admissiontest.WithObject(pod("web", `{}`, container("app", "nginx:1", "500m", "1024Mi")))),
			want:     admission.Response{Allowed: true},
		},
		{
			name:     "gatekeeper refuses raw requests",
			policy:   requiredLabels,
			settings: labelParams,
			raw:      `{"uid":"u1","user":"alice"}`,
			want:     admission.Response{Status: &admission.Status{Message: "internal server error: Gatekeeper does not support raw validation requests", Code: 500}},
		},
		{
			name:   "a conflict fails the evaluation",
			policy: conflict,
			review: admissiontest.New(admissiontest.WithObject(`{"metadata":{"name":"d"},"spec":{"replicas":3}}`)),
			want: admission.Response{Status: &admission.Status{
				Message: "internal server error: policy aborted: conflict.rego:9:1: var assignment conflict", Code: 500}},
		},
		{
			name:     "opa rejection with message and code",
			policy:   reservedNS,
			settings: `{"reserved_namespaces":["kube-system"]}`,
			review:   admissiontest.New(admissiontest.WithNamespace("kube-system"), admissiontest.WithName("web"), admissiontest.WithObject(pod("web", `{}`))),
			want: admission.Response{Status: &admission.Status{Message: `namespace "kube-system" is reserved`, Code: 403},
				Warnings: []string{"web has no owner label"}},
		},
		{
			name:     "opa acceptance with warnings and audit annotations",
			policy:   reservedNS,
			settings: `{"reserved_namespaces":["kube-system"]}`,
			review:   admissiontest.New(admissiontest.WithName("web"), admissiontest.WithObject(pod("web", `{}`))),
			want: admission.Response{Allowed: true, Warnings: []string{"web has no owner label"},
				AuditAnnotations: map[string]string{"checked-by": "reserved-namespaces"}},
		},
		{
			name:     "opa raw request",
			policy:   reservedNS,
			settings: `{"reserved_namespaces":["kube-system"]}`,
			raw:      `{"uid":"u1","namespace":"kube-system","name":"job"}`,
			want: admission.Response{Status: &admission.Status{Message: `namespace "kube-system" is reserved`, Code: 403},
				Warnings: []string{"job has no owner label"}},
		},
		{
			name:   "opa result without a response",
			policy: noResponse,
			review: admissiontest.New(admissiontest.WithName("web"), admissiontest.WithObject(pod("web", `{}`))),
			want:   admission.Response{Status: &admission.Status{Message: "internal server error: cannot interpret OPA policy result", Code: 500}},
		},
		{
			name:     "opa patch",
			policy:   defaultTeam,
			settings: `{"team":"platform"}`,
			review:   admissiontest.New(admissiontest.WithName("web"), admissiontest.WithObject(pod("web", `{"owner":"bob"}`))),
			want:     admission.Response{Allowed: true, PatchType: admission.PatchTypeJSONPatch},
			patch:    `[{"op":"add","path":"/metadata/labels/team","value":"platform"}]`,
		},
		{
			name:     "opa patch of a DELETE",
			policy:   defaultTeam,
			settings: `{"team":"platform"}`,
			review:   admissiontest.New(admissiontest.WithOperation("DELETE"), admissiontest.WithObject("null")),
			want:     admission.Response{Status: &admission.Status{Message: msgDeleteMutation}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.policy.mustRunner(t, rt, tt.settings, nil)
			settings := tt.settings
			if settings == "" {
				settings = "{}"
			}
			req := rawRequestOf(tt.raw)
			if tt.raw == "" {
				req = requestOf(t, tt.review)
			}
			got := answer(context.Background(), r, req, json.RawMessage(settings))
			if got.Status != nil && tt.want.Status != nil && sameMessage(got.Status.Message, tt.want.Status.Message) {
				got.Status.Message = tt.want.Status.Message
			}
			if !patchEqual(t, got.Patch, tt.patch) {
				t.Errorf("patch = %s, want %s", got.Patch, tt.patch)
			}
			got.Patch, tt.want.UID = nil, "u1"
			if !reflect.DeepEqual(*got, tt.want) {
				gotJSON, _ := json.Marshal(got)
				wantJSON, _ := json.Marshal(tt.want)
				t.Errorf("response = %s\nwant       %s", gotJSON, wantJSON)
			}
		})
	}
}

func TestGatekeeperUnparsableResultAccepts(t *testing.T) {
	rt := newTestRuntime(t)
	var logs logtest.Buffer
	r := unparsable.mustRunner(t, rt, `{}`, slog.New(slog.NewTextHandler(&logs, nil)))
	got := answer(context.Background(), r, requestOf(t, admissiontest.New(admissiontest.WithName("web"), admissiontest.WithObject(pod("web", `{}`, container("app", "nginx:1", "", ""))))), json.RawMessage("{}"))
	if !got.Allowed || got.Status != nil {
		t.Errorf("response = %+v, want accepted without status", got)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "accepting the request") {
		t.Errorf("log = %q, want a warning that the request is accepted", logs.String())
	}
}

func TestRegoRunnerRefusesUnsupportedBuiltins(t *testing.T) {
	rt := newTestRuntime(t)
	_, err := httpSend.runner(t, rt, `{}`, nil)
	if err == nil || !strings.Contains(err.Error(), "http.send") {
		t.Fatalf("error = %v, want one naming http.send", err)
	}
}

func TestRegoRunnerDeadline(t *testing.T) {
	rt := newTestRuntime(t)
	r := loop.mustRunner(t, rt, `{}`, nil)
	values := make([]string, 1000)
	for i := range values {
		values[i] = fmt.Sprint(i)
	}
	obj := `{"metadata":{"name":"x"},"spec":{"values":[` + strings.Join(values, ",") + `]}}`
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	got := answer(ctx, r, requestOf(t, admissiontest.New(admissiontest.WithObject(obj))), json.RawMessage("{}"))
	want := "internal server error: " + wasm.ErrDeadlineExceeded.Error()
	if got.Allowed || got.Status == nil || got.Status.Message != want || got.Status.Code != 500 {
		t.Errorf("response = %+v, want rejected with %q", got, want)
	}
	got = answer(context.Background(), r, requestOf(t, admissiontest.New(admissiontest.WithObject(`{"spec":{"values":[1]}}`))), json.RawMessage("{}"))
	if !got.Allowed {
		t.Errorf("response after the deadline = %+v, want accepted", got)
	}
}

// TestRegoRunnerIsolation checks that evaluations on the same instances do
// not see each other: OPA data stays what it was loaded as, Gatekeeper
// parameters are those of each evaluation.
func TestRegoRunnerIsolation(t *testing.T) {
	rt := newTestRuntime(t)
	opa := reservedNS.mustRunner(t, rt, `{"reserved_namespaces":["kube-system"]}`, nil)
	gk := requiredLabels.mustRunner(t, rt, `{}`, nil)
	for i := range 3 {
		for _, ns := range []string{"kube-system", "default"} {
			got := answer(context.Background(), opa, requestOf(t, admissiontest.New(admissiontest.WithNamespace(ns), admissiontest.WithName("web"), admissiontest.WithObject(pod("web", `{"owner":"x"}`)))), json.RawMessage(`{}`))
			if got.Allowed != (ns == "default") || len(got.Warnings) != 0 {
				t.Errorf("round %d, namespace %s: response = %+v", i, ns, got)
			}
		}
		for _, params := range []string{`{"labels":[{"key":"owner"}]}`, `{"labels":[]}`} {
			got := answer(context.Background(), gk, requestOf(t, admissiontest.New(admissiontest.WithName("web"), admissiontest.WithObject(pod("web", `{}`)))), json.RawMessage(params))
			if got.Allowed != (params == `{"labels":[]}`) {
				t.Errorf("round %d, parameters %s: response = %+v", i, params, got)
			}
		}
	}
}

func TestRegoRunnerSettingsAlwaysValid(t *testing.T) {
	rt := newTestRuntime(t)
	r := requiredLabels.mustRunner(t, rt, `{}`, nil)
	if svr := r.validateSettings(context.Background(), nil, []byte(`{"labels":"not a list"}`)); !svr.Valid {
		t.Errorf("validateSettings = %+v, want valid", svr)
	}
}

// BenchmarkGatekeeperRequiredLabels measures one evaluation of a
// Gatekeeper-library-style policy that rejects, with sprintf and regex
// builtins.
func BenchmarkGatekeeperRequiredLabels(b *testing.B) {
	rt := newTestRuntime(b)
	settings := json.RawMessage(`{"labels":[{"key":"owner"},{"key":"team","allowedRegex":"^[a-z]+$"}]}`)
	r := requiredLabels.mustRunner(b, rt, string(settings), nil)
	in := requestOf(b, admissiontest.New(admissiontest.WithName("web"), admissiontest.WithObject(pod("web", `{"team":"Blue","app":"web"}`,
		container("app", "nginx:1.27", "500m", "256Mi")))))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		vr, err := r.validate(ctx, nil, in, settings)
		if err != nil || vr.Accepted {
			b.Fatalf("validate = %+v, %v; want a rejection", vr, err)
		}
	}
}
