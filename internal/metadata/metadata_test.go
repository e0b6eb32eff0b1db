package metadata

import (
	"errors"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/wasm"
)

func TestValidateForServer(t *testing.T) {
	tests := []struct {
		name    string
		meta    Metadata
		wantErr string
	}{
		{"waPC v1", Metadata{ProtocolVersion: "v1"}, ""},
		{"waPC without protocol", Metadata{}, "Policy is missing protocol version, which is required for KubewardenWapc execution mode"},
		{"waPC with Unknown protocol", Metadata{ProtocolVersion: "Unknown"}, "Policy uses protocol version Unknown but only V1 is supported"},
		{"wasi needs no protocol", Metadata{ExecutionMode: ModeWASI}, ""},
		{"unknown mode", Metadata{ExecutionMode: "jvm"}, `unknown execution mode "jvm"`},
		{"unknown policy type", Metadata{ProtocolVersion: "v1", PolicyType: "yaml"}, `unknown policy type "yaml"`},
		{"older minimum version", Metadata{ProtocolVersion: "v1", MinimumKubewardenVersion: "1.10.3"}, ""},
		{"same minor, later patch", Metadata{ProtocolVersion: "v1", MinimumKubewardenVersion: "1.36.9"}, ""},
		{"newer minimum version", Metadata{ProtocolVersion: "v1", MinimumKubewardenVersion: "1.37.0"}, "Policy required Kubewarden version 1.37.0 but is running on 1.36.0"},
		{"invalid minimum version", Metadata{ProtocolVersion: "v1", MinimumKubewardenVersion: "soon"}, `invalid minimumKubewardenVersion "soon"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.meta.ValidateForServer("1.36.0")
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestEmbedAndRead(t *testing.T) {
	module := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
	if _, err := FromModule(module); !errors.Is(err, ErrMissing) {
		t.Fatalf("error = %v, want ErrMissing", err)
	}
	m, err := Parse([]byte("protocolVersion: v1\nmutating: true\nexecutionMode: wasi\ncontextAware: false\nrules: [{apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [CREATE]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	annotated, err := Embed(module, m)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Embed(annotated, m) // replaces, never duplicates
	if err != nil {
		t.Fatal(err)
	}
	got, err := FromModule(again)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Mutating || got.Mode() != ModeWASI || got.Type() != PolicyTypeKubernetes || got.Rules[0].Resources[0] != "pods" {
		t.Errorf("read back %+v", got)
	}
	if len(again) != len(annotated) {
		t.Errorf("embedding twice grew the module: %d then %d bytes", len(annotated), len(again))
	}
	if _, err := FromModule([]byte("not wasm")); !errors.Is(err, wasm.ErrNotWasm) {
		t.Errorf("error = %v, want ErrNotWasm", err)
	}
}
