package wardenctl

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/testkit/ociregistry"
)

// annotatedLabels writes the labels policy with metadata that has a source
// annotation and a multi-line usage.
func annotatedLabels(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(policy(t, "labels"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := metadata.FromModule(b)
	if err != nil {
		t.Fatal(err)
	}
	m.Annotations[sourceAnnotation] = "https://example.com/labels"
	m.Annotations[usageAnnotation] = "# Labels\n\nDenies labels.\n"
	if b, err = metadata.Embed(b, m); err != nil {
		t.Fatal(err)
	}
	return write(t, t.TempDir(), "labels.wasm", string(b))
}

// manifestOf reads the manifest of ref from a registry sources trusts.
func manifestOf(t testing.TB, sources, ref string) map[string]any {
	t.Helper()
	src, err := policyfetch.LoadSources(sources)
	if err != nil {
		t.Fatal(err)
	}
	f, err := policyfetch.New(policyfetch.Options{StoreDir: t.TempDir(), Sources: src, DockerConfigPath: filepath.Join(t.TempDir(), "none")})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := f.FetchManifest(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(m.Bytes, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPushPullInspectRm(t *testing.T) {
	e := newEnv(t)
	reg := ociregistry.Start(t)
	sources := reg.SourcesFile(t)
	module := annotatedLabels(t)
	content, err := os.ReadFile(module)
	if err != nil {
		t.Fatal(err)
	}
	ref := "registry://" + reg.Host + "/policies/labels:v1"
	src := []string{"--sources-path", sources}

	// push
	r := e.mustRun(append([]string{"push"}, append(src, module, ref)...)...)
	m := regexp.MustCompile(`^Policy successfully pushed: registry://` + regexp.QuoteMeta(reg.Host) + `/policies/labels@(sha256:[0-9a-f]{64})\n$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("push printed %q", r.stdout)
	}
	manifestDigest := m[1]
	ann, _ := manifestOf(t, sources, ref)["annotations"].(map[string]any)
	if ann["io.kubewarden.policy.title"] != "labels" || ann[ociSourceAnnotation] != "https://example.com/labels" || ann[sourceAnnotation] != "https://example.com/labels" {
		t.Errorf("manifest annotations %v: want the title, the source and its OCI copy", ann)
	}
	if _, ok := ann[usageAnnotation]; ok {
		t.Errorf("the multi-line usage annotation reached the manifest")
	}
	r = e.mustRun(append([]string{"push", "-o", "json"}, append(src, module, reg.Host+"/policies/labels:v2")...)...)
	var js map[string]string
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || !strings.HasPrefix(js["immutable_ref"], "registry://"+reg.Host+"/policies/labels@sha256:") {
		t.Errorf("push -o json printed %q", r.stdout)
	}

	// digest
	r = e.mustRun(append([]string{"digest"}, append(src, ref)...)...)
	if want := ref + "@" + manifestDigest + "\n"; r.stdout != want {
		t.Errorf("digest printed %q, want %q", r.stdout, want)
	}

	// pull into the store, then list it
	r = e.mustRun(append([]string{"pull"}, append(src, ref)...)...)
	stored := filepath.Join(e.storeDir(), "registry", reg.Host, "policies", "labels:v1")
	if got, err := os.ReadFile(stored); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("store file %s: %v (pull printed %q)", stored, err, r.stdout)
	}
	e.mustRun(append([]string{"pull"}, append(src, ref)...)...) // again: replaced, not duplicated
	r = e.mustRun("policies")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	digest := sha256Hex(content)
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "POLICY") ||
		!regexp.MustCompile(`^`+regexp.QuoteMeta(ref)+`\s+no\s+no\s+`+digest[:12]+`\s+\d+\.\d MiB$`).MatchString(lines[1]) {
		t.Errorf("policies printed:\n%s", r.stdout)
	}

	// pull to a file
	out := filepath.Join(t.TempDir(), "out.wasm")
	e.mustRun(append([]string{"pull", "-o", out}, append(src, ref)...)...)
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, content) {
		t.Errorf("pull -o wrote %d bytes (%v), want the module", len(got), err)
	}

	// inspect by digest prefix, by URI, as YAML
	r = e.mustRun("inspect", "--show-signatures", digest[:10])
	for _, want := range []string{"Details", "policy:", ref, "title:", "labels", "source:", "https://example.com/labels",
		"mutating:", "execution mode:", "kubewarden-wapc", "protocol version:", "v1", "Annotations", "io.kubewarden.policy.severity",
		"Rules", "- apiGroups:", "Usage", "# Labels", "Signatures", "signature information not available"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect output lacks %q\n%s", want, r.stdout)
		}
	}
	r = e.mustRun(append([]string{"inspect", "-o", "yaml"}, append(src, ref)...)...)
	if !strings.HasPrefix(r.stdout, "protocolVersion: v1\nrules:\n") || !strings.Contains(r.stdout, "mutating: false") {
		t.Errorf("inspect -o yaml printed:\n%s", r.stdout)
	}

	// rm
	r = e.mustRun("rm", ref)
	if r.stdout != "Removed "+ref+"\n" {
		t.Errorf("rm printed %q", r.stdout)
	}
	if _, err := os.Stat(filepath.Join(e.storeDir(), "registry")); !os.IsNotExist(err) {
		t.Errorf("rm left the store's directories: %v", err)
	}
	if r := e.mustRun("policies"); strings.TrimSpace(r.stdout) != "POLICY  MUTATING  CONTEXT AWARE  SHA-256  SIZE" {
		t.Errorf("policies after rm:\n%s", r.stdout)
	}
}

func TestRegistryErrors(t *testing.T) {
	reg := ociregistry.Start(t)
	sources := reg.SourcesFile(t)
	bare := bareModule(t, "labels")
	labels := policy(t, "labels")
	tests := []struct {
		name    string
		args    []string
		code    int
		wantErr string
	}{
		{name: "push without metadata", args: []string{"push", "--sources-path", sources, bare, reg.Host + "/p/bare:v1"},
			code: 1, wantErr: "has no metadata: annotate it with `wardenctl annotate`, or push it anyway with --force"},
		{name: "push without metadata, forced", args: []string{"push", "-f", "--sources-path", sources, bare, reg.Host + "/p/bare:v1"}},
		{name: "push to a digest", args: []string{"push", labels, reg.Host + "/p/x@sha256:" + strings.Repeat("0", 64)},
			code: 2, wantErr: "push needs a tag, not a digest"},
		{name: "push to https", args: []string{"push", labels, "https://example.com/x"}, code: 2, wantErr: "is not a registry reference"},
		{name: "push, bad output", args: []string{"push", "-o", "xml", labels, reg.Host + "/p/x:v1"}, code: 2, wantErr: `invalid --output "xml"`},
		{name: "pull of a missing tag", args: []string{"pull", "--sources-path", sources, "registry://" + reg.Host + "/p/missing:v1"},
			code: 1, wantErr: "fetching registry://" + reg.Host + "/p/missing:v1"},
		{name: "pull without trusting the registry", args: []string{"pull", "registry://" + reg.Host + "/p/bare:v1"},
			code: 1, wantErr: "signed by an unknown authority"},
		{name: "pull of a file into the store", args: []string{"pull", "file://" + labels}, code: 2, wantErr: "a file:// policy is read where it is"},
		{name: "digest of a missing tag", args: []string{"digest", "--sources-path", sources, reg.Host + "/p/missing:v1"},
			code: 1, wantErr: "reading " + reg.Host + "/p/missing:v1: tag v1 not found in " + reg.Host + "/p/missing"},
		{name: "rm of what is not there", args: []string{"rm", "registry://" + reg.Host + "/p/none:v1"}, code: 1, wantErr: "no policy of the store is"},
		{name: "inspect without metadata", args: []string{"inspect", bare}, code: 1, wantErr: "no Kubewarden metadata found inside of file://"},
		{name: "inspect of native CEL", args: []string{"inspect", "builtin://cel"}, code: 1, wantErr: "it has no module and no metadata"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newEnv(t).run(tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s", r.code, tc.code, r)
			}
			if tc.code != 0 {
				checkError(t, r, tc.wantErr)
			}
		})
	}
}

func TestPullFileToOutput(t *testing.T) {
	e := newEnv(t)
	labels := policy(t, "labels")
	out := filepath.Join(t.TempDir(), "copy.wasm")
	e.mustRun("pull", "-o", out, "file://"+labels)
	a, _ := os.ReadFile(labels)
	b, _ := os.ReadFile(out)
	if !bytes.Equal(a, b) {
		t.Error("pull -o of a file:// policy did not copy it")
	}
}
