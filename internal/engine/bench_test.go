package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"testing"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/hostcap"
	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/testkit"
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
	admissionPath(b, e, "cel", body)
}

// BenchmarkAdmissionPathWapc is BenchmarkAdmissionPathCEL for the load
// test's waPC policy (labels): what the policy server adds to the guest's
// call (BenchmarkWapcCall in internal/wasm) for one request, without HTTP.
func BenchmarkAdmissionPathWapc(b *testing.B) {
	e, body := loadForBench(b, "labels: {module: file://"+policybuild.ForTest(b, "labels")+", settings: {denied_labels: [forbidden]}}\n")
	admissionPath(b, e, "labels", body)
}

// admissionPath runs the benchmark loop of the admission path: decode the
// review, evaluate it with policy id, which must allow it, encode the
// answer. It reports the process's CPU time per request as cpu-ns/op.
func admissionPath(b *testing.B, e *Engine, id string, body []byte) {
	b.ReportAllocs()
	cpu := testkit.CPUTime()
	for b.Loop() {
		req, err := admission.DecodeReview(body)
		if err != nil {
			b.Fatal(err)
		}
		resp, err := e.Validate(context.Background(), id, req, OriginValidate)
		if err != nil || !resp.Allowed {
			b.Fatalf("got %+v, %v", resp, err)
		}
		if _, err := json.Marshal(admission.NewReview(resp)); err != nil {
			b.Fatal(err)
		}
		req.Release() // as the server does once it has answered
	}
	b.ReportMetric(float64(testkit.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
}

var (
	// In this package's testdata: regoDir + file leads there.
	uniqueRoleBinding = regoPolicy{"../../internal/engine/testdata/unique_rolebinding.rego", "uniquerolebinding/violation", metadata.ModeGatekeeper}
	roleBindingKind   = ContextAwareResource{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"}
)

// roleBinding is a RoleBinding of about 700 bytes, as a cluster's list
// returns it: team i's binding of user i and two groups to a Role.
func roleBinding(i int) string {
	ns := fmt.Sprintf("team-%03d", i%100)
	return fmt.Sprintf(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{`+
		`"name":"binding-%05d","namespace":%q,"uid":"%08x-51f3-4c8e-9a2d-%012x","resourceVersion":"%d",`+
		`"creationTimestamp":"2026-03-%02dT10:%02d:00Z","labels":{"app.kubernetes.io/managed-by":"team-operator",`+
		`"app.kubernetes.io/part-of":"access","team":%q},"annotations":{"access.example.com/owner":"%s-owners@example.com",`+
		`"access.example.com/ticket":"ACC-%05d"}},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role",`+
		`"name":"role-%d"},"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"user-%05d@example.com"},`+
		`{"kind":"Group","apiGroup":"rbac.authorization.k8s.io","name":"%s-developers"},`+
		`{"kind":"Group","apiGroup":"rbac.authorization.k8s.io","name":"%s-reviewers"},`+
		`{"kind":"ServiceAccount","name":"deployer","namespace":%q}]}`,
		i, ns, i, i, 100000+i, i%28+1, i%60, ns, ns, i, i%7, i, ns, ns, ns)
}

// roleBindingReview asks to create a binding of user i to role-<i%7> in
// team i's namespace: roleBinding(i) binds it already.
func roleBindingReview(i int) *admissiontest.Review {
	ns := fmt.Sprintf("team-%03d", i%100)
	obj := fmt.Sprintf(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"new","namespace":%q},`+
		`"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"role-%d"},`+
		`"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"user-%05d@example.com"}]}`, ns, i%7, i)
	return admissiontest.New(admissiontest.WithKind("rbac.authorization.k8s.io", "v1", "RoleBinding"),
		admissiontest.WithResource("rbac.authorization.k8s.io", "v1", "rolebindings"),
		admissiontest.WithNamespace(ns), admissiontest.WithName("new"), admissiontest.WithObject(obj))
}

// BenchmarkGatekeeperInventory evaluates a Gatekeeper policy against an
// inventory: the unique-host policy over 1,000 Ingresses (10 namespaces),
// the unique-binding policy over 10,000 RoleBindings (100 namespaces, 7 MB
// of JSON). "listed": the kinds are listed (here from a replayed session)
// and the inventory built at every evaluation; "kept": the reflectors tell
// nothing changed, and the inventory is kept between evaluations. It
// reports the Go heap live after the run (heap-MB) and the process's
// resident memory then (rss-MB), guest memory included.
func BenchmarkGatekeeperInventory(b *testing.B) {
	ingresses := make([]string, 1000)
	for i := range ingresses {
		ingresses[i] = ingress(fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("ingress-%04d", i), fmt.Sprintf("host-%04d.example.com", i))
	}
	bindings := make([]string, 10000)
	for i := range bindings {
		bindings[i] = roleBinding(i)
	}
	cases := []struct {
		name   string
		policy regoPolicy
		kind   ContextAwareResource
		items  []string
		review *admissiontest.Review
	}{
		{"ingresses", uniqueIngressHost, ingressKind, ingresses, ingressReview("news", "blog", "host-0500.example.com")},
		{"rolebindings", uniqueRoleBinding, roleBindingKind, bindings, roleBindingReview(4242)},
	}
	for _, c := range cases {
		session := &hostcap.Session{Exchanges: []hostcap.Exchange{listed(c.kind, c.items...)}}
		for _, tracked := range []bool{false, true} {
			name := c.name + "/" + map[bool]string{false: "listed", true: "kept"}[tracked]
			b.Run(name, func(b *testing.B) {
				rt := newTestRuntime(b)
				mod, err := rt.CompileOPA(context.Background(), regoBuild(b, c.policy))
				if err != nil {
					b.Fatal(err)
				}
				caps := &changeClock{Host: hostcap.NewHost(hostcap.NewReplayer(session, "cluster.yml", nil)), tracked: tracked}
				r, err := newRegoRunner(context.Background(), rt, mod, metadata.ModeGatekeeper, []byte("{}"),
					newRegoContext(nil, []ContextAwareResource{c.kind}, metadata.ModeGatekeeper, []byte("{}"), caps, slog.New(slog.DiscardHandler)), 2, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer r.close(context.Background())
				req, settings := requestOf(b, c.review), json.RawMessage("{}")
				for b.Loop() {
					if resp := answer(context.Background(), r, req, settings); resp.Allowed {
						b.Fatalf("accepted: %+v", resp)
					}
				}
				reportMemory(b)
			})
		}
	}
}

// reportMemory reports the Go heap live after a collection, and the
// process's resident memory.
func reportMemory(b *testing.B) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MB")
	if statm, err := os.ReadFile("/proc/self/statm"); err == nil {
		var size, resident int64
		if _, err := fmt.Sscan(string(statm), &size, &resident); err == nil {
			b.ReportMetric(float64(resident*int64(os.Getpagesize()))/(1<<20), "rss-MB")
		}
	}
}
