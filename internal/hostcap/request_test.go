package hostcap

import (
	"reflect"
	"strings"
	"testing"
)

func ptr(s string) *string { return &s }

// TestDecode decodes the payloads Kubewarden's Rust and Go SDKs send.
func TestDecode(t *testing.T) {
	tests := []struct {
		name, ns, op, payload string
		want                  Request
		wantErr               string
	}{
		{name: "manifest digest", ns: "oci", op: "v1/manifest_digest", payload: `"ghcr.io/a/b:1"`,
			want: OCIManifestDigest{Image: "ghcr.io/a/b:1"}},
		{name: "manifest", ns: "oci", op: "v1/oci_manifest", payload: `"busybox"`, want: OCIManifest{Image: "busybox"}},
		{name: "manifest and config", ns: "oci", op: "v1/oci_manifest_config", payload: `"busybox"`,
			want: OCIManifestAndConfig{Image: "busybox"}},
		{name: "image not a string", ns: "oci", op: "v1/manifest_digest", payload: `{"image":"busybox"}`,
			wantErr: "decoding the oci/v1/manifest_digest request: json: cannot unmarshal object into Go value of type string"},
		{name: "v1 verify, externally tagged", ns: "oci", op: "v1/verify",
			payload: `{"SigstorePubKeyVerify":{"image":"a/b:1","pub_keys":["K"],"annotations":null}}`,
			want:    SigstorePubKeyVerify{Image: "a/b:1", PubKeys: []string{"K"}}},
		{name: "v1 keyless", ns: "oci", op: "v1/verify",
			payload: `{"SigstoreKeylessVerify":{"image":"a","keyless":[{"issuer":"i","subject":"s"}],"annotations":{"env":"prod"}}}`,
			want:    SigstoreKeylessVerify{Image: "a", Keyless: []KeylessInfo{{Issuer: "i", Subject: "s"}}, Annotations: map[string]string{"env": "prod"}}},
		{name: "v1 verify, v2 variant refused", ns: "oci", op: "v1/verify", payload: `{"SigstoreGithubActionsVerify":{"image":"a","owner":"o"}}`,
			wantErr: "unknown variant `SigstoreGithubActionsVerify`"},
		{name: "v2 verify, internally tagged", ns: "oci", op: "v2/verify",
			payload: `{"type":"SigstorePubKeyVerify","image":"a","pub_keys":[],"annotations":null}`,
			want:    SigstorePubKeyVerify{Image: "a", PubKeys: []string{}}},
		{name: "v2 certificate", ns: "oci", op: "v2/verify",
			payload: `{"type":"SigstoreCertificateVerify","image":"a","certificate":[45,45],"certificate_chain":null,"require_rekor_bundle":true,"annotations":null}`,
			want:    SigstoreCertificateVerify{Image: "a", Certificate: Bytes("--"), RequireRekorBundle: true}},
		{name: "v2 github actions", ns: "oci", op: "v2/verify", payload: `{"type":"SigstoreGithubActionsVerify","image":"a","owner":"o","annotations":null}`,
			want: SigstoreGithubActionsVerify{Image: "a", Owner: "o"}},
		{name: "v2 prefix", ns: "oci", op: "v2/verify",
			payload: `{"type":"SigstoreKeylessPrefixVerify","image":"a","keyless_prefix":[{"issuer":"i","url_prefix":"https://x/"}],"annotations":null}`,
			want:    SigstoreKeylessPrefixVerify{Image: "a", KeylessPrefix: []KeylessPrefixInfo{{Issuer: "i", URLPrefix: "https://x/"}}}},
		{name: "v2 without type", ns: "oci", op: "v2/verify", payload: `{"image":"a"}`, wantErr: "missing field `type`"},
		{name: "v2 missing keys", ns: "oci", op: "v2/verify", payload: `{"type":"SigstorePubKeyVerify","image":"a"}`,
			wantErr: "missing field `pub_keys`"},
		{name: "dns", ns: "net", op: "v1/dns_lookup_host", payload: `"localhost"`, want: DNSLookupHost{Host: "localhost"}},
		{name: "certificate, Go SDK", ns: "crypto", op: "v1/is_certificate_trusted",
			payload: `{"cert":{"encoding":"Pem","data":[45]},"cert_chain":null,"not_after":""}`,
			want:    CryptoIsCertificateTrusted{Request: CertificateVerificationRequest{Cert: Certificate{Encoding: "Pem", Data: Bytes("-")}}}},
		{name: "certificate byte out of range", ns: "crypto", op: "v1/is_certificate_trusted",
			payload: `{"cert":{"encoding":"Pem","data":[256]}}`, wantErr: "byte value 256 out of range"},
		{name: "list by namespace", ns: "kubernetes", op: "list_resources_by_namespace",
			payload: `{"api_version":"v1","kind":"Pod","namespace":"a","label_selector":"app=x","field_selector":null,"field_masks":["spec","metadata.name","spec"]}`,
			want: KubernetesListResourceNamespace{APIVersion: "v1", Kind: "Pod", Namespace: "a", LabelSelector: ptr("app=x"),
				FieldMasks: []string{"metadata.name", "spec"}}},
		{name: "list by namespace without namespace", ns: "kubernetes", op: "list_resources_by_namespace",
			payload: `{"api_version":"v1","kind":"Pod"}`, wantErr: "missing field `namespace`"},
		{name: "list all, Go SDK (optional fields omitted)", ns: "kubernetes", op: "list_resources_all",
			payload: `{"api_version":"v1","kind":"Namespace"}`, want: KubernetesListResourceAll{APIVersion: "v1", Kind: "Namespace"}},
		{name: "get", ns: "kubernetes", op: "get_resource",
			payload: `{"api_version":"v1","kind":"Namespace","name":"a","disable_cache":true}`,
			want:    KubernetesGetResource{APIVersion: "v1", Kind: "Namespace", Name: "a", DisableCache: true}},
		{name: "get without name", ns: "kubernetes", op: "get_resource", payload: `{"api_version":"v1","kind":"Namespace"}`,
			wantErr: "decoding the kubernetes/get_resource request: missing field `name`"},
		{name: "can_i, Rust SDK", ns: "kubernetes", op: "can_i",
			payload: `{"subject_access_review":{"groups":null,"resource_attributes":{"group":null,"name":null,"namespace":"a","resource":"pods","subresource":null,"verb":"get","version":null},"user":"alice"},"disable_cache":false}`,
			want: KubernetesCanI{Request: SubjectAccessReview{User: "alice",
				ResourceAttributes: ResourceAttributes{Namespace: ptr("a"), Resource: "pods", Verb: "get"}}}},
		{name: "can_i, Go SDK", ns: "kubernetes", op: "can_i",
			payload: `{"subject_access_review":{"groups":["dev"],"resourceAttributes":{"namespace":"a","verb":"get","group":"","resource":"pods"},"user":"alice"},"disable_cache":true}`,
			want: KubernetesCanI{DisableCache: true, Request: SubjectAccessReview{User: "alice", Groups: []string{"dev"},
				ResourceAttributes: ResourceAttributes{Namespace: ptr("a"), Group: ptr(""), Resource: "pods", Verb: "get"}}}},
		{name: "can_i without attributes", ns: "kubernetes", op: "can_i", payload: `{"subject_access_review":{"user":"a"}}`,
			wantErr: "missing field `resource_attributes`"},
		{name: "unknown operation", ns: "net", op: "v2/dns", payload: `"x"`, wantErr: "unknown operation: v2/dns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode(tt.ns, tt.op, []byte(tt.payload))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, normalize(tt.want)) {
				t.Fatalf("got %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

// FuzzDecode checks that no payload makes Decode panic, and that whatever
// it decodes survives a trip through a session file unchanged.
func FuzzDecode(f *testing.F) {
	ops := [][2]string{
		{"oci", "v1/manifest_digest"}, {"oci", "v1/verify"}, {"oci", "v2/verify"}, {"net", "v1/dns_lookup_host"},
		{"crypto", "v1/is_certificate_trusted"}, {"kubernetes", "list_resources_by_namespace"},
		{"kubernetes", "list_resources_all"}, {"kubernetes", "get_resource"}, {"kubernetes", "can_i"},
	}
	f.Add(uint8(1), []byte(`{"SigstorePubKeyVerify":{"image":"a","pub_keys":["k"],"annotations":{"a":"b"}}}`))
	f.Add(uint8(2), []byte(`{"type":"SigstoreCertificateVerify","image":"a","certificate":[1,2],"certificate_chain":[[3]],"require_rekor_bundle":false,"annotations":null}`))
	f.Add(uint8(4), []byte(`{"cert":{"encoding":"Der","data":[0]},"cert_chain":[],"not_after":"2024-01-01T00:00:00Z"}`))
	f.Add(uint8(5), []byte(`{"api_version":"v1","kind":"Pod","namespace":"a: b","label_selector":"null","field_masks":[]}`))
	f.Add(uint8(7), []byte(`{"api_version":"v1","kind":"Namespace","name":"'\"\n","namespace":null,"disable_cache":false}`))
	f.Add(uint8(8), []byte(`{"subject_access_review":{"groups":[],"resourceAttributes":{"verb":"get","resource":"pods"},"user":"~"}}`))
	f.Fuzz(func(t *testing.T, op uint8, payload []byte) {
		o := ops[int(op)%len(ops)]
		req, err := Decode(o[0], o[1], payload)
		if err != nil {
			return
		}
		doc, err := MarshalRequest(req)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseRequest(string(doc))
		if err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if !reflect.DeepEqual(back, req) {
			t.Fatalf("round trip changed the request:\n%#v\n%#v\n%s", req, back, doc)
		}
	})
}
