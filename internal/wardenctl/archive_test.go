package wardenctl

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/testkit/ociregistry"
)

// readArchive returns the entries of a tar.gz: name to content.
func readArchive(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag != tar.TypeReg {
			t.Errorf("entry %s: type %c, want a regular file", hdr.Name, hdr.Typeflag)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[hdr.Name] = b
	}
}

// archiveEntry is an entry of a tar.gz written by a test.
type archiveEntry struct {
	hdr  tar.Header
	body []byte
}

// writeTestArchive writes a tar.gz of entries, as another tool would.
func writeTestArchive(t *testing.T, entries ...archiveEntry) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		hdr := e.hdr
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		hdr.Size = int64(len(e.body))
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return write(t, t.TempDir(), "policies.tar.gz", buf.String())
}

// TestSaveLoad pulls policies from a registry, saves them, and loads them
// into the store of another home, where they run without the registry.
func TestSaveLoad(t *testing.T) {
	reg := ociregistry.Start(t)
	sources := reg.SourcesFile(t)
	labels := "registry://" + reg.Host + "/policies/labels:v1"
	other := "registry://" + reg.Host + "/team/deep/path/policies/labels:v2"
	module, err := os.ReadFile(policy(t, "labels"))
	if err != nil {
		t.Fatal(err)
	}
	src := newEnv(t)
	for _, uri := range []string{labels, other} {
		src.mustRun("push", "--sources-path", sources, policy(t, "labels"), uri)
		src.mustRun("pull", "--sources-path", sources, uri)
	}

	out := filepath.Join(t.TempDir(), "policies.tar.gz")
	r := src.mustRun("save", "--output", out, labels, strings.TrimPrefix(other, "registry://"), labels)
	if r.stdout != "" {
		t.Errorf("save printed %q, want nothing (as kwctl)", r.stdout)
	}
	entries := readArchive(t, out)
	wantNames := []string{"registry/" + reg.Host + "/policies/labels:v1", "registry/" + reg.Host + "/team/deep/path/policies/labels:v2"}
	var names []string
	for name, b := range entries {
		names = append(names, name)
		if !bytes.Equal(b, module) {
			t.Errorf("entry %s is not the module pulled", name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, wantNames) {
		t.Errorf("entries %q, want %q", names, wantNames)
	}

	dst := newEnv(t)
	r = dst.mustRun("load", "--input", out)
	if r.stdout != "" {
		t.Errorf("load printed %q, want nothing (as kwctl)", r.stdout)
	}
	list := dst.mustRun("policies").stdout
	for _, uri := range []string{labels, other} {
		if !strings.Contains(list, uri) {
			t.Errorf("policies after load lacks %s:\n%s", uri, list)
		}
		b, err := os.ReadFile(filepath.Join(dst.storeDir(), "registry", filepath.FromSlash(strings.TrimPrefix(uri, "registry://"))))
		if err != nil || !bytes.Equal(b, module) {
			t.Errorf("store file of %s: %v, same module %t", uri, err, bytes.Equal(b, module))
		}
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dst.storeDir(), ".load-*")); len(leftovers) > 0 {
		t.Errorf("load left %q", leftovers)
	}

	// Saved again from the loaded store, by digest prefix: the same archive.
	again := filepath.Join(t.TempDir(), "again.tar.gz")
	dst.mustRun("save", "-o", again, sha256Hex(module)[:12])
	if got := readArchive(t, again); len(got) != 2 {
		t.Errorf("saved by digest prefix: %d entries, want both URIs of the module", len(got))
	}
}

// TestLoadKwctlArchive loads an archive laid out as kwctl writes it, with a
// name too long for a plain tar header, and runs the policy from the store
// without reaching its registry, which does not exist.
func TestLoadKwctlArchive(t *testing.T) {
	module, err := os.ReadFile(policy(t, "labels"))
	if err != nil {
		t.Fatal(err)
	}
	long := "registry/registry.invalid/" + strings.Repeat("nested/", 20) + "labels:v1"
	in := writeTestArchive(t,
		archiveEntry{hdr: tar.Header{Name: "registry/registry.invalid/policies/labels:v1"}, body: module},
		archiveEntry{hdr: tar.Header{Name: long, Format: tar.FormatGNU}, body: module},
		archiveEntry{hdr: tar.Header{Name: "https/example.invalid/", Typeflag: tar.TypeDir, Mode: 0o755}},
		archiveEntry{hdr: tar.Header{Name: "./https/example.invalid/labels.wasm"}, body: module},
	)
	e := newEnv(t)
	e.mustRun("load", "--input", in)
	request := requestFile(t, `{"app": "web", "forbidden": "x"}`, false)
	for _, uri := range []string{"registry://registry.invalid/policies/labels:v1", "registry://" + strings.TrimPrefix(long, "registry/"), "https://example.invalid/labels.wasm"} {
		r := e.mustRun("run", "-r", request, "--settings-json", `{"denied_labels":["forbidden"]}`, uri)
		if !strings.Contains(r.stdout, `"allowed":false`) {
			t.Errorf("run %s: %s", uri, r)
		}
	}
}

// TestLoadRefused checks that load refuses archives that are not archives
// of policies, and then leaves the store as it was.
func TestLoadRefused(t *testing.T) {
	module := []byte("\x00asm\x01\x00\x00\x00")
	good := archiveEntry{hdr: tar.Header{Name: "registry/example.invalid/policies/ok:v1"}, body: module}
	notGzip := write(t, t.TempDir(), "plain.tar", "not a tar.gz")
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"escapes the store", writeTestArchive(t, good, archiveEntry{hdr: tar.Header{Name: "registry/../../evil"}, body: module}), "the path leaves the store"},
		{"absolute", writeTestArchive(t, good, archiveEntry{hdr: tar.Header{Name: "/registry/example.invalid/x:v1"}, body: module}), "the path leaves the store"},
		{"symlink", writeTestArchive(t, good, archiveEntry{hdr: tar.Header{Name: "registry/example.invalid/link:v1", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}}), "not a regular file"},
		{"outside the layout", writeTestArchive(t, good, archiveEntry{hdr: tar.Header{Name: "config/sources.yaml"}, body: module}), "not a policy of the store"},
		{"too shallow", writeTestArchive(t, good, archiveEntry{hdr: tar.Header{Name: "registry/x"}, body: module}), "not a policy of the store"},
		{"hidden", writeTestArchive(t, good, archiveEntry{hdr: tar.Header{Name: "registry/example.invalid/.pull-1/x:v1"}, body: module}), "hidden files"},
		{"not gzip", notGzip, "cannot unpack file " + notGzip},
		{"missing", filepath.Join(t.TempDir(), "missing.tar.gz"), "cannot open file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			r := e.run("load", "--input", tc.in)
			if r.code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", r.code, r)
			}
			checkError(t, r, tc.want)
			if files := storedFiles(t, e); len(files) > 0 {
				t.Errorf("the store holds %q after a refused load", files)
			}
		})
	}
	t.Run("no input", func(t *testing.T) {
		r := newEnv(t).run("load")
		if r.code != 2 {
			t.Errorf("exit %d, want 2:\n%s", r.code, r)
		}
		checkError(t, r, "--input is required")
	})
}

