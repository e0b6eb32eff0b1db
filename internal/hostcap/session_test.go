package hostcap

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// kwctlSession is a session file as kwctl writes it, which the tests of
// internal/wardenctl replay too.
var kwctlSession = filepath.Join("testdata", "kwctl-session.yml")

// The requests of kwctlSession, as the guests of the test send them.
var kwctlRequests = []struct{ ns, op, payload string }{
	{"kubernetes", "get_resource", `{"api_version":"v1","kind":"Namespace","name":"team-a","disable_cache":false}`},
	{"kubernetes", "get_resource", `{"api_version":"v1","kind":"Namespace","name":"team-b","namespace":null,"disable_cache":false,"field_masks":null}`},
	{"kubernetes", "list_resources_all", `{"api_version":"networking.k8s.io/v1","kind":"Ingress","field_masks":["spec.rules.host","metadata.name"]}`},
	{"kubernetes", "can_i", `{"subject_access_review":{"groups":["developers"],"resourceAttributes":{"group":"apps","namespace":"team-a","resource":"deployments","verb":"create"},"user":"alice"},"disable_cache":false}`},
	{"oci", "v1/manifest_digest", `"registry.example.com/app:1.0"`},
	{"crypto", "v1/is_certificate_trusted", `{"cert":{"encoding":"Pem","data":[45,45]},"cert_chain":null,"not_after":""}`},
	{"oci", "v2/verify", `{"type":"SigstorePubKeyVerify","image":"registry.example.com/app:1.0","pub_keys":["-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"],"annotations":{"env":"prod"}}`},
	{"net", "v1/dns_lookup_host", `"example.com"`},
	{"kubernetes", "list_resources_by_namespace", `{"api_version":"v1","kind":"ConfigMap","namespace":"team-a","label_selector":"app=web"}`},
}

// TestReplayKwctlSession replays a session in kwctl's format: every request
// gets its recorded answer, errors with Kubewarden's prefix.
func TestReplayKwctlSession(t *testing.T) {
	s, err := LoadSession(kwctlSession)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a","labels":{"owner":"alice"}}}`,
		`error: Callback evaluation failure: Cannot find v1/Namespace named 'team-b' inside of namespace 'None'`,
		"{\n  \"apiVersion\": \"networking.k8s.io/v1\",\n  \"kind\": \"IngressList\",\n  \"metadata\": {},\n  \"items\": []\n}\n",
		`{"allowed":true,"reason":"RBAC: allowed by RoleBinding"}`,
		`{"digest":"sha256:0000000000000000000000000000000000000000000000000000000000000001"}`,
		`{"trusted":false,"reason":"Certificate is not trusted by the provided cert chain"}`,
		`{"is_trusted":true,"digest":"sha256:0000000000000000000000000000000000000000000000000000000000000001"}`,
		`{"ips":["192.0.2.1"]}`,
		`{"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "namespace": "team-a"}, "data": {"k": "v"}}]}`,
	}
	r := NewReplayer(s, "session.yml", nil)
	host := NewHost(r)
	for i, c := range kwctlRequests {
		out, err := host.HostCall(context.Background(), c.ns, c.op, []byte(c.payload))
		got := string(out)
		if err != nil {
			got = "error: " + err.Error()
		}
		if got != want[i] {
			t.Errorf("request %d (%s/%s): got %q, want %q", i+1, c.ns, c.op, got, want[i])
		}
	}
	if n := r.Unreplayed(); n != 0 {
		t.Errorf("%d exchanges not replayed", n)
	}
}

