package engine

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/wasm"
)

// loadForBench loads the policies of doc, and reads the load test's Pod
// review.
func loadForBench(b *testing.B, doc string) (*Engine, []byte) {
	b.Helper()
	configs, err := ParsePolicies([]byte(doc))
	if err != nil {
		b.Fatal(err)
	}
	rt, err := wasm.NewRuntime(context.Background(), wasm.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rt.Close(context.Background()) })
	e, err := Load(context.Background(), configs, Options{Runtime: rt})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close(context.Background()) })
	body, err := os.ReadFile("../../hack/loadtest/testdata/pod-review.json")
	if err != nil {
		b.Fatal(err)
	}
	return e, body
}

// BenchmarkAdmissionPathCEL is the policy server's work for one request
// without HTTP: decode the load test's AdmissionReview, evaluate it with the
// load test's native CEL policy, encode the answer.
func BenchmarkAdmissionPathCEL(b *testing.B) {
	e, body := loadForBench(b, `
cel:
  module: builtin://cel
  settings:
    validations:
      - expression: "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged)"
        message: "privileged containers are not allowed"
      - expression: "has(object.metadata.labels) && 'app' in object.metadata.labels"
        message: "pods need an app label"
      - expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))"
        message: "images must not use the latest tag"
`)
	b.ReportAllocs()
	for b.Loop() {
		req, err := admission.DecodeReview(body)
		if err != nil {
			b.Fatal(err)
		}
		resp, err := e.Validate(context.Background(), "cel", req, OriginValidate)
		if err != nil || !resp.Allowed {
			b.Fatalf("got %+v, %v", resp, err)
		}
		if _, err := json.Marshal(admission.NewReview(resp)); err != nil {
			b.Fatal(err)
		}
		req.Release() // as the server does once it has answered
	}
}
