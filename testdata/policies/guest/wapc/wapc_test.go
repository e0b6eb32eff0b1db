package wapc

import (
	"errors"
	"testing"
)

func TestDispatch(t *testing.T) {
	Register(map[string]Handler{
		"echo": func(p []byte) ([]byte, error) { return p, nil },
		"fail": func([]byte) ([]byte, error) { return nil, errors.New("boom") },
	})
	tests := []struct {
		op, payload string
		want        string
		wantErr     string
	}{
		{op: "protocol_version", want: `"v1"`},
		{op: "echo", payload: `{"a":1}`, want: `{"a":1}`},
		{op: "fail", wantErr: "boom"},
		{op: "validate", wantErr: "Could not find function validate"},
	}
	for _, tt := range tests {
		t.Run(tt.op, func(t *testing.T) {
			got, err := dispatch(tt.op, []byte(tt.payload))
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("dispatch(%q) error = %v, want %q", tt.op, err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("dispatch(%q) = %s, %v; want %s", tt.op, got, err, tt.want)
			}
		})
	}
}
