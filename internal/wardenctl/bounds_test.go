package wardenctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunBounds covers run's bounds: the size of the request file, and the
// caps on the policy's host calls and answers, with the exit code of an
// evaluation that failed (1, the response printed) against one that
// rejected (0).
func TestRunBounds(t *testing.T) {
	hostile := policy(t, "hostile")
	clean := requestFile(t, `{"app": "web"}`, false)
	big := filepath.Join(t.TempDir(), "big.json")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: the test holds no such file in memory, nor should wardenctl.
	if err := f.Truncate(defaultMaxRequestFileBytes + 1); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	tests := []struct {
		name    string
		args    []string
		code    int
		allowed bool   // of the response printed, when there is one
		message string // in the response's status message
		wantErr string // in the last line of stderr
	}{
		{name: "request file over the default limit", args: []string{"run", "-r", big, hostile}, code: 1,
			wantErr: "is 16777217 bytes, over the limit of 16777216 bytes (--max-request-file-bytes)"},
		{name: "request file over the limit given", args: []string{"run", "--max-request-file-bytes", "100", "-r", clean, hostile}, code: 1,
			wantErr: "over the limit of 100 bytes (--max-request-file-bytes)"},
		{name: "host call over the cap: the policy gets the error", code: 0, allowed: true,
			args:    []string{"run", "--max-host-call-payload-bytes", "4096", "--settings-json", `{"log_bytes": 100000}`, "-r", clean, hostile},
			message: "log failed: the host call's payload of 100"},
		{name: "answer over the cap: an evaluation that failed", code: 1,
			args:    []string{"run", "--max-policy-response-bytes", "1000", "--settings-json", `{"response_bytes": 5000}`, "-r", clean, hostile},
			message: "over the limit of 1000 bytes per response (--max-policy-response-bytes)",
			wantErr: "failed: internal server error: the policy's response is 5030 bytes"},
		{name: "answer under the cap", code: 0, allowed: true,
			args:    []string{"run", "--max-policy-response-bytes", "10000", "--settings-json", `{"response_bytes": 5000}`, "-r", clean, hostile},
			message: "xxxxx"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newEnv(t).run(tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\n%.2000s", r.code, tc.code, r)
			}
			if tc.wantErr != "" {
				checkError(t, r, tc.wantErr)
			}
			if tc.message == "" {
				return
			}
			resps := decodeResponses(t, r.stdout)
			if len(resps) != 1 {
				t.Fatalf("%d responses, want 1\n%.2000s", len(resps), r)
			}
			if resps[0].Allowed != tc.allowed || resps[0].Status == nil || !strings.Contains(resps[0].Status.Message, tc.message) {
				t.Errorf("response %+v, want allowed %t and a message with %q", resps[0], tc.allowed, tc.message)
			}
		})
	}
}
