package admission_test

import (
	"os"
	"testing"

	"github.com/wardenhq/warden/internal/admission"
)

// BenchmarkDecodeReview decodes the load test's 1.6 KB Pod review.
func BenchmarkDecodeReview(b *testing.B) {
	body, err := os.ReadFile("../../hack/loadtest/testdata/pod-review.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		req, err := admission.DecodeReview(body)
		if err != nil {
			b.Fatal(err)
		}
		req.Release() // as the server does once the request is answered
	}
}
