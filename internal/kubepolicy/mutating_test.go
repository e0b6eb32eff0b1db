package kubepolicy

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const mapPods = `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: pod-defaults}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{labels: {"managed": "warden"}},
               spec: Object.spec{containers: [Object.spec.containers{name: "app", imagePullPolicy: "Always"}]}}
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        has(object.metadata.annotations) ? [] :
        [JSONPatch{op: "add", path: "/metadata/annotations", value: {"seen": "yes"}}]
`

const mapBinding = `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: pod-defaults}
spec:
  policyName: pod-defaults
`

func podRequest(op admissionv1.Operation, pod string) *admissionv1.AdmissionRequest {
	req := &admissionv1.AdmissionRequest{
		UID:       "uid-2",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Name:      "web",
		Namespace: "default",
		Operation: op,
	}
	if op == admissionv1.Delete {
		req.OldObject.Raw = []byte(pod)
	} else {
		req.Object.Raw = []byte(pod)
	}
	return req
}

const pod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"default"},
 "spec":{"containers":[{"name":"app","image":"nginx"},{"name":"sidecar","image":"busybox"}]}}`

// sortedOps reads a JSONPatch as a list of "op path value", sorted.
func sortedOps(t *testing.T, patch []byte) []string {
	t.Helper()
	var ops []jsonpatch.Operation
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	var out []string
	for _, op := range ops {
		v, _ := json.Marshal(op.Value)
		out = append(out, op.Operation+" "+op.Path+" "+string(v))
	}
	sort.Strings(out)
	return out
}

func TestReviewMAP(t *testing.T) {
	p := load(t, Options{}, mapPods, mapBinding)
	resp, err := p.Review(context.Background(), podRequest(admissionv1.Create, pod))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("response = %+v", resp)
	}
	// ApplyConfiguration merges the containers by name (client-go's
	// schema of Pod): the sidecar is left alone.
	want := []string{
		`add /metadata/annotations {"seen":"yes"}`,
		`add /metadata/labels {"managed":"warden"}`,
		`add /spec/containers/0/imagePullPolicy "Always"`,
	}
	if got := sortedOps(t, resp.Patch); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("patch:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	t.Run("DELETE is not mutated", func(t *testing.T) {
		resp, err := p.Review(context.Background(), podRequest(admissionv1.Delete, pod))
		if err != nil || !resp.Allowed || resp.Patch != nil {
			t.Fatalf("response = %+v, %v", resp, err)
		}
	})
	t.Run("nothing to change", func(t *testing.T) {
		done := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"default","labels":{"managed":"warden"},"annotations":{"a":"b"}},
 "spec":{"containers":[{"name":"app","image":"nginx","imagePullPolicy":"Always"}]}}`
		resp, err := p.Review(context.Background(), podRequest(admissionv1.Create, done))
		if err != nil || !resp.Allowed || resp.Patch != nil || resp.PatchType != nil {
			t.Fatalf("response = %+v, %v", resp, err)
		}
	})
}

func TestReviewMAPFailingPatch(t *testing.T) {
	failing := strings.Replace(mapPods, `[JSONPatch{op: "add", path: "/metadata/annotations", value: {"seen": "yes"}}]`,
		`[JSONPatch{op: "remove", path: "/spec/nodeName"}]`, 1)
	for _, fp := range []string{"Fail", "Ignore"} {
		t.Run(fp, func(t *testing.T) {
			policy := strings.Replace(failing, "reinvocationPolicy: Never", "reinvocationPolicy: Never\n  failurePolicy: "+fp, 1)
			p := load(t, Options{}, policy, mapBinding)
			resp, err := p.Review(context.Background(), podRequest(admissionv1.Create, pod))
			if err != nil {
				t.Fatal(err)
			}
			if fp == "Ignore" {
				// The failed mutation is skipped; the one before it stays.
				if !resp.Allowed || len(sortedOps(t, resp.Patch)) != 2 {
					t.Fatalf("response = %+v (patch %s)", resp, resp.Patch)
				}
				return
			}
			// The generic dispatcher replaces the Forbidden status's
			// message and reason with the policy error's, and keeps its
			// code.
			const prefix = `policy 'pod-defaults' with binding 'pod-defaults' denied request: JSON Patch: `
			if resp.Allowed || !strings.HasPrefix(resp.Result.Message, prefix) || resp.Result.Code != 403 || resp.Result.Reason != metav1.StatusReasonInvalid {
				t.Fatalf("result = %+v", resp.Result)
			}
		})
	}
}

func TestLoadRefusesMAP(t *testing.T) {
	tests := []struct {
		name, policy, want string
	}{
		{name: "no reinvocationPolicy", policy: strings.Replace(mapPods, "  reinvocationPolicy: Never\n", "", 1),
			want: `MutatingAdmissionPolicy.admissionregistration.k8s.io "pod-defaults" is invalid: spec.reinvocationPolicy: Required value`},
		{name: "DELETE", policy: strings.Replace(mapPods, "operations: [CREATE]", "operations: [CREATE, DELETE]", 1),
			want: `MutatingAdmissionPolicy.admissionregistration.k8s.io "pod-defaults" is invalid: spec.matchConstraints.resourceRules.operations: Unsupported value: "DELETE": supported values: "*", "CONNECT", "CREATE", "UPDATE"`},
		{name: "mutation that does not compile", policy: strings.Replace(mapPods, `imagePullPolicy: "Always"`, `imagePullPolicy: missingVar`, 1),
			want: `MutatingAdmissionPolicy.admissionregistration.k8s.io "pod-defaults" is invalid: spec.mutations[0].applyConfiguration.expression: Invalid value: "Object{metadata: Object.metadata{labels: {\"managed\": \"warden\"}},\n       spec: Object.spec{containers: [Object.spec.containers{name: \"app\", imagePullPolicy: missingVar}]}}": compilation failed: ERROR: <input>:2:`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Load(settingsOf(t, tt.policy, mapBinding), Options{})
			if err == nil {
				p.Close()
				t.Fatal("loaded")
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error:\n%s\nwant a prefix\n%s", err, tt.want)
			}
		})
	}
}