// TestReplayer checks the order of answers and the errors.
func TestReplayer(t *testing.T) {
	get := func(name string) Request {
		return KubernetesGetResource{APIVersion: "v1", Kind: "Namespace", Name: name}
	}
	s := &Session{Exchanges: []Exchange{
		{Request: get("a"), Payload: []byte("a1")},
		{Request: get("b"), Payload: []byte("b1")},
		{Request: get("a"), Payload: []byte("a2")},
		{Request: get("c"), Failed: true, Error: "no c"},
	}}
	tests := []struct {
		name     string
		requests []string
		want     []string
	}{
		{name: "in order", requests: []string{"a", "b", "a", "c"}, want: []string{"a1", "b1", "a2", "error: no c"}},
		{name: "again: the session starts over", requests: []string{"a", "b", "a", "c", "a", "b"},
			want: []string{"a1", "b1", "a2", "error: no c", "a1", "b1"}},
		{name: "out of order", requests: []string{"b", "a", "a"}, want: []string{"b1", "a2", "a1"}},
		{name: "missing", requests: []string{"d"}, want: []string{
			"error: replaying the host capabilities session session.yml: it has no recorded answer for " +
				"!KubernetesGetResource {api_version: v1, kind: Namespace, name: d, namespace: null, disable_cache: false, field_masks: null}"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReplayer(s, "session.yml", nil)
			for i, name := range tt.requests {
				out, err := r.Handle(context.Background(), get(name))
				got := string(out)
				if err != nil {
					got = "error: " + err.Error()
				}
				if got != tt.want[i] {
					t.Fatalf("request %d (%s): got %q, want %q", i+1, name, got, tt.want[i])
				}
			}
		})
	}
}

