package policyserver_test

import (
	"maps"
	"net/http"
	"testing"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/observability/otlptest"
)

const tracingPolicies = `
labels:
  module: {labels}
  settings: {denied_labels: [forbidden]}
labels-monitor:
  module: {labels}
  policyMode: monitor
  settings: {denied_labels: [forbidden]}
raw:
  module: {raw}
  settings: {forbidden_resources: [banana]}
`

// TestTracingSpans serves requests with --log-fmt otlp, exporting to a real
// OTLP/gRPC collector configured by OTEL_EXPORTER_OTLP_ENDPOINT, and checks
// the spans it receives once the server stops (and flushes): one per request
// with Kubewarden's names and attributes, and a child per evaluation.
func TestTracingSpans(t *testing.T) {
	tests := []struct {
		name, logLevel string
		wantSpans      bool
	}{
		{name: "info", logLevel: "info", wantSpans: true},
		// Kubewarden's spans are info-level: its log filter drops them.
		{name: "warn exports nothing", logLevel: "warn", wantSpans: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			collector := otlptest.Start(t)
			for k, v := range map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": collector.Endpoint, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "",
				"OTEL_SERVICE_NAME": "", "OTEL_RESOURCE_ATTRIBUTES": "", "OTEL_TRACES_SAMPLER": "",
				"HOSTNAME": "policy-server-default-0",
			} {
				t.Setenv(k, v)
			}
			opts := testOptions(t, writePolicies(t, tracingPolicies))
			opts.LogFormat, opts.LogLevel = "otlp", tt.logLevel
			ts := startServer(t, opts)

			bad := map[string]string{"forbidden": "yes"}
			ts.review(t, "/validate/labels", admissiontest.New(admissiontest.WithUID("uid-reject"), admissiontest.WithSubResource("ephemeralcontainers"),
				admissiontest.WithLabels(bad)).JSON())
			ts.review(t, "/validate/labels-monitor", admissiontest.New(admissiontest.WithUID("uid-monitor"), admissiontest.WithLabels(bad)).JSON())
			ts.review(t, "/audit/labels", admissiontest.New(admissiontest.WithUID("uid-audit"), admissiontest.WithNamespace("")).JSON())
			ts.review(t, "/validate_raw/raw", []byte(`{"request":{"uid":"r1","resource":"banana"}}`))
			if status, body := ts.post(t, "/validate/missing", "application/json", admissiontest.New(admissiontest.WithUID("uid-404")).JSON()); status != http.StatusNotFound {
				t.Fatalf("unknown policy: %d %s", status, body)
			}
			if status, body := ts.post(t, "/validate/labels", "application/json", []byte(`{`)); status != http.StatusBadRequest {
				t.Fatalf("bad JSON: %d %s", status, body)
			}
			ts.stop()

			spans := collector.Spans()
			if !tt.wantSpans {
				if len(spans) != 0 {
					t.Errorf("received %d spans, want none", len(spans))
				}
				return
			}
			pod := func(uid, namespace string) map[string]any {
				return map[string]any{
					"host": "policy-server-default-0", "request_uid": uid, "name": "nginx", "namespace": namespace,
					"operation": "CREATE", "subresource": "", "kind_group": "", "kind_version": "v1", "kind": "Pod",
					"resource_group": "", "resource_version": "v1", "resource": "pods",
				}
			}
			with := func(m map[string]any, kvs ...any) map[string]any {
				m = maps.Clone(m)
				for i := 0; i < len(kvs); i += 2 {
					m[kvs[i].(string)] = kvs[i+1]
				}
				return m
			}
			evaluation := func(policy, mode, origin string, accepted bool) map[string]any {
				return map[string]any{
					"policy_name": policy, "policy_mode": mode, "accepted": accepted, "mutated": false,
					"resource_kind": "Pod", "resource_request_operation": "CREATE", "request_origin": origin,
					"resource_namespace": "default",
				}
			}
			// By request uid (or policy id): the request span, and its child.
			wants := []struct {
				name        string
				attrs       map[string]any
				child       map[string]any // nil: no child span
				description string
			}{
				{
					description: "rejected", name: "validation",
					attrs: with(pod("uid-reject", "default"), "subresource", "ephemeralcontainers", "policy_id", "labels", "allowed", false,
						"mutated", false, "response_message", "label forbidden is denied"),
					child: evaluation("labels", "protect", "validate", false),
				},
				{
					// The request span shows the answer sent; its child the policy's own.
					description: "monitor mode", name: "validation",
					attrs: with(pod("uid-monitor", "default"), "policy_id", "labels-monitor", "allowed", true, "mutated", false),
					child: evaluation("labels-monitor", "monitor", "validate", false),
				},
				{
					description: "audit, cluster scoped", name: "audit",
					attrs: with(pod("uid-audit", ""), "policy_id", "labels", "allowed", true, "mutated", false),
					child: func() map[string]any {
						m := evaluation("labels", "protect", "audit", true)
						delete(m, "resource_namespace")
						return m
					}(),
				},
				{
					description: "raw", name: "validation_raw",
					attrs: map[string]any{"host": "policy-server-default-0", "policy_id": "raw", "allowed": false,
						"mutated": false, "response_message": "resource banana is forbidden"},
					child: map[string]any{"policy_name": "raw", "policy_mode": "protect", "accepted": false, "mutated": false},
				},
				{
					// The request is recorded before the policy is looked up, as in Kubewarden.
					description: "unknown policy", name: "validation",
					attrs: with(pod("uid-404", "default"), "policy_id", "missing"),
				},
			}
			wantTotal := 0
			for _, w := range wants {
				wantTotal++
				if w.child != nil {
					wantTotal++
				}
			}
			if len(spans) != wantTotal {
				for _, s := range spans {
					t.Logf("received %s %v", s.GetName(), otlptest.Attributes(s.GetAttributes()))
				}
				t.Fatalf("received %d spans, want %d (none for the request that did not decode)", len(spans), wantTotal)
			}
			for _, w := range wants {
				t.Run(w.description, func(t *testing.T) {
					var parent *otlptest.Span
					for i := range spans {
						if spans[i].GetName() == w.name && maps.Equal(otlptest.Attributes(spans[i].GetAttributes()), w.attrs) {
							parent = &spans[i]
						}
					}
					if parent == nil {
						for _, s := range spans {
							t.Logf("received %s %v", s.GetName(), otlptest.Attributes(s.GetAttributes()))
						}
						t.Fatalf("no span %s with %v", w.name, w.attrs)
					}
					if len(parent.GetParentSpanId()) != 0 {
						t.Errorf("the request span has a parent")
					}
					if got := otlptest.Attributes(parent.Resource.GetAttributes())["service.name"]; got != "warden-policy-server" {
						t.Errorf("service.name = %v, want warden-policy-server", got)
					}
					var children []otlptest.Span
					for _, s := range spans {
						if string(s.GetParentSpanId()) == string(parent.GetSpanId()) {
							children = append(children, s)
						}
					}
					switch {
					case w.child == nil && len(children) != 0:
						t.Errorf("%d child spans, want none", len(children))
					case w.child == nil:
					case len(children) != 1:
						t.Errorf("%d child spans, want 1", len(children))
					case children[0].GetName() != "validate" || !maps.Equal(otlptest.Attributes(children[0].GetAttributes()), w.child):
						t.Errorf("child span %s %v, want validate %v", children[0].GetName(), otlptest.Attributes(children[0].GetAttributes()), w.child)
					}
				})
			}
		})
	}
}
