package sharedcache

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/pkitest"
)

// signing is a CA and a code-signing pair of it, written to files.
type signing struct {
	certFile, keyFile, caFile string
}

func newSigning(t *testing.T, ca *pkitest.CA, usage string) signing {
	t.Helper()
	dir := t.TempDir()
	var pair pkitest.Pair
	switch usage {
	case "code":
		pair = ca.CodeSigning(t, "policy-server-default cache")
	case "server":
		pair = ca.Server(t)
	}
	cert, key := pair.WriteFiles(t, dir, "")
	return signing{certFile: cert, keyFile: key, caFile: ca.WriteCA(t, dir)}
}

func open(t *testing.T, dir, version string, s signing) *Store {
	t.Helper()
	st, err := Open(Options{Dir: dir, Version: version, CertFile: s.certFile, KeyFile: s.keyFile, CAFile: s.caFile})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

const blobName = "wazero-v1.12.0-amd64-linux/0123abcd"

func TestPutThenGet(t *testing.T) {
	dir := t.TempDir()
	ca := pkitest.NewCA(t, "warden-ca")
	st := open(t, dir, "v1.2.3", newSigning(t, ca, "code"))
	digest := digestOf([]byte("module"))
	if err := st.Put(digest, Blob{Name: blobName, Data: []byte("machine code")}); err != nil {
		t.Fatal(err)
	}
	// Another replica, with a certificate of its own from the same CA.
	other := open(t, dir, "v1.2.3", newSigning(t, ca, "code"))
	blobs, errs := other.Get(digest)
	if len(errs) != 0 || len(blobs) != 1 || blobs[0].Name != blobName || string(blobs[0].Data) != "machine code" {
		t.Fatalf("Get = %+v, %v; want the blob stored", blobs, errs)
	}
	// Every file on the volume is a blob or its signature.
	var files []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	want := []string{"v1.2.3/" + digest + "/" + blobName, "v1.2.3/" + digest + "/" + blobName + ".sig"}
	if !slices.Equal(files, want) {
		t.Errorf("files = %v, want %v", files, want)
	}
	if blobs, errs := other.Get(digestOf([]byte("another module"))); len(blobs) != 0 || len(errs) != 0 {
		t.Errorf("Get of a module never stored = %+v, %v", blobs, errs)
	}
}

func TestGetRefusesWhatDoesNotVerify(t *testing.T) {
	ca := pkitest.NewCA(t, "warden-ca")
	digest := digestOf([]byte("module"))
	path := func(st *Store) string { return filepath.Join(st.Dir(), digest, filepath.FromSlash(blobName)) }
	cases := []struct {
		name  string
		spoil func(t *testing.T, dir string, st *Store)
		want  string
	}{
		{"a byte of the blob changed", func(t *testing.T, _ string, st *Store) {
			b, _ := os.ReadFile(path(st))
			b[3] ^= 0xff
			mustWrite(t, path(st), b)
		}, "does not match"},
		{"the blob replaced, signature kept", func(t *testing.T, _ string, st *Store) {
			mustWrite(t, path(st), []byte("malicious code"))
		}, "does not match"},
		{"no signature", func(t *testing.T, _ string, st *Store) {
			os.Remove(path(st) + sigSuffix)
		}, "no signature"},
		{"an unreadable signature", func(t *testing.T, _ string, st *Store) {
			mustWrite(t, path(st)+sigSuffix, []byte("{"))
		}, "unreadable signature"},
		{"signed by another CA", func(t *testing.T, dir string, st *Store) {
			rogue := open(t, dir, "v1", newSigning(t, pkitest.NewCA(t, "rogue"), "code"))
			if err := rogue.Put(digest, Blob{Name: blobName, Data: []byte("malicious code")}); err != nil {
				t.Fatal(err)
			}
		}, "certificate signed by unknown authority"},
		{"signed with a serving certificate of the CA", func(t *testing.T, dir string, st *Store) {
			server := open(t, dir, "v1", newSigning(t, ca, "server"))
			if err := server.Put(digest, Blob{Name: blobName, Data: []byte("malicious code")}); err != nil {
				t.Fatal(err)
			}
		}, "incompatible key usage"},
		{"a blob of another module moved over it", func(t *testing.T, _ string, st *Store) {
			other := digestOf([]byte("other"))
			if err := st.Put(other, Blob{Name: blobName, Data: []byte("other code")}); err != nil {
				t.Fatal(err)
			}
			from := filepath.Join(st.Dir(), other, filepath.FromSlash(blobName))
			for _, suffix := range []string{"", sigSuffix} {
				if err := os.Rename(from+suffix, path(st)+suffix); err != nil {
					t.Fatal(err)
				}
			}
		}, "does not match"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newSigning(t, ca, "code")
			st := open(t, dir, "v1", s)
			if err := st.Put(digest, Blob{Name: blobName, Data: []byte("machine code")}); err != nil {
				t.Fatal(err)
			}
			tc.spoil(t, dir, st)
			blobs, errs := st.Get(digest)
			if len(blobs) != 0 {
				t.Fatalf("Get returned %d blobs, want none", len(blobs))
			}
			var refused *RefusedError
			if len(errs) != 1 || !errors.As(errs[0], &refused) || !strings.Contains(errs[0].Error(), tc.want) {
				t.Fatalf("Get errors = %v, want one refusal saying %q", errs, tc.want)
			}
			if st.Refused() != 1 {
				t.Errorf("Refused() = %d, want 1", st.Refused())
			}
			for _, p := range []string{path(st), path(st) + sigSuffix} {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s is still on the volume (%v)", p, err)
				}
			}
			// The replica compiles again and stores good code.
			if err := st.Put(digest, Blob{Name: blobName, Data: []byte("machine code")}); err != nil {
				t.Fatal(err)
			}
			if blobs, errs := st.Get(digest); len(blobs) != 1 || len(errs) != 0 {
				t.Errorf("after the rebuild Get = %d blobs, %v", len(blobs), errs)
			}
		})
	}
}