// TestSaveRefused checks save's errors, after which no archive is left.
func TestSaveRefused(t *testing.T) {
	e := newEnv(t)
	e.mustRun("load", "--input", writeTestArchive(t,
		archiveEntry{hdr: tar.Header{Name: "registry/example.invalid/a:v1"}, body: []byte("\x00asm\x01\x00\x00\x00a")},
		archiveEntry{hdr: tar.Header{Name: "registry/example.invalid/b:v1"}, body: []byte("\x00asm\x01\x00\x00\x00b")},
	))
	dir := t.TempDir()
	out := filepath.Join(dir, "out.tar.gz")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"not in the store", []string{"save", "-o", out, "registry://example.invalid/a:v1", "registry://example.invalid/missing:v1"}, 1,
			"cannot find policy registry://example.invalid/missing:v1 in the store: pull it first"},
		{"no output", []string{"save", "registry://example.invalid/a:v1"}, 2, "-o/--output is required"},
		{"no policy", []string{"save", "-o", out}, 2, "requires at least 1 arg"},
		{"output directory missing", []string{"save", "-o", filepath.Join(dir, "missing", "out.tar.gz"), "registry://example.invalid/a:v1"}, 1, "cannot create file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.run(tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d:\n%s", r.code, tc.code, r)
			}
			checkError(t, r, tc.want)
			if left, _ := os.ReadDir(dir); len(left) > 0 {
				t.Errorf("save left %v in the output directory", left)
			}
		})
	}
}
