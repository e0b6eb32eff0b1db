package policyserver_test

import (
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
)

// TestGuestBounds checks that the policy server's flags reach its runtime:
// a host call over --max-host-call-payload-bytes is refused (the policy
// answers with the error it got), and an answer over
// --max-policy-response-bytes is an error answer naming the cap, while the
// same policy within the bounds answers as it says.
func TestGuestBounds(t *testing.T) {
	opts := testOptions(t, writePolicies(t, `
log: {module: {hostile}, settings: {log_bytes: 100000}}
small: {module: {hostile}, settings: {response_bytes: 1000}}
large: {module: {hostile}, settings: {response_bytes: 100000}}
`))
	opts.MaxHostCallBytes = 10000
	opts.MaxResponseBytes = 50000
	ts := startServer(t, opts)
	review := admissiontest.New(admissiontest.WithUID("u")).JSON()
	tests := []struct {
		id      string
		allowed bool
		message string
		code    int32
	}{
		{id: "log", allowed: true, message: "log failed: the host call's payload of 100"},
		{id: "small", allowed: true, message: strings.Repeat("x", 1000)},
		{id: "large", message: "internal server error: the policy's response is 100030 bytes, over the limit of 50000 bytes per response (--max-policy-response-bytes)", code: 500},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			resp := ts.review(t, "/validate/"+tt.id, review)
			if resp.Allowed != tt.allowed || resp.Status == nil || !strings.Contains(resp.Status.Message, tt.message) || resp.Status.Code != tt.code {
				t.Errorf("answer %+v %+v, want allowed %t, code %d and a message with %.80q", resp, resp.Status, tt.allowed, tt.code, tt.message)
			}
		})
	}
}