func mustWrite(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := writeFile(path, data); err != nil {
		t.Fatal(err)
	}
}

func TestOtherVersionsAreNeverRead(t *testing.T) {
	dir := t.TempDir()
	s := newSigning(t, pkitest.NewCA(t, "warden-ca"), "code")
	old := open(t, dir, "v1.0.0", s)
	digest := digestOf([]byte("module"))
	if err := old.Put(digest, Blob{Name: blobName, Data: []byte("old code")}); err != nil {
		t.Fatal(err)
	}
	current := open(t, dir, "v1.1.0", s)
	if blobs, errs := current.Get(digest); len(blobs) != 0 || len(errs) != 0 {
		t.Fatalf("v1.1.0 read %d blobs of v1.0.0 (%v)", len(blobs), errs)
	}
	// Copied into the new version's directory, the old blob does not verify:
	// the signature binds the version.
	to := filepath.Join(current.Dir(), digest, filepath.FromSlash(blobName))
	os.MkdirAll(filepath.Dir(to), 0o755)
	from := filepath.Join(old.Dir(), digest, filepath.FromSlash(blobName))
	for _, suffix := range []string{"", sigSuffix} {
		b, _ := os.ReadFile(from + suffix)
		mustWrite(t, to+suffix, b)
	}
	if blobs, errs := current.Get(digest); len(blobs) != 0 || len(errs) != 1 {
		t.Fatalf("a v1.0.0 blob copied under v1.1.0: Get = %d blobs, %v; want it refused", len(blobs), errs)
	}
}

func TestCollect(t *testing.T) {
	dir := t.TempDir()
	st := open(t, dir, "v1", newSigning(t, pkitest.NewCA(t, "warden-ca"), "code"))
	kept, dropped := digestOf([]byte("kept")), digestOf([]byte("dropped"))
	for _, d := range []string{kept, dropped} {
		if err := st.Put(d, Blob{Name: blobName, Data: []byte("code")}); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(st.Dir(), "stray"), []byte("x"), 0o600)
	removed, err := st.Collect(map[string]bool{kept: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{dropped}) {
		t.Errorf("Collect removed %v, want [%s]", removed, dropped)
	}
	entries, _ := os.ReadDir(st.Dir())
	if len(entries) != 1 || entries[0].Name() != kept {
		t.Errorf("left %v, want only %s", entries, kept)
	}
}

func TestOpenChecksTheSigningFiles(t *testing.T) {
	ca := pkitest.NewCA(t, "warden-ca")
	good := newSigning(t, ca, "code")
	other := newSigning(t, ca, "code")
	cases := []struct {
		name string
		opts Options
		want string
	}{
		{"missing key", Options{Version: "v1", CertFile: good.certFile, KeyFile: "/nonexistent", CAFile: good.caFile}, "reading the signing key"},
		{"key of another certificate", Options{Version: "v1", CertFile: good.certFile, KeyFile: other.keyFile, CAFile: good.caFile}, "does not match the certificate"},
		{"CA is not PEM", Options{Version: "v1", CertFile: good.certFile, KeyFile: good.keyFile, CAFile: good.keyFile}, "no PEM CERTIFICATE"},
		{"version with a slash", Options{Version: "a/b", CertFile: good.certFile, KeyFile: good.keyFile, CAFile: good.caFile}, "not a usable version"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Dir = t.TempDir()
			if _, err := Open(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestPutRefusesBadNames(t *testing.T) {
	st := open(t, t.TempDir(), "v1", newSigning(t, pkitest.NewCA(t, "warden-ca"), "code"))
	digest := digestOf([]byte("module"))
	for _, name := range []string{"", "../escape", "/abs", "x.sig"} {
		if err := st.Put(digest, Blob{Name: name, Data: []byte("x")}); err == nil {
			t.Errorf("Put(%q) succeeded", name)
		}
	}
	if err := st.Put("../../etc", Blob{Name: blobName}); err == nil {
		t.Error("Put with a digest that is a path succeeded")
	}
}
