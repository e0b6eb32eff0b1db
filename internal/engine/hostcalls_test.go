package engine

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/metadata"
)

// echoCaps is a host capabilities provider that answers every call with
// "<namespace>/<operation> <payload>".
type echoCaps struct{}

func (echoCaps) HostCall(_ context.Context, namespace, operation string, payload []byte) ([]byte, error) {
	return []byte(namespace + "/" + operation + " " + string(payload)), nil
}

func TestHostCalls(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	ociOnly := &hostCalls{policyID: "p", allowed: []string{"oci/*"}, logger: logger, caps: echoCaps{}}
	kube := &hostCalls{policyID: "k", allowed: []string{"kubernetes/*"}, logger: logger, caps: echoCaps{},
		resources: []ContextAwareResource{{APIVersion: "v1", Kind: "Namespace"}}}
	noProvider := &hostCalls{policyID: "n", allowed: []string{"*"}, logger: logger}
	tests := []struct {
		name            string
		h               *hostCalls
		ns, op, payload string
		want, wantErr   string
	}{
		{name: "tracing is always allowed", h: ociOnly, ns: "tracing", op: "log", payload: `{"level":"info","message":"hello","extra":1}`},
		{name: "malformed log payload does not fail", h: ociOnly, ns: "tracing", op: "log", payload: `not json`},
		{name: "unknown tracing operation", h: ociOnly, ns: "tracing", op: "print", wantErr: "unknown operation: print"},
		{name: "unknown namespace", h: ociOnly, ns: "filesystem", op: "read", wantErr: "unknown namespace: filesystem"},
		{name: "unknown operation", h: ociOnly, ns: "kubernetes", op: "delete", wantErr: "unknown operation: delete"},
		{name: "not granted", h: ociOnly, ns: "kubernetes", op: "can_i",
			wantErr: "Policy has not been granted access to the 'kubernetes/can_i' host capability. The violation has been reported."},
		{name: "granted: the provider answers", h: ociOnly, ns: "oci", op: "v1/manifest_digest", payload: `"busybox"`,
			want: `oci/v1/manifest_digest "busybox"`},
		{name: "granted resource", h: kube, ns: "kubernetes", op: "get_resource",
			payload: `{"api_version":"v1","kind":"Namespace","name":"a","disable_cache":false}`,
			want:    `kubernetes/get_resource {"api_version":"v1","kind":"Namespace","name":"a","disable_cache":false}`},
		{name: "resource not granted: get", h: kube, ns: "kubernetes", op: "get_resource",
			payload: `{"api_version":"v1","kind":"Secret","name":"a","namespace":"b","disable_cache":false}`,
			wantErr: "Policy has not been granted access to Kubernetes v1/Secret resources. The violation has been reported."},
		{name: "resource not granted: list all", h: kube, ns: "kubernetes", op: "list_resources_all",
			payload: `{"api_version":"apps/v1","kind":"Deployment"}`,
			wantErr: "Policy has not been granted access to Kubernetes apps/v1/Deployment resources. The violation has been reported."},
		{name: "resource not granted: list by namespace", h: kube, ns: "kubernetes", op: "list_resources_by_namespace",
			payload: `{"api_version":"v1","kind":"Pod","namespace":"a"}`,
			wantErr: "Policy has not been granted access to Kubernetes v1/Pod resources. The violation has been reported."},
		{name: "can_i is not gated by kind", h: kube, ns: "kubernetes", op: "can_i", payload: `{}`, want: `kubernetes/can_i {}`},
		{name: "the capability gate comes first", h: ociOnly, ns: "kubernetes", op: "get_resource", payload: `{"api_version":"v1","kind":"Namespace"}`,
			wantErr: "Policy has not been granted access to the 'kubernetes/get_resource' host capability. The violation has been reported."},
		{name: "undecodable kubernetes payload", h: kube, ns: "kubernetes", op: "list_resources_all", payload: `[`,
			wantErr: "decoding the kubernetes/list_resources_all request: unexpected end of JSON input"},
		{name: "no provider", h: noProvider, ns: "net", op: "v1/dns_lookup_host", payload: `"localhost"`,
			wantErr: "the 'net/v1/dns_lookup_host' host capability is not available: this evaluation has no host capabilities provider"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := tt.h.HostCall(context.Background(), "kubewarden", tt.ns, tt.op, []byte(tt.payload))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if string(out) != tt.want {
					t.Fatalf("answer %q, want %q", out, tt.want)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
		})
	}
	for _, want := range []string{
		`msg="policy log" policy_id=p message=hello extra=1`,
		`capability=kubernetes/can_i`,
		`msg="policy read a Kubernetes resource it was not granted" policy_id=k resource=v1/Secret`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

// TestContextAwareFromMetadata checks kwctl's --allow-context-aware: the
// policy reads the kinds of its module's metadata, not of its config.
func TestContextAwareFromMetadata(t *testing.T) {
	meta := &metadata.Metadata{ContextAwareResources: []metadata.ContextAwareKind{{APIVersion: "v1", Kind: "Namespace"}}}
	own := []ContextAwareResource{{APIVersion: "v1", Kind: "Pod"}}
	tests := []struct {
		name string
		c    *PolicyConfig
		meta *metadata.Metadata
		want []ContextAwareResource
	}{
		{name: "the config's", c: &PolicyConfig{ContextAwareResources: own}, meta: meta, want: own},
		{name: "the metadata's", c: &PolicyConfig{ContextAwareResources: own, ContextAwareFromMetadata: true}, meta: meta,
			want: []ContextAwareResource{{APIVersion: "v1", Kind: "Namespace"}}},
		{name: "no metadata", c: &PolicyConfig{ContextAwareFromMetadata: true}},
	}
	l := &loader{opts: Options{Logger: slog.New(slog.DiscardHandler)}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := l.hostCalls("p", tt.c, tt.meta).resources
			if len(got) != len(tt.want) {
				t.Fatalf("resources %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("resources %v, want %v", got, tt.want)
				}
			}
		})
	}
}
