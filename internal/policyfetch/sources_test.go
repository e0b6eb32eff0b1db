package policyfetch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/pkitest"
)

func TestParseSources(t *testing.T) {
	ca1, ca2 := pkitest.NewCA(t, "ca one"), pkitest.NewCA(t, "ca two")
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	derPath := write("ca.der", ca1.Cert.Raw)
	bundlePath := write("bundle.pem", append(append([]byte{}, ca1.CertPEM...), ca2.CertPEM...))
	indented := "        " + strings.ReplaceAll(strings.TrimSpace(string(ca1.CertPEM)), "\n", "\n        ")
	var derInts []string
	for _, b := range ca1.Cert.Raw {
		derInts = append(derInts, fmt.Sprint(b))
	}

	tests := []struct {
		name, yaml string
		wantErr    string
		check      func(t *testing.T, s *Sources)
	}{
		{
			name: "insecure sources and PEM data, as in Kubewarden's tests",
			yaml: "insecure_sources:\n  - \"localhost:5000\"\nsource_authorities:\n  \"example.com:5000\":\n    - type: Data\n      data: |\n" + indented + "\n",
			check: func(t *testing.T, s *Sources) {
				if !s.IsInsecure("localhost:5000") || s.IsInsecure("localhost") {
					t.Errorf("insecure sources = %v", s.InsecureSources)
				}
				if got := s.authorities("example.com:5000"); len(got) != 1 || !got[0].Equal(ca1.Cert) {
					t.Errorf("authorities = %v", got)
				}
			},
		},
		{
			name: "DER file by path",
			yaml: fmt.Sprintf("source_authorities:\n  h:\n    - type: Path\n      path: %q\n", derPath),
			check: func(t *testing.T, s *Sources) {
				if got := s.authorities("h"); len(got) != 1 || !got[0].Equal(ca1.Cert) {
					t.Errorf("authorities = %v", got)
				}
			},
		},
		{
			name: "PEM bundle by path and DER data as bytes",
			yaml: fmt.Sprintf("source_authorities:\n  h:\n    - type: Path\n      path: %q\n    - type: Data\n      data: [%s]\n", bundlePath, strings.Join(derInts, ",")),
			check: func(t *testing.T, s *Sources) {
				got := s.authorities("h")
				if len(got) != 3 || !got[0].Equal(ca1.Cert) || !got[1].Equal(ca2.Cert) || !got[2].Equal(ca1.Cert) {
					t.Errorf("got %d authorities", len(got))
				}
			},
		},
		{
			name: "JSON, unknown keys ignored",
			yaml: `{"insecure_sources": ["a:1"], "future_key": true, "source_authorities": {"h": [{"type": "Path", "path": "` + derPath + `", "comment": "x"}]}}`,
			check: func(t *testing.T, s *Sources) {
				if !s.IsInsecure("a:1") || len(s.authorities("h")) != 1 {
					t.Errorf("sources = %+v", s)
				}
			},
		},
		{
			name: "proxies",
			yaml: "proxies:\n  http_proxy: http://proxy.corp:3128\n  https_proxy: http://proxy.corp:3129\n  no_proxy: localhost,.corp\n",
			check: func(t *testing.T, s *Sources) {
				want := ProxyConfig{HTTPProxy: "http://proxy.corp:3128", HTTPSProxy: "http://proxy.corp:3129", NoProxy: "localhost,.corp"}
				if s.Proxies == nil || *s.Proxies != want {
					t.Errorf("proxies = %+v", s.Proxies)
				}
			},
		},
		{
			name: "empty",
			yaml: "",
			check: func(t *testing.T, s *Sources) {
				if len(s.InsecureSources)+len(s.SourceAuthorities) != 0 || s.Proxies != nil {
					t.Errorf("sources = %+v", s)
				}
			},
		},
		{name: "unknown type", yaml: "source_authorities:\n  h:\n    - type: File\n      path: /x\n", wantErr: `source authority 1 of h: unknown type "File" (want Path or Data)`},
		{name: "missing type", yaml: "source_authorities:\n  h:\n    - path: /x\n", wantErr: `source authority 1 of h: unknown type "" (want Path or Data)`},
		{name: "not a certificate", yaml: "source_authorities:\n  h:\n    - type: Data\n      data: hello\n", wantErr: "source authority 1 of h: the certificate is neither PEM nor DER"},
		{name: "missing file", yaml: "source_authorities:\n  h:\n    - type: Path\n      path: /does/not/exist.pem\n", wantErr: "source authority 1 of h: reading certificate: open /does/not/exist.pem: no such file or directory"},
		{name: "byte out of range", yaml: "source_authorities:\n  h:\n    - type: Data\n      data: [1, 300]\n", wantErr: "...data byte 1 is 300, out of range"},
		{name: "not YAML", yaml: "insecure_sources: [", wantErr: "...parsing sources: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSources([]byte(tc.yaml))
			if tc.wantErr != "" {
				checkErr(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
		})
	}
}

func TestLoadSources(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sources.yml")
	if err := os.WriteFile(p, []byte("insecure_sources: [\"r:5000\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := LoadSources(p)
	if err != nil || !s.IsInsecure("r:5000") {
		t.Fatalf("LoadSources = %+v, %v", s, err)
	}
	_, err = LoadSources(p + ".missing")
	checkErr(t, err, "loading sources from "+p+".missing: open "+p+".missing: no such file or directory")
}
