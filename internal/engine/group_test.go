package engine

import (
	"context"
	"testing"

	"github.com/wardenhq/warden/internal/admission"
)

// BenchmarkGroup evaluates a group of three native CEL members that all
// accept, so each one runs.
func BenchmarkGroup(b *testing.B) {
	e, body := loadForBench(b, `
group:
  expression: "no_latest() && labelled() && small()"
  message: rejected
  policies:
    no_latest: {module: builtin://cel, settings: {validations: [{expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))"}]}}
    labelled: {module: builtin://cel, settings: {validations: [{expression: "has(object.metadata.labels)"}]}}
    small: {module: builtin://cel, settings: {validations: [{expression: "object.spec.containers.size() < 10"}]}}
`)
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
