package celpolicy

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/testkit"
)

// podRequest is a Pod CREATE AdmissionRequest as the API server sends it:
// compact JSON.
func podRequest(tb testing.TB) json.RawMessage {
	tb.Helper()
	b, err := os.ReadFile("../../testdata/cel/pod-create.json")
	if err != nil {
		tb.Fatal(err)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		tb.Fatal(err)
	}
	return out.Bytes()
}

// pod3Validations: no privileged container, a team label, no :latest image.
const pod3Validations = `{"validations": [
  {"expression": "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged)",
   "message": "privileged containers are not allowed", "reason": "Forbidden"},
  {"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
   "message": "the team label is required"},
  {"expression": "object.spec.containers.all(c, !c.image.endsWith(':latest'))",
   "messageExpression": "'image tag latest is not allowed in ' + object.metadata.generateName"}
]}`

func BenchmarkCELPod3Validations(b *testing.B) {
	p, err := Compile([]byte(pod3Validations))
	if err != nil {
		b.Fatal(err)
	}
	req := podRequest(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(len(req)))
	cpu := testkit.CPUTime()
	for b.Loop() {
		res, err := p.Validate(ctx, req)
		if err != nil || !res.Accepted {
			b.Fatal(res, err)
		}
	}
	reportCPU(b, cpu)
}

// reportCPU reports the CPU time per operation since start, GC included.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(testkit.CPUTime()-start)/float64(b.N), "cpu-ns/op")
}

func BenchmarkDecodeRequest(b *testing.B) {
	req := podRequest(b)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		var d document
		cpu := testkit.CPUTime()
		for b.Loop() {
			var in input
			if rej, err := in.decode(&d, req, nil); rej != nil || err != nil {
				b.Fatal(rej, err)
			}
		}
		reportCPU(b, cpu)
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		cpu := testkit.CPUTime()
		for b.Loop() {
			var in input
			if rej, err := in.slow(req, []byte("{}")); rej != nil || err != nil {
				b.Fatal(rej, err)
			}
		}
		reportCPU(b, cpu)
	})
}