// TestRecordThenReplay records exchanges, writes them, reads them back and
// replays them: same answers, without the handler that recorded them.
func TestRecordThenReplay(t *testing.T) {
	s, err := LoadSession(kwctlSession)
	if err != nil {
		t.Fatal(err)
	}
	live := NewReplayer(s, "live", nil) // stands in for the world
	rec := NewRecorder(live)
	var want []string
	for _, c := range kwctlRequests {
		out, err := NewHost(rec).HostCall(context.Background(), c.ns, c.op, []byte(c.payload))
		if err != nil {
			want = append(want, "error: "+err.Error())
			continue
		}
		want = append(want, string(out))
	}
	path := filepath.Join(t.TempDir(), "session.yml")
	if err := rec.Session().WriteFile(path); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadSession(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(loaded, s) {
		t.Errorf("the recorded session differs from the one replayed")
	}
	host := NewHost(NewReplayer(loaded, path, nil))
	for i, c := range kwctlRequests {
		out, err := host.HostCall(context.Background(), c.ns, c.op, []byte(c.payload))
		got := string(out)
		if err != nil {
			got = "error: " + err.Error()
		}
		if got != want[i] {
			t.Errorf("request %d: replayed %q, recorded %q", i+1, got, want[i])
		}
	}
}

// TestMarshalRequest checks the exact text of a recorded request: kwctl's.
func TestMarshalRequest(t *testing.T) {
	tests := []struct {
		req  Request
		want string
	}{
		{req: KubernetesGetResource{APIVersion: "v1", Kind: "Namespace", Name: "team-a"},
			want: "!KubernetesGetResource\napi_version: v1\nkind: Namespace\nname: team-a\nnamespace: null\ndisable_cache: false\nfield_masks: null\n"},
		{req: KubernetesListResourceNamespace{APIVersion: "v1", Kind: "Pod", Namespace: "a", LabelSelector: ptr("true")},
			want: "!KubernetesListResourceNamespace\napi_version: v1\nkind: Pod\nnamespace: a\nlabel_selector: \"true\"\nfield_selector: null\nfield_masks: null\n"},
		{req: OCIManifestDigest{Image: "busybox"}, want: "!OciManifestDigest\nimage: busybox\n"},
		{req: DNSLookupHost{Host: "example.com"}, want: "!DNSLookupHost\nhost: example.com\n"},
	}
	for _, tt := range tests {
		t.Run(tt.req.Variant(), func(t *testing.T) {
			got, err := MarshalRequest(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestParseSessionErrors checks the messages of broken session files.
func TestParseSessionErrors(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{name: "not a list", doc: "type: Exchange\n", want: "want a list of exchanges"},
		{name: "unknown request", doc: "- request: \"!KubernetesDelete\\nname: a\\n\"\n  response: {type: Success, payload: x}\n",
			want: `exchange 1: request: unknown request "KubernetesDelete"`},
		{name: "no response type", doc: "- request: \"!DNSLookupHost\\nhost: a\\n\"\n  response: {payload: x}\n",
			want: `exchange 1: response type "", want Success or Error`},
		{name: "bad bytes", doc: "- request: \"!CryptoIsCertificateTrusted\\nrequest: {cert: {encoding: Pem, data: [300]}}\\n\"\n  response: {type: Error, message: x}\n",
			want: "exchange 1: request: CryptoIsCertificateTrusted: byte value 300 out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSession([]byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
	if s, err := ParseSession([]byte("[]\n")); err != nil || len(s.Exchanges) != 0 {
		t.Errorf("empty session: %v, %v", s, err)
	}
	// serde also reads a variant written as a one-key mapping.
	s, err := ParseSession([]byte("- request: \"DNSLookupHost:\\n  host: a\\n\"\n  response: {type: Error, message: x}\n"))
	if err != nil || !reflect.DeepEqual(s.Exchanges[0].Request, DNSLookupHost{Host: "a"}) {
		t.Errorf("mapping form: %v, %v", s, err)
	}
	if _, err := LoadSession(filepath.Join(t.TempDir(), "none.yml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestConcurrentReplayAndRecord makes calls from several goroutines through
// a Recorder in front of a Replayer (run it with -race).
func TestConcurrentReplayAndRecord(t *testing.T) {
	s, err := LoadSession(kwctlSession)
	if err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder(NewReplayer(s, "session.yml", nil))
	host := NewHost(rec)
	const workers, rounds = 4, 25
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range rounds {
				c := kwctlRequests[i%len(kwctlRequests)]
				if _, err := host.HostCall(context.Background(), c.ns, c.op, []byte(c.payload)); err != nil && !strings.Contains(err.Error(), "team-b") {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if n := len(rec.Session().Exchanges); n != workers*rounds {
		t.Errorf("%d exchanges recorded, want %d", n, workers*rounds)
	}
}

// TestHostReadsForRego replays, in kwctl's format, what Kubewarden's host
// asks to build the data of Rego policies: the lists carry no field_masks,
// the plural names are requests of their own, and errors come without the
// prefix guests see. The question Kubewarden asks before reusing a
// Gatekeeper inventory, which Warden never asks, is skipped.
func TestHostReadsForRego(t *testing.T) {
	s, err := ParseSession([]byte(`- type: Exchange
  request: |
    !KubernetesListResourceAll
    api_version: networking.k8s.io/v1
    kind: Ingress
    label_selector: null
    field_selector: null
  response:
    type: Success
    payload: '{"metadata":{},"items":[]}'
- type: Exchange
  request: |
    !KubernetesGetResourcePluralName
    api_version: networking.k8s.io/v1
    kind: Ingress
  response:
    type: Success
    payload: '"ingresses"'
- type: Exchange
  request: |
    !HasKubernetesListResourceAllResultChangedSinceInstant
    api_version: networking.k8s.io/v1
    kind: Ingress
    label_selector: null
    field_selector: null
    since: 1234
  response:
    type: Success
    payload: 'false'
- type: Exchange
  request: |
    !KubernetesGetResourcePluralName
    api_version: v1
    kind: Frobnicator
  response:
    type: Error
    message: Cannot find resource v1/Frobnicator
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Exchanges) != 3 {
		t.Fatalf("%d exchanges, want 3", len(s.Exchanges))
	}
	r := NewReplayer(s, "session.yml", nil)
	host := NewHost(r)
	ctx := context.Background()
	if out, err := host.ListResourcesAll(ctx, "networking.k8s.io/v1", "Ingress"); err != nil || string(out) != `{"metadata":{},"items":[]}` {
		t.Errorf("ListResourcesAll: %s, %v", out, err)
	}
	if out, err := host.ResourcePluralName(ctx, "networking.k8s.io/v1", "Ingress"); err != nil || string(out) != `"ingresses"` {
		t.Errorf("ResourcePluralName: %s, %v", out, err)
	}
	if _, err := host.ResourcePluralName(ctx, "v1", "Frobnicator"); err == nil || err.Error() != "Cannot find resource v1/Frobnicator" {
		t.Errorf("ResourcePluralName of an unknown kind: %v", err)
	}
	if n := r.Unreplayed(); n != 0 {
		t.Errorf("%d exchanges not replayed", n)
	}
}
