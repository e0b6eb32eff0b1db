package engine

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestHostCalls(t *testing.T) {
	var logs bytes.Buffer
	h := &hostCalls{policyID: "p", allowed: []string{"oci/*"}, logger: slog.New(slog.NewTextHandler(&logs, nil))}
	tests := []struct {
		name, ns, op, payload, wantErr string
	}{
		{name: "tracing is always allowed", ns: "tracing", op: "log", payload: `{"level":"info","message":"hello","extra":1}`},
		{name: "malformed log payload does not fail", ns: "tracing", op: "log", payload: `not json`},
		{name: "unknown tracing operation", ns: "tracing", op: "print", wantErr: "unknown operation: print"},
		{name: "unknown namespace", ns: "filesystem", op: "read", wantErr: "unknown namespace: filesystem"},
		{name: "unknown operation", ns: "kubernetes", op: "delete", wantErr: "unknown operation: delete"},
		{name: "not granted", ns: "kubernetes", op: "can_i",
			wantErr: "Policy has not been granted access to the 'kubernetes/can_i' host capability. The violation has been reported."},
		{name: "granted but not available", ns: "oci", op: "v1/verify", wantErr: "the 'oci/v1/verify' host capability is not available in this version of Warden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.HostCall(context.Background(), "kubewarden", tt.ns, tt.op, []byte(tt.payload))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
		})
	}
	if !strings.Contains(logs.String(), `msg="policy log" policy_id=p message=hello extra=1`) {
		t.Errorf("guest log not logged as expected:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `capability=kubernetes/can_i`) {
		t.Errorf("the violation was not reported:\n%s", logs.String())
	}
}
