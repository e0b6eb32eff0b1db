package v1_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// examples are manifests written the way Kubewarden's documentation writes
// them, each using every field of its kind.
var examples = []struct {
	file, plural string
	want         runtime.Object
}{
	{"policyserver.yaml", "policyservers", &policiesv1.PolicyServer{}},
	{"clusteradmissionpolicy.yaml", "clusteradmissionpolicies", &policiesv1.ClusterAdmissionPolicy{}},
	{"admissionpolicy.yaml", "admissionpolicies", &policiesv1.AdmissionPolicy{}},
	{"clusteradmissionpolicygroup.yaml", "clusteradmissionpolicygroups", &policiesv1.ClusterAdmissionPolicyGroup{}},
	{"admissionpolicygroup.yaml", "admissionpolicygroups", &policiesv1.AdmissionPolicyGroup{}},
	{"policyrevision.yaml", "policyrevisions", &policiesv1.PolicyRevision{}},
}

// strictDecoder decodes YAML or JSON manifests of this API group, failing on
// unknown and duplicate fields.
func strictDecoder(t *testing.T) runtime.Decoder {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := policiesv1.AddToScheme(scheme); err != nil {
		t.Fatalf("AddToScheme: %v", err)
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

func readExample(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatalf("reading example: %v", err)
	}
	return data
}

// decodeExample decodes an example strictly into its Go type.
func decodeExample(t *testing.T, file string) runtime.Object {
	t.Helper()
	obj, _, err := strictDecoder(t).Decode(readExample(t, file), nil, nil)
	if err != nil {
		t.Fatalf("decoding %s strictly: %v", file, err)
	}
	return obj
}

// genericJSON decodes JSON the way the API server does (integers as int64).
func genericJSON(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var obj map[string]any
	if err := utiljson.Unmarshal(data, &obj); err != nil {
		t.Fatalf("decoding JSON: %v", err)
	}
	return obj
}

// contains reports where got lacks or changes a value of want; got may have
// more fields than want. A field of want holding false, 0 or "" may be left
// out of got: encoding drops such optional fields, which means the same.
func contains(path string, want, got any) []string {
	if got == nil && (want == false || want == int64(0) || want == "") {
		return nil
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{path + ": not an object"}
		}
		var diffs []string
		for k, v := range w {
			diffs = append(diffs, contains(path+"."+k, v, g[k])...)
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{path + ": list differs"}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, contains(path+"["+strconv.Itoa(i)+"]", w[i], g[i])...)
		}
		return diffs
	default:
		if !reflect.DeepEqual(want, got) {
			return []string{path + ": " + jsonString(want) + " became " + jsonString(got)}
		}
		return nil
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestExamplesRoundTrip(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.file, func(t *testing.T) {
			obj := decodeExample(t, ex.file)
			if reflect.TypeOf(obj) != reflect.TypeOf(ex.want) {
				t.Fatalf("decoded a %T, want a %T", obj, ex.want)
			}

			// Every field of the manifest survives decoding and encoding.
			encoded, err := json.Marshal(obj)
			if err != nil {
				t.Fatalf("encoding: %v", err)
			}
			original := object(t, string(readExample(t, ex.file)))
			for _, diff := range contains("", original, genericJSON(t, encoded)) {
				t.Errorf("round trip changed %s", diff)
			}

			// Decoding what was encoded gives the same object.
			again, _, err := strictDecoder(t).Decode(encoded, nil, nil)
			if err != nil {
				t.Fatalf("decoding the encoded object: %v", err)
			}
			if !reflect.DeepEqual(obj, again) {
				t.Errorf("decode(encode(x)) != x:\n%s\n%s", jsonString(obj), jsonString(again))
			}
			if cp := obj.DeepCopyObject(); !reflect.DeepEqual(obj, cp) {
				t.Errorf("DeepCopyObject differs from the original")
			}

			// The API server accepts both the manifest and what a Go client
			// sends for it, and knows every field of both.
			s := newCRDSchema(t, ex.plural)
			checkErrors(t, s.create(t, original))
			checkErrors(t, s.create(t, genericJSON(t, encoded)))
		})
	}
}

func TestUnknownFieldsAreRejected(t *testing.T) {
	tests := []struct {
		name, file, from, to string
	}{
		{"spec field", "clusteradmissionpolicy.yaml", "  mutating: false", "  mutating: false\n  mdoe: monitor"},
		{"rule field", "admissionpolicy.yaml", "      resources: [\"pods\"]", "      resources: [\"pods\"]\n      resource: [\"pods\"]"},
		{"group member field", "admissionpolicygroup.yaml", "      timeoutEvalSeconds: 3", "      timeoutEvalSeconds: 3\n      timeoutSeconds: 3"},
		{"policy server field", "policyserver.yaml", "  replicas: 2", "  replicas: 2\n  replica: 2"},
		{"revision field", "policyrevision.yaml", "  enabled: true", "  enabled: true\n  enable: true"},
		{"condition field", "policyrevision.yaml", "      replica: 0", "      replica: 0\n      pod: policy-server-0"},
		{"duplicate field", "clusteradmissionpolicy.yaml", "  mutating: false", "  mutating: false\n  mutating: true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			manifest := string(readExample(t, tt.file))
			if !strings.Contains(manifest, tt.from) {
				t.Fatalf("%s does not contain %q", tt.file, tt.from)
			}
			manifest = strings.Replace(manifest, tt.from, tt.to, 1)
			_, _, err := strictDecoder(t).Decode([]byte(manifest), nil, nil)
			if !runtime.IsStrictDecodingError(err) {
				t.Errorf("error = %v, want a strict decoding error", err)
			}
		})
	}
}

func TestSchemeKnowsEveryKind(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := policiesv1.AddToScheme(scheme); err != nil {
		t.Fatalf("AddToScheme: %v", err)
	}
	for _, kind := range []string{"PolicyServer", "ClusterAdmissionPolicy", "AdmissionPolicy", "ClusterAdmissionPolicyGroup", "AdmissionPolicyGroup", "PolicyRevision"} {
		for _, k := range []string{kind, kind + "List"} {
			if _, err := scheme.New(policiesv1.GroupVersion.WithKind(k)); err != nil {
				t.Errorf("scheme.New(%s): %v", k, err)
			}
		}
	}
}
