package engine

import (
	"context"
	"os"
	"testing"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/wasm"
)

// BenchmarkGroup evaluates a group of three native CEL members that all
// accept, so each one runs.
func BenchmarkGroup(b *testing.B) {
	configs, err := ParsePolicies([]byte(`
group:
  expression: "no_latest() && labelled() && small()"
  message: rejected
  policies:
    no_latest: {module: builtin://cel, settings: {validations: [{expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))"}]}}
    labelled: {module: builtin://cel, settings: {validations: [{expression: "has(object.metadata.labels)"}]}}
    small: {module: builtin://cel, settings: {validations: [{expression: "object.spec.containers.size() < 10"}]}}
`))
	if err != nil {
		b.Fatal(err)
	}
	rt, err := wasm.NewRuntime(context.Background(), wasm.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(context.Background())
	e, err := Load(context.Background(), configs, Options{Runtime: rt})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(context.Background())
	body, err := os.ReadFile("../../hack/loadtest/testdata/pod-review.json")
	if err != nil {
		b.Fatal(err)
	}
	req, err := admission.DecodeReview(body)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := e.Validate(context.Background(), "group", req, OriginValidate)
		if err != nil || !resp.Allowed {
			b.Fatalf("got %+v, %v", resp, err)
		}
	}
}
