package certwatch

import (
	"crypto/tls"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/pkitest"
)

// TestCipherSuites checks what a TLS 1.2 client may negotiate with the
// default configuration: an AEAD suite, never a CBC one.
func TestCipherSuites(t *testing.T) {
	serverCA := pkitest.NewCA(t, "server-ca")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	pair := serverCA.Server(t)
	writePair(t, certFile, keyFile, pair)
	w, err := New(certFile, keyFile, nil, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	addr := serve(t, w.TLSConfig())

	tests := []struct {
		name    string
		max     uint16
		suites  []uint16
		wantErr bool
	}{
		{"TLS 1.2 CBC only", tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA}, true},
		{"TLS 1.2 CBC-SHA256 only", tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256}, true},
		{"TLS 1.2 AES-GCM", tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}, false},
		{"TLS 1.2 AES-256-GCM", tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}, false},
		{"TLS 1.2 ChaCha20-Poly1305", tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}, false},
		{"TLS 1.3", tls.VersionTLS13, nil, false},
		{"TLS 1.1", tls.VersionTLS11, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state, err := handshake(addr, &tls.Config{RootCAs: serverCA.Pool(), ServerName: "localhost", MaxVersion: tt.max, CipherSuites: tt.suites})
			if tt.wantErr {
				if err == nil {
					t.Fatalf("handshake succeeded with %s, want it refused", tls.CipherSuiteName(state.CipherSuite))
				}
				return
			}
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			if tt.suites != nil && state.CipherSuite != tt.suites[0] {
				t.Errorf("negotiated %s, want %s", tls.CipherSuiteName(state.CipherSuite), tls.CipherSuiteName(tt.suites[0]))
			}
		})
	}
}

// handshake connects to addr with cfg and returns the connection's state once
// the server has answered.
func handshake(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer conn.Close()
	return conn.ConnectionState(), nil
}

func TestParseCipherSuites(t *testing.T) {
	tests := []struct {
		names   []string
		want    []uint16
		wantErr string
	}{
		{names: nil, want: defaultCipherSuites},
		{names: []string{"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", " TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA"},
			want: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}},
		{names: []string{"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES128-SHA"},
			wantErr: `unknown or insecure TLS 1.2 cipher suite "ECDHE-ECDSA-AES128-SHA" (accepted: `},
		{names: []string{"TLS_RSA_WITH_RC4_128_SHA"}, wantErr: `"TLS_RSA_WITH_RC4_128_SHA"`},
		{names: []string{"TLS_AES_128_GCM_SHA256"}, wantErr: `"TLS_AES_128_GCM_SHA256"`}, // TLS 1.3: not configurable
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.names, ","), func(t *testing.T) {
			got, err := ParseCipherSuites(tt.names)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256") {
					t.Fatalf("error = %v, want %q and the accepted names", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestParseMinVersion(t *testing.T) {
	for name, want := range map[string]uint16{"1.2": tls.VersionTLS12, "VersionTLS12": tls.VersionTLS12, "1.3": tls.VersionTLS13, "VersionTLS13": tls.VersionTLS13} {
		if got, err := ParseMinVersion(name); err != nil || got != want {
			t.Errorf("ParseMinVersion(%q) = %x, %v; want %x", name, got, err, want)
		}
	}
	for _, name := range []string{"", "1.1", "VersionTLS10", "tls1.2"} {
		if _, err := ParseMinVersion(name); err == nil || !strings.Contains(err.Error(), "accepted: 1.2, 1.3") {
			t.Errorf("ParseMinVersion(%q): %v, want an error listing the accepted versions", name, err)
		}
	}
}
