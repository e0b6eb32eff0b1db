package policyfetch

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
)

func TestFetchRegistry(t *testing.T) {
	reg := startRegistry(t, registryOptions{})
	f := newFetcher(t, insecure(reg.host), "")
	h := reg.host
	v1, latest := wasm("x v1"), wasm("x latest")
	d1 := push(t, f, "registry://"+h+"/policies/x:v1", v1)
	push(t, f, h+"/policies/x:latest", latest)

	tests := []struct {
		name, uri, wantURI, store string
		want                      []byte
	}{
		{name: "tag", uri: "registry://" + h + "/policies/x:v1", store: "registry/" + h + "/policies/x:v1", want: v1},
		{name: "bare host/repo:tag", uri: h + "/policies/x:v1", wantURI: "registry://" + h + "/policies/x:v1", store: "registry/" + h + "/policies/x:v1", want: v1},
		{name: "digest", uri: "registry://" + h + "/policies/x@" + d1, store: "registry/" + h + "/policies/x@" + d1, want: v1},
		{name: "tag and digest", uri: "registry://" + h + "/policies/x:v1@" + d1, store: "registry/" + h + "/policies/x:v1@" + d1, want: v1},
		{name: "no tag means latest", uri: "registry://" + h + "/policies/x", store: "registry/" + h + "/policies/x:latest", want: latest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := f.Fetch(context.Background(), tc.uri)
			if err != nil {
				t.Fatal(err)
			}
			if want := cmpOr(tc.wantURI, tc.uri); m.URI != want {
				t.Errorf("URI = %s, want %s", m.URI, want)
			}
			checkModule(t, f, m, tc.want, tc.store)
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestPushShape checks the manifest Push writes against Kubewarden's
// artifact (what kwctl push writes).
func TestPushShape(t *testing.T) {
	reg := startRegistry(t, registryOptions{})
	f := newFetcher(t, insecure(reg.host), "")
	module := wasm("shape")
	d, err := f.Push(context.Background(), reg.host+"/policies/shape:v1", module, map[string]string{"io.kubewarden.policy.title": "shape"})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := remote.NewRepository(reg.host + "/policies/shape")
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	desc, rc, err := repo.FetchReference(context.Background(), "v1")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	raw, err := content.ReadAll(rc, desc)
	if err != nil {
		t.Fatal(err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	want := ocispec.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   ocispec.MediaTypeImageManifest,
		Config:      content.NewDescriptorFromBytes(MediaTypeWasmConfig, []byte("{}")),
		Layers:      []ocispec.Descriptor{content.NewDescriptorFromBytes(MediaTypeWasmLayer, module)},
		Annotations: map[string]string{"io.kubewarden.policy.title": "shape"},
	}
	wantRaw, _ := json.Marshal(want)
	if !bytes.Equal(raw, wantRaw) || desc.Digest.String() != d || desc.MediaType != ocispec.MediaTypeImageManifest {
		t.Errorf("manifest %s (%s, %s)\nwant %s (%s)", raw, desc.MediaType, desc.Digest, wantRaw, d)
	}

	for _, tc := range []struct{ ref, wantErr string }{
		{ref: reg.host + "/policies/shape@" + d, wantErr: "pushing " + reg.host + "/policies/shape@" + d + ": push needs a tag, not a digest"},
		{ref: "registry://" + reg.host + "/policies/shape:v2", wantErr: "...the module is not a WebAssembly binary"},
	} {
		_, err := f.Push(context.Background(), tc.ref, []byte("not wasm"), nil)
		checkErr(t, err, tc.wantErr)
	}
}

// TestFetchLatestAlwaysPulled checks Kubewarden's rule: latest (written or
// implied) is pulled every time; any other reference comes from the store
// once there, even after the registry has moved the tag.
func TestFetchLatestAlwaysPulled(t *testing.T) {
	reg := startRegistry(t, registryOptions{})
	publisher := newFetcher(t, insecure(reg.host), "")
	repo := "registry://" + reg.host + "/policies/x"
	tag := func(content string) {
		for _, tag := range []string{"v1", "latest"} {
			push(t, publisher, repo+":"+tag, wasm(content))
		}
	}
	tests := []struct {
		uri       string
		wantPulls int
		want      []byte
	}{
		{uri: repo + ":v1", wantPulls: 1, want: wasm("old")},
		{uri: repo + ":latest", wantPulls: 3, want: wasm("new")},
		{uri: repo, wantPulls: 3, want: wasm("new")},
	}
	for _, tc := range tests {
		t.Run(tc.uri, func(t *testing.T) {
			tag("old")
			f := newFetcher(t, insecure(reg.host), "")
			before := reg.count("GET manifests")
			var m Module
			for i := range 3 {
				if i == 1 {
					tag("new")
				}
				var err error
				if m, err = f.Fetch(context.Background(), tc.uri); err != nil {
					t.Fatal(err)
				}
			}
			if got := reg.count("GET manifests") - before; got != tc.wantPulls {
				t.Errorf("%d manifest pulls for 3 fetches, want %d", got, tc.wantPulls)
			}
			if !bytes.Equal(m.Bytes, tc.want) {
				t.Errorf("got %q, want %q", m.Bytes, tc.want)
			}
		})
	}
}

func TestFetchRegistryTLS(t *testing.T) {
	reg := startRegistry(t, registryOptions{tls: true})
	ca := reg.ca
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	withCA := func(entry string) *Sources {
		s, err := ParseSources([]byte(fmt.Sprintf("source_authorities:\n  %q:\n    - %s\n", reg.host, entry)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	data, _ := json.Marshal(string(ca.CertPEM))
	uri := "registry://" + reg.host + "/policies/tls:v1"
	push(t, newFetcher(t, withCA("{type: Path, path: "+caFile+"}"), ""), uri, wasm("tls"))

	tests := []struct {
		name    string
		sources *Sources
		wantErr string
	}{
		{name: "CA by path", sources: withCA("{type: Path, path: " + caFile + "}")},
		{name: "CA as data", sources: withCA("{type: Data, data: " + string(data) + "}")},
		{name: "insecure source skips verification", sources: insecure(reg.host)},
		{name: "CA of another host", sources: &Sources{SourceAuthorities: map[string][]*x509.Certificate{"other:5000": {ca.Cert}}},
			wantErr: "fetching " + uri + ": the TLS certificate of " + reg.host + " is signed by an unknown authority: add its CA to source_authorities in sources.yml"},
		{name: "no CA", wantErr: "fetching " + uri + ": the TLS certificate of " + reg.host + " is signed by an unknown authority: add its CA to source_authorities in sources.yml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFetcher(t, tc.sources, "")
			m, err := f.Fetch(context.Background(), uri)
			if tc.wantErr != "" {
				checkErr(t, err, tc.wantErr)
				if files := storeFiles(t, f); len(files) > 0 {
					t.Errorf("store holds %v after a failure", files)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkModule(t, f, m, wasm("tls"), "registry/"+reg.host+"/policies/tls:v1")
		})
	}
}

// basicAuth puts HTTP basic authentication in front of a registry, as
// registries configured with htpasswd do.
func basicAuth(user, password string) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
				w.Header().Set("WWW-Authenticate", `Basic realm="warden-test"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprint(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
}

func TestFetchDockerAuth(t *testing.T) {
	reg := startRegistry(t, registryOptions{wrap: basicAuth("alice", "s3cret")})
	h := reg.host
	dir := t.TempDir()
	config := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	good := config("auth.json", fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, h, b64("alice:s3cret")))
	config("dir/config.json", fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, h, b64("alice:s3cret")))

	// A credential helper, as `docker login` with credsStore/credHelpers
	// leaves them: docker-credential-<name> get, server on stdin.
	bin := t.TempDir()
	helper := "#!/bin/sh\n[ \"$1\" = get ] || exit 1\nread server\nprintf '{\"ServerURL\":\"%s\",\"Username\":\"alice\",\"Secret\":\"s3cret\"}' \"$server\"\n"
	if err := os.WriteFile(filepath.Join(bin, "docker-credential-wardentest"), []byte(helper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	uri := "registry://" + h + "/policies/private:v1"
	push(t, newFetcher(t, insecure(h), good), uri, wasm("private"))

	tests := []struct {
		name, docker, wantErr string
	}{
		{name: "no credentials", wantErr: "fetching " + uri + ": the registry answered 401 Unauthorized: credentials are needed (set --docker-config-json-path)"},
		{name: "auth field", docker: good},
		{name: "username and password fields", docker: config("userpass.json", fmt.Sprintf(`{"auths":{%q:{"username":"alice","password":"s3cret"}}}`, h))},
		{name: "directory holding config.json", docker: filepath.Join(dir, "dir")},
		{name: "credential helper", docker: config("helper.json", fmt.Sprintf(`{"credHelpers":{%q:"wardentest"}}`, h))},
		{name: "credentials for another host", docker: config("other.json", `{"auths":{"other.example":{"auth":"`+b64("alice:s3cret")+`"}}}`),
			wantErr: "fetching " + uri + ": the registry answered 401 Unauthorized: credentials are needed (set --docker-config-json-path)"},
		{name: "wrong password", docker: config("wrong.json", fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, h, b64("alice:nope"))),
			wantErr: "fetching " + uri + ": the registry answered 401 Unauthorized: the credentials for " + h + " were refused"},
		{name: "malformed config", docker: config("bad.json", `{"auths":`),
			wantErr: "...fetching " + uri + ": reading docker config " + filepath.Join(dir, "bad.json") + ": "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFetcher(t, insecure(h), tc.docker)
			m, err := f.Fetch(context.Background(), uri)
			if tc.wantErr != "" {
				checkErr(t, err, tc.wantErr)
				if files := storeFiles(t, f); len(files) > 0 {
					t.Errorf("store holds %v after a failure", files)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkModule(t, f, m, wasm("private"), "registry/"+h+"/policies/private:v1")
		})
	}
}

// pushRaw publishes a manifest of any shape with oras directly, for the
// artifacts Push refuses to write.
func pushRaw(t *testing.T, host, repository, tag, mediaType string, config ocispec.Descriptor, configData []byte, layers ...rawLayer) {
	t.Helper()
	repo, err := remote.NewRepository(host + "/" + repository)
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	ctx := context.Background()
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: mediaType, Config: config}
	if err := repo.Push(ctx, config, bytes.NewReader(configData)); err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		d := content.NewDescriptorFromBytes(l.mediaType, l.data)
		if err := repo.Push(ctx, d, bytes.NewReader(l.data)); err != nil {
			t.Fatal(err)
		}
		m.Layers = append(m.Layers, d)
	}
	raw, _ := json.Marshal(m)
	if err := repo.PushReference(ctx, content.NewDescriptorFromBytes(mediaType, raw), bytes.NewReader(raw), tag); err != nil {
		t.Fatal(err)
	}
}

type rawLayer struct {
	mediaType string
	data      []byte
}

// corruptBlobs flips the first byte of every blob the registry serves, the
// length and headers unchanged. A fake is needed here: a real registry
// checks digests when blobs are uploaded, so it never serves a blob that
// does not match its digest, and only a broken proxy or disk would.
func corruptBlobs(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			w = &flipFirstByte{ResponseWriter: w}
		}
		h.ServeHTTP(w, r)
	})
}

type flipFirstByte struct {
	http.ResponseWriter
	done bool
}

func (w *flipFirstByte) Write(b []byte) (int, error) {
	if !w.done && len(b) > 0 {
		w.done = true
		b = append([]byte{b[0] ^ 0xff}, b[1:]...)
	}
	return w.ResponseWriter.Write(b)
}

// truncateBlobs sends half of every blob, the headers unchanged, and hangs
// up: the server closes a connection whose body is shorter than its
// Content-Length.
func truncateBlobs(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			w = &cutWriter{ResponseWriter: w, left: len(wasm("x")) / 2}
		}
		h.ServeHTTP(w, r)
	})
}

type cutWriter struct {
	http.ResponseWriter
	left int
}

func (w *cutWriter) Write(b []byte) (int, error) {
	n := min(len(b), w.left)
	w.left -= n
	if _, err := w.ResponseWriter.Write(b[:n]); err != nil {
		return 0, err
	}
	return len(b), nil
}

// unavailable answers 503 to every request.
func unavailable(http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"errors":[{"code":"UNAVAILABLE","message":"down for maintenance"}]}`)
	})
}

func TestFetchRegistryFailures(t *testing.T) {
	reg := startRegistry(t, registryOptions{})
	h := reg.host
	publisher := newFetcher(t, insecure(h), "")
	good := "registry://" + h + "/policies/x:v1"
	digest := push(t, publisher, good, wasm("x"))

	// An image-like artifact: OCI manifest, image config, tar layer.
	imageConfig := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)
	pushRaw(t, h, "images/app", "v1", ocispec.MediaTypeImageManifest,
		content.NewDescriptorFromBytes(ocispec.MediaTypeImageConfig, imageConfig), imageConfig,
		rawLayer{ocispec.MediaTypeImageLayer, []byte("a tar")})
	// Kubewarden's shape around bytes that are not Wasm.
	pushRaw(t, h, "policies/notwasm", "v1", ocispec.MediaTypeImageManifest,
		content.NewDescriptorFromBytes(MediaTypeWasmConfig, []byte("{}")), []byte("{}"),
		rawLayer{MediaTypeWasmLayer, []byte("#!/bin/sh")})
	// A Wasm layer next to another layer.
	pushRaw(t, h, "policies/two", "v1", ocispec.MediaTypeImageManifest,
		content.NewDescriptorFromBytes(MediaTypeWasmConfig, []byte("{}")), []byte("{}"),
		rawLayer{MediaTypeWasmLayer, wasm("two")}, rawLayer{"application/octet-stream", []byte("extra")})
	// A manifest without layers.
	pushRaw(t, h, "policies/empty", "v1", ocispec.MediaTypeImageManifest,
		content.NewDescriptorFromBytes(MediaTypeWasmConfig, []byte("{}")), []byte("{}"))
	// An index pointing at the policy.
	repo, _ := remote.NewRepository(h + "/policies/x")
	repo.PlainHTTP = true
	policy, err := repo.Resolve(context.Background(), digest)
	if err != nil {
		t.Fatal(err)
	}
	index, _ := json.Marshal(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{policy}})
	if err := repo.PushReference(context.Background(), content.NewDescriptorFromBytes(ocispec.MediaTypeImageIndex, index), bytes.NewReader(index), "index"); err != nil {
		t.Fatal(err)
	}

	corrupt := startRegistry(t, registryOptions{wrap: corruptBlobs})
	push(t, newFetcher(t, insecure(corrupt.host), ""), corrupt.host+"/policies/x:v1", wasm("x"))
	truncated := startRegistry(t, registryOptions{wrap: truncateBlobs})
	push(t, newFetcher(t, insecure(truncated.host), ""), truncated.host+"/policies/x:v1", wasm("x"))
	down := closedPort(t)
	busy := startRegistry(t, registryOptions{wrap: unavailable})

	ins := insecure(h)
	tests := []struct {
		name, uri string
		sources   *Sources
		wantErr   string
	}{
		{name: "registry down", uri: "registry://" + down + "/policies/x:v1", sources: insecure(down),
			wantErr: "fetching registry://" + down + "/policies/x:v1: cannot connect to " + down + ": connection refused"},
		{name: "registry down, secure source", uri: "registry://" + down + "/policies/x:v1",
			wantErr: "fetching registry://" + down + "/policies/x:v1: cannot connect to " + down + ": connection refused"},
		{name: "registry refusing", uri: "registry://" + busy.host + "/policies/x:v1", sources: insecure(busy.host),
			wantErr: "fetching registry://" + busy.host + "/policies/x:v1: the registry answered 503 Service Unavailable: down for maintenance"},
		{name: "plain http registry not declared insecure", uri: good,
			wantErr: "fetching " + good + ": " + h + " does not speak TLS: add it to insecure_sources in sources.yml to use plain http"},
		{name: "tag not found", sources: ins, uri: "registry://" + h + "/policies/x:v9",
			wantErr: "fetching registry://" + h + "/policies/x:v9: tag v9 not found in " + h + "/policies/x"},
		{name: "repository not found", sources: ins, uri: "registry://" + h + "/policies/nope:v1",
			wantErr: "fetching registry://" + h + "/policies/nope:v1: tag v1 not found in " + h + "/policies/nope"},
		{name: "digest not found", sources: ins, uri: "registry://" + h + "/policies/x@sha256:" + strings.Repeat("0", 64),
			wantErr: "fetching registry://" + h + "/policies/x@sha256:" + strings.Repeat("0", 64) + ": manifest sha256:" + strings.Repeat("0", 64) + " not found in " + h + "/policies/x"},
		{name: "container image", sources: ins, uri: "registry://" + h + "/images/app:v1",
			wantErr: "fetching registry://" + h + "/images/app:v1: manifest media type application/vnd.oci.image.manifest.v1+json with layer type application/vnd.oci.image.layer.v1.tar is not a Kubewarden policy"},
		{name: "two layers", sources: ins, uri: "registry://" + h + "/policies/two:v1",
			wantErr: "fetching registry://" + h + "/policies/two:v1: manifest media type application/vnd.oci.image.manifest.v1+json with layer types application/vnd.wasm.content.layer.v1+wasm, application/octet-stream is not a Kubewarden policy"},
		{name: "no layer", sources: ins, uri: "registry://" + h + "/policies/empty:v1",
			wantErr: "fetching registry://" + h + "/policies/empty:v1: manifest media type application/vnd.oci.image.manifest.v1+json with no layer is not a Kubewarden policy"},
		{name: "index", sources: ins, uri: "registry://" + h + "/policies/x:index",
			wantErr: "fetching registry://" + h + "/policies/x:index: manifest media type application/vnd.oci.image.index.v1+json is not a Kubewarden policy"},
		{name: "not wasm", sources: ins, uri: "registry://" + h + "/policies/notwasm:v1",
			wantErr: "fetching registry://" + h + "/policies/notwasm:v1: the module is not a WebAssembly binary (no \\0asm magic)"},
		{name: "blob digest mismatch", uri: "registry://" + corrupt.host + "/policies/x:v1", sources: insecure(corrupt.host),
			wantErr: "fetching registry://" + corrupt.host + "/policies/x:v1: layer digest mismatch: expected " + sha(wasm("x")) + ", got " + sha(append([]byte{0xff}, wasm("x")[1:]...))},
		{name: "truncated layer", uri: "registry://" + truncated.host + "/policies/x:v1", sources: insecure(truncated.host),
			wantErr: fmt.Sprintf("fetching registry://%s/policies/x:v1: layer truncated: got %d of %d bytes", truncated.host, len(wasm("x"))/2, len(wasm("x")))},
		{name: "invalid reference", sources: ins, uri: "registry://" + h + "/Policies/x:v1",
			wantErr: "...fetching registry://" + h + "/Policies/x:v1: invalid registry reference"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFetcher(t, tc.sources, "")
			_, err := f.Fetch(context.Background(), tc.uri)
			checkErr(t, err, tc.wantErr)
			if files := storeFiles(t, f); len(files) > 0 {
				t.Errorf("store holds %v after a failure", files)
			}
		})
	}
}
