package kubepolicy

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/wardenhq/warden/internal/testkit"
)

// vapPod3Validations has the checks of internal/celpolicy's
// BenchmarkCELPod3Validations as a ValidatingAdmissionPolicy: no privileged
// container, a team label, no :latest image.
const vapPod3Validations = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: pod-checks}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  validations:
  - expression: "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged)"
    message: "privileged containers are not allowed"
    reason: Forbidden
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: "the team label is required"
  - expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))"
    messageExpression: "'image tag latest is not allowed in ' + object.metadata.generateName"
`

// BenchmarkVAP is one evaluation of vapPod3Validations, as the engine's
// runner makes it: decode the AdmissionRequest (the 5 KB Pod CREATE of
// BenchmarkCELPod3Validations) and review it with the API server's plugin.
func BenchmarkVAP(b *testing.B) {
	raw, err := os.ReadFile("../../testdata/cel/pod-create.json")
	if err != nil {
		b.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		b.Fatal(err)
	}
	body := compact.Bytes()
	p, err := Load(settingsOf(b, vapPod3Validations, binding("pod-checks", "pod-checks", "Deny")), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	// The policy runs: without the team label the Pod is denied.
	unlabelled := bytes.Replace(body, []byte(`"team"`), []byte(`"squad"`), 1)
	var req admissionv1.AdmissionRequest
	if err := json.Unmarshal(unlabelled, &req); err != nil {
		b.Fatal(err)
	}
	if resp, err := p.Review(ctx, &req); err != nil || resp.Allowed {
		b.Fatalf("the Pod without a team label: %+v, %v", resp, err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	cpu := testkit.CPUTime()
	for b.Loop() {
		var req admissionv1.AdmissionRequest
		if err := json.Unmarshal(body, &req); err != nil {
			b.Fatal(err)
		}
		resp, err := p.Review(ctx, &req)
		if err != nil || !resp.Allowed {
			b.Fatal(resp, err)
		}
	}
	b.ReportMetric(float64(testkit.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkLoadVAP loads vapPod3Validations with its binding, as a policy
// server does for each such policy it starts or reloads, and closes it.
func BenchmarkLoadVAP(b *testing.B) {
	settings := settingsOf(b, vapPod3Validations, binding("pod-checks", "pod-checks", "Deny"))
	for b.Loop() {
		p, err := Load(settings, Options{})
		if err != nil {
			b.Fatal(err)
		}
		p.Close()
	}
}
