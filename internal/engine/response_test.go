package engine

import (
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"testing"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/testkit"
)

func ptr[T any](v T) *T { return &v }

func TestToAdmissionResponse(t *testing.T) {
	pod := json.RawMessage(`{"metadata":{"name":"p","labels":{"a":"1"}}}`)
	tests := []struct {
		name      string
		base      json.RawMessage
		vr        validationResponse
		want      admission.Response
		wantPatch string
	}{
		{
			name: "accept without status",
			base: pod,
			vr:   validationResponse{Accepted: true},
			want: admission.Response{UID: "u", Allowed: true},
		},
		{
			name: "reject with message and code, warnings and annotations kept",
			base: pod,
			vr:   validationResponse{Message: ptr("no"), Code: ptr(int32(403)), Warnings: []string{"w"}, AuditAnnotations: map[string]string{"k": "v"}},
			want: admission.Response{UID: "u", Status: &admission.Status{Message: "no", Code: 403}, Warnings: []string{"w"}, AuditAnnotations: map[string]string{"k": "v"}},
		},
		{
			name: "status when only accepted with message",
			base: pod,
			vr:   validationResponse{Accepted: true, Message: ptr("fine")},
			want: admission.Response{UID: "u", Allowed: true, Status: &admission.Status{Message: "fine"}},
		},
		{
			name:      "mutation becomes a JSONPatch",
			base:      pod,
			vr:        validationResponse{Accepted: true, MutatedObject: json.RawMessage(`{"metadata":{"name":"p","labels":{"a":"1","b":"2"}}}`)},
			want:      admission.Response{UID: "u", Allowed: true, PatchType: "JSONPatch"},
			wantPatch: `[{"op":"add","path":"/metadata/labels/b","value":"2"}]`,
		},
		{
			name: "identical mutated object means no patch",
			base: pod,
			vr:   validationResponse{Accepted: true, MutatedObject: pod},
			want: admission.Response{UID: "u", Allowed: true},
		},
		{
			name: "mutation of a DELETE is refused",
			base: nil,
			vr:   validationResponse{Accepted: true, MutatedObject: pod},
			want: admission.Response{UID: "u", Status: &admission.Status{Message: msgDeleteMutation}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := toAdmissionResponse("u", tt.base, &tt.vr)
			if err != nil {
				t.Fatal(err)
			}
			if !patchEqual(t, got.Patch, tt.wantPatch) {
				t.Errorf("patch = %s, want %s", got.Patch, tt.wantPatch)
			}
			got.Patch = nil
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
}

// patchEqual compares two patches by JSON value; no patch equals no patch.
func patchEqual(t *testing.T, a []byte, b string) bool {
	t.Helper()
	if len(a) == 0 || b == "" {
		return len(a) == 0 && b == ""
	}
	return testkit.JSONEqual(t, a, []byte(b))
}

func TestPostProcess(t *testing.T) {
	patched := func() *admission.Response {
		return &admission.Response{UID: "u", Allowed: true, Patch: []byte(`[]`), PatchType: "JSONPatch", Warnings: []string{"w"}}
	}
	rejected := func() *admission.Response {
		return &admission.Response{UID: "u", Status: &admission.Status{Message: "original", Code: 403}}
	}
	tests := []struct {
		name   string
		policy *Policy
		in     *admission.Response
		want   *admission.Response
	}{
		{
			name:   "monitor accepts and clears patch and status, keeps warnings",
			policy: &Policy{ID: "p", Mode: ModeMonitor},
			in:     patched(),
			want:   &admission.Response{UID: "u", Allowed: true, Warnings: []string{"w"}},
		},
		{
			name:   "monitor turns a rejection into an acceptance",
			policy: &Policy{ID: "p", Mode: ModeMonitor, Message: "custom"},
			in:     rejected(),
			want:   &admission.Response{UID: "u", Allowed: true},
		},
		{
			name:   "protect without allowedToMutate rejects a mutation",
			policy: &Policy{ID: "p", Mode: ModeProtect},
			in:     patched(),
			want: &admission.Response{UID: "u", Warnings: []string{"w"}, Status: &admission.Status{
				Message: "Request rejected by policy p. The policy attempted to mutate the request, but it is currently configured to not allow mutations."}},
		},
		{
			name:   "allowedToMutate keeps the patch",
			policy: &Policy{ID: "p", Mode: ModeProtect, AllowedToMutate: true},
			in:     patched(),
			want:   patched(),
		},
		{
			name:   "custom message replaces the rejection and keeps the original as a cause",
			policy: &Policy{ID: "p", Mode: ModeProtect, Message: "custom"},
			in:     rejected(),
			want: &admission.Response{UID: "u", Status: &admission.Status{Message: "custom", Code: 403,
				Details: &admission.StatusDetails{Causes: []admission.Cause{{Message: "original"}}}}},
		},
		{
			name:   "custom message does not touch an acceptance",
			policy: &Policy{ID: "p", Mode: ModeProtect, Message: "custom"},
			in:     &admission.Response{UID: "u", Allowed: true},
			want:   &admission.Response{UID: "u", Allowed: true},
		},
		{
			name:   "mutation gate then custom message",
			policy: &Policy{ID: "p", Mode: ModeProtect, Message: "custom"},
			in:     patched(),
			want: &admission.Response{UID: "u", Warnings: []string{"w"}, Status: &admission.Status{Message: "custom",
				Details: &admission.StatusDetails{Causes: []admission.Cause{{Message: "Request rejected by policy p. The policy attempted to mutate the request, but it is currently configured to not allow mutations."}}}}},
		},
	}
	e := &Engine{logger: slog.New(slog.DiscardHandler)}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := e.postProcess(context.Background(), tt.policy, tt.in, nil)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestValidationInput(t *testing.T) {
	got := validationRequest(request{body: json.RawMessage(`{"uid":"x"}`)}, json.RawMessage(`{"a":1}`))
	var v map[string]any
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatalf("invalid JSON %s: %v", got, err)
	}
	if string(got) != `{"request":{"uid":"x"},"settings":{"a":1}}` {
		t.Errorf("got %s", got)
	}
}
