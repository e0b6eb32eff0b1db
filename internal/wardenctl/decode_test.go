package wardenctl

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/metadata"
)

func TestDecodeRequest(t *testing.T) {
	req := `{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","object":{"a":1}}`
	tests := []struct {
		name    string
		doc     string
		raw     bool
		wantUID string
		wantRaw string
		wantErr string
	}{
		{name: "AdmissionRequest", doc: req, wantUID: "u"},
		{name: "AdmissionReview", doc: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":` + req + `}`, wantUID: "u"},
		{name: "YAML request", doc: "uid: abc\nkind: {group: '', version: v1, kind: Pod}\noperation: CREATE\n", wantUID: "abc"},
		{name: "raw, wrapped", doc: `{"request": {"user": "alice"}}`, raw: true, wantRaw: `{"user":"alice"}`},
		{name: "raw, bare", doc: `{"user": "alice"}`, raw: true, wantRaw: `{"user":"alice"}`},
		{name: "raw, not an object", doc: `[1, 2]`, raw: true, wantRaw: `[1,2]`},
		{name: "review without request", doc: `{"kind":"AdmissionReview","request":null}`, wantErr: "the AdmissionReview has no request"},
		{name: "review with no request key", doc: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, wantErr: "decoding the request: the AdmissionReview has no request"},
		{name: "YAML review with no request key", doc: "apiVersion: admission.k8s.io/v1\nkind: AdmissionReview\nresponse: {uid: x}\n", wantErr: "decoding the request: the AdmissionReview has no request"},
		{name: "not a request", doc: `{"a": 1}`, wantErr: "it has neither operation nor kind"},
		{name: "a list", doc: `[1]`, wantErr: "it must be an AdmissionReview or an AdmissionRequest object"},
		{name: "empty", doc: " \n", wantErr: "the document is empty"},
		{name: "broken YAML", doc: "a: [", wantErr: "decoding the request"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, raw, err := decodeRequest([]byte(tc.doc), tc.raw)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.raw {
				if string(raw) != tc.wantRaw || r != nil {
					t.Errorf("raw %s, request %v; want raw %s", raw, r, tc.wantRaw)
				}
				return
			}
			if r == nil || r.UID != tc.wantUID || raw != nil {
				t.Errorf("request %+v, raw %s; want uid %s", r, raw, tc.wantUID)
			}
		})
	}
}

