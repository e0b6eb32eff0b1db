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

// BenchmarkDecodeRawReview decodes the load test's Pod review as the body of
// a raw review (/validate_raw): the request and its uid.
func BenchmarkDecodeRawReview(b *testing.B) {
	body, err := os.ReadFile("../../hack/loadtest/testdata/pod-review.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		req, err := admission.DecodeRawReview(body)
		if err != nil || req.UID == "" {
			b.Fatalf("%+v, %v", req, err)
		}
		req.Release() // as the server does once the request is answered
	}
}
