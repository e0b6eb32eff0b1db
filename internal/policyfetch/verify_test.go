package policyfetch

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"oras.land/oras-go/v2/content"
)

// fakeVerifier records what it is asked and answers with err.
type fakeVerifier struct {
	mu    sync.Mutex
	asked []Target
	err   error
}

func (v *fakeVerifier) VerifyModule(_ context.Context, f *Fetcher, t Target) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.asked = append(v.asked, t)
	return v.err
}

func verifiedFetcher(t *testing.T, src *Sources, v Verifier) *Fetcher {
	t.Helper()
	f, err := New(Options{StoreDir: t.TempDir(), Sources: src, DockerConfigPath: filepath.Join(t.TempDir(), "none.json"), Verifier: v})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

func TestVerifierAccepts(t *testing.T) {
	reg := startRegistry(t, registryOptions{})
	pub := newFetcher(t, insecure(reg.host), "")
	module := wasm("signed")
	digest := push(t, pub, "registry://"+reg.host+"/policies/x:v1", module)

	v := &fakeVerifier{}
	f := verifiedFetcher(t, insecure(reg.host), v)
	m, err := f.Fetch(context.Background(), reg.host+"/policies/x:v1")
	if err != nil {
		t.Fatal(err)
	}
	checkModule(t, f, m, module, "registry/"+reg.host+"/policies/x:v1")
	want := Target{URI: "registry://" + reg.host + "/policies/x:v1", Repository: reg.host + "/policies/x", ManifestDigest: digest}
	if len(v.asked) != 1 || v.asked[0] != want {
		t.Errorf("verifier asked %+v, want %+v", v.asked, want)
	}

	// Once stored, the module is verified again but not pulled again.
	blobs := reg.count("GET blobs")
	if _, err := f.Fetch(context.Background(), "registry://"+reg.host+"/policies/x:v1"); err != nil {
		t.Fatal(err)
	}
	if len(v.asked) != 2 || reg.count("GET blobs") != blobs {
		t.Errorf("second fetch: %d verifications (want 2), %d layer downloads (want 0)", len(v.asked), reg.count("GET blobs")-blobs)
	}

	// A stored file that is not the signed layer is replaced by it.
	if err := os.WriteFile(m.Path, wasm("tampered on disk"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err = f.Fetch(context.Background(), "registry://"+reg.host+"/policies/x:v1")
	if err != nil {
		t.Fatal(err)
	}
	checkModule(t, f, m, module, "registry/"+reg.host+"/policies/x:v1")
	if reg.count("GET blobs") != blobs+1 {
		t.Errorf("the tampered store file was not pulled again")
	}
}

func TestVerifierRefuses(t *testing.T) {
	reg := startRegistry(t, registryOptions{})
	pub := newFetcher(t, insecure(reg.host), "")
	push(t, pub, "registry://"+reg.host+"/policies/x:v1", wasm("unsigned"))
	local := filepath.Join(t.TempDir(), "x.wasm")
	if err := os.WriteFile(local, wasm("local"), 0o600); err != nil {
		t.Fatal(err)
	}

	v := &fakeVerifier{err: errors.New("the module is not signed")}
	f := verifiedFetcher(t, insecure(reg.host), v)
	blobs := reg.count("GET blobs")
	tests := []struct{ uri, want string }{
		{"registry://" + reg.host + "/policies/x:v1", "fetching registry://" + reg.host + "/policies/x:v1: the module is not signed"},
		{"registry://" + reg.host + "/policies/x:latest", "fetching registry://" + reg.host + "/policies/x:latest: tag latest not found in " + reg.host + "/policies/x"},
		{"file://" + local, "fetching file://" + local + ": signature verification is on, and only registry:// modules carry signatures"},
		{"https://" + reg.host + "/x.wasm", "fetching https://" + reg.host + "/x.wasm: signature verification is on, and only registry:// modules carry signatures"},
	}
	for _, tc := range tests {
		_, err := f.Fetch(context.Background(), tc.uri)
		checkErr(t, err, tc.want)
	}
	if files := storeFiles(t, f); len(files) > 0 {
		t.Errorf("store holds %v after refusals", files)
	}
	if len(v.asked) != 1 || reg.count("GET blobs") != blobs {
		t.Errorf("verifier asked %d times (want 1), %d layer downloads (want 0)", len(v.asked), reg.count("GET blobs")-blobs)
	}
}

func TestArtifactAccess(t *testing.T) {
	reg := startRegistry(t, registryOptions{})
	f := newFetcher(t, insecure(reg.host), "")
	ctx := context.Background()
	repo := "registry://" + reg.host + "/artifacts/a"

	blob := []byte(`{"hello":"world"}`)
	desc := content.NewDescriptorFromBytes("application/json", blob)
	for range 2 { // the second push finds it there
		if err := f.PushBlob(ctx, repo, desc, blob); err != nil {
			t.Fatal(err)
		}
	}
	config := content.NewDescriptorFromBytes("application/vnd.oci.image.config.v1+json", []byte("{}"))
	if err := f.PushBlob(ctx, repo, config, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	manifest := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"` +
		config.Digest.String() + `","size":2},"layers":[{"mediaType":"application/json","digest":"` + desc.Digest.String() + `","size":17}]}`)
	d, err := f.PushManifest(ctx, repo+":t1", "application/vnd.oci.image.manifest.v1+json", manifest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := f.FetchManifest(ctx, reg.host+"/artifacts/a:t1")
	if err != nil {
		t.Fatal(err)
	}
	if m.Digest != d || m.MediaType != "application/vnd.oci.image.manifest.v1+json" || !bytes.Equal(m.Bytes, manifest) {
		t.Errorf("FetchManifest = %+v", m)
	}
	got, err := f.FetchBlob(ctx, repo, desc)
	if err != nil || !bytes.Equal(got, blob) {
		t.Errorf("FetchBlob = %q, %v", got, err)
	}

	_, err = f.FetchManifest(ctx, repo+":nope")
	checkErr(t, err, "reading "+reg.host+"/artifacts/a:nope: tag nope not found in "+reg.host+"/artifacts/a")
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("errors.Is(%v, ErrNotFound) is false", err)
	}
	missing := content.NewDescriptorFromBytes("application/json", []byte("missing"))
	_, err = f.FetchBlob(ctx, repo, missing)
	checkErr(t, err, "reading "+reg.host+"/artifacts/a@"+missing.Digest.String()+": blob "+missing.Digest.String()+" not found")
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("errors.Is(%v, ErrNotFound) is false", err)
	}
	_, err = f.PushManifest(ctx, repo+"@"+d, "application/vnd.oci.image.manifest.v1+json", manifest)
	checkErr(t, err, "...: a manifest needs a tag")
	_, err = f.FetchBlob(ctx, "registry://127.0.0.1:1/x", desc)
	checkErr(t, err, "reading 127.0.0.1:1/x@"+desc.Digest.String()+": cannot connect to 127.0.0.1:1: connection refused")
}