func TestSettingsLoad(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		o       SettingsOptions
		want    string
		wantErr string
	}{
		{name: "none", want: "{}"},
		{name: "JSON, compacted", o: SettingsOptions{SettingsJSON: `{"a": [1]}`}, want: `{"a":[1]}`},
		{name: "YAML file", o: SettingsOptions{SettingsPath: write(t, dir, "s.yaml", "a:\n  - 1\n")}, want: `{"a":[1]}`},
		{name: "empty file", o: SettingsOptions{SettingsPath: write(t, dir, "e.yaml", "\n")}, want: "{}"},
		{name: "not an object", o: SettingsOptions{SettingsJSON: `[1]`}, wantErr: "the settings must be an object"},
		{name: "bad JSON", o: SettingsOptions{SettingsJSON: `{"a": `}, wantErr: "decoding settings"},
		{name: "missing file", o: SettingsOptions{SettingsPath: filepath.Join(dir, "nope")}, wantErr: "reading settings"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.o.load()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("load = %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestResolvePolicy(t *testing.T) {
	e := newEnv(t)
	a := &app{getenv: func(k string) string { return e.env[k] }}
	store := e.storeDir()
	one := write(t, store, "registry/ghcr.io/org/one:v1", "\x00asm\x01\x00\x00\x00one")
	write(t, store, "https/example.com/policies/two.wasm", "\x00asm\x01\x00\x00\x00two")
	write(t, store, "registry/ghcr.io/org/.one:v1.123.tmp", "partial download")
	local := write(t, t.TempDir(), "local.wasm", "x")
	oneDigest := sha256Hex([]byte("\x00asm\x01\x00\x00\x00one"))

	tests := []struct {
		arg, uri, fetch, wantErr string
	}{
		{arg: "registry://ghcr.io/org/one:v1", uri: "registry://ghcr.io/org/one:v1", fetch: "registry://ghcr.io/org/one:v1"},
		{arg: "https://example.com/p.wasm", uri: "https://example.com/p.wasm", fetch: "https://example.com/p.wasm"},
		{arg: "builtin://cel", uri: "builtin://cel", fetch: "builtin://cel"},
		{arg: local, uri: "file://" + local, fetch: "file://" + local},
		{arg: "file://" + local, uri: "file://" + local, fetch: "file://" + local},
		{arg: oneDigest[:8], uri: "registry://ghcr.io/org/one:v1", fetch: "file://" + one},
		{arg: "sha256:" + oneDigest[:8], uri: "registry://ghcr.io/org/one:v1", fetch: "file://" + one},
		{arg: "ghcr.io/org/three:v1", wantErr: "no such file, and no policy of the store has that digest (for a registry, write registry://ghcr.io/org/three:v1)"},
		{arg: "s3://bucket/p.wasm", wantErr: `unknown scheme "s3"`},
		{arg: "ffffffffff", wantErr: "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.arg, func(t *testing.T) {
			ref, err := a.resolvePolicy(tc.arg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || ref.URI != tc.uri || ref.Fetch != tc.fetch {
				t.Errorf("resolvePolicy = %+v, %v; want %s, %s", ref, err, tc.uri, tc.fetch)
			}
		})
	}

	entries, err := listStore(store)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, en := range entries {
		uris = append(uris, en.URI)
	}
	if want := []string{"https://example.com/policies/two.wasm", "registry://ghcr.io/org/one:v1"}; !reflect.DeepEqual(uris, want) {
		t.Errorf("listStore = %v, want %v", uris, want)
	}
	if err := removeFromStore(store, entries[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(store, "https")); !os.IsNotExist(err) {
		t.Errorf("the empty directories of the removed policy remain: %v", err)
	}
	if _, err := os.Stat(store); err != nil {
		t.Errorf("the store itself was removed: %v", err)
	}
}

func TestManifestAnnotations(t *testing.T) {
	m := &metadata.Metadata{Annotations: map[string]string{
		"io.kubewarden.policy.title": "t",
		sourceAnnotation:             "https://example.com/src",
		usageAnnotation:              "line 1\nline 2",
	}}
	want := map[string]string{"io.kubewarden.policy.title": "t", sourceAnnotation: "https://example.com/src", ociSourceAnnotation: "https://example.com/src"}
	if got := manifestAnnotations(m); !reflect.DeepEqual(got, want) {
		t.Errorf("manifestAnnotations = %v, want %v", got, want)
	}
	if got := manifestAnnotations(nil); got != nil {
		t.Errorf("manifestAnnotations(nil) = %v", got)
	}
}

func TestSplitDocuments(t *testing.T) {
	docs, err := splitDocuments([]byte("---\na: 1\n---\n# only a comment\n---\nb: 2025-03-14T09:26:53Z\n...\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range docs {
		got = append(got, string(d))
	}
	if want := []string{`{"a":1}`, `{"b":"2025-03-14T09:26:53Z"}`}; !reflect.DeepEqual(got, want) {
		t.Errorf("splitDocuments = %v, want %v", got, want)
	}
	if _, err := splitDocuments([]byte("a: [\n")); err == nil || !strings.Contains(err.Error(), "document 1") {
		t.Errorf("error %v, want one naming document 1", err)
	}
}

func TestRmAmbiguous(t *testing.T) {
	e := newEnv(t)
	store := e.storeDir()
	write(t, store, "registry/ghcr.io/org/p:v1", "\x00asm\x01\x00\x00\x00same")
	write(t, store, "registry/ghcr.io/org/p:v2", "\x00asm\x01\x00\x00\x00same")
	prefix := sha256Hex([]byte("\x00asm\x01\x00\x00\x00same"))[:8]
	r := e.run("rm", prefix)
	if r.code != 1 {
		t.Fatalf("rm of an ambiguous prefix: %s", r)
	}
	checkError(t, r, prefix+" matches 2 policies of the store (registry://ghcr.io/org/p:v1, registry://ghcr.io/org/p:v2): give more digits")
	e.mustRun("rm", "ghcr.io/org/p:v1")
	if r := e.mustRun("rm", prefix); r.stdout != "Removed registry://ghcr.io/org/p:v2\n" {
		t.Errorf("rm printed %q", r.stdout)
	}
}

func TestCompactJSON(t *testing.T) {
	tests := []struct {
		in, want string
		same     bool // the input itself is returned, not a copy
	}{
		{in: `{"a":[1,2],"b":"x y\"\\ z"}`, want: `{"a":[1,2],"b":"x y\"\\ z"}`, same: true},
		{in: `"a\\"`, want: `"a\\"`, same: true},
		{in: "{\n  \"a\": [1, 2],\n\t\"b\": \"x y\\\" z\"\r\n}", want: `{"a":[1,2],"b":"x y\" z"}`},
		{in: `{"a\\": 1}`, want: `{"a\\":1}`},
		{in: `[ ]`, want: `[]`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			in := []byte(tc.in)
			got := compactJSON(in)
			if string(got) != tc.want {
				t.Errorf("compactJSON = %s, want %s", got, tc.want)
			}
			if same := len(got) > 0 && &got[0] == &in[0]; same != tc.same {
				t.Errorf("returned its input: %t, want %t", same, tc.same)
			}
		})
	}
}
