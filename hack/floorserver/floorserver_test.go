package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const review = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
	"uid":"705ab4f5-6393-11e8-b7cc-42010a800002",
	"kind":{"group":"","version":"v1","kind":"Pod"},
	"requestKind":{"group":"","version":"v1","kind":"Pod"},
	"namespace":"default","operation":"CREATE",
	"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","labels":{"app":"web"}}}}}`

const allowed = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","allowed":true}}`

func TestHandler(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantBody   string // exact if set
	}{
		{name: "review is allowed", method: http.MethodPost, path: "/validate/labels", body: review, wantStatus: http.StatusOK, wantBody: allowed},
		{name: "any name", method: http.MethodPost, path: "/validate/x", body: review, wantStatus: http.StatusOK, wantBody: allowed},
		{name: "bad JSON", method: http.MethodPost, path: "/validate/x", body: `{"request":`, wantStatus: http.StatusBadRequest},
		{name: "no request", method: http.MethodPost, path: "/validate/x", body: `{"kind":"AdmissionReview"}`, wantStatus: http.StatusBadRequest},
		{name: "too large", method: http.MethodPost, path: "/validate/x", body: strings.Repeat(" ", maxBodyBytes+1), wantStatus: http.StatusRequestEntityTooLarge},
		{name: "GET", method: http.MethodGet, path: "/validate/x", wantStatus: http.StatusMethodNotAllowed},
		{name: "other path", method: http.MethodPost, path: "/mutate/x", body: review, wantStatus: http.StatusNotFound},
	}
	h := newHandler()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body)))
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d (body %q)", rec.Code, tt.wantStatus, rec.Body)
			}
			if tt.wantBody != "" {
				if got := rec.Body.String(); got != tt.wantBody {
					t.Errorf("body = %s, want %s", got, tt.wantBody)
				}
				if got := rec.Header().Get("Content-Type"); got != "application/json" {
					t.Errorf("Content-Type = %q, want application/json", got)
				}
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "defaults", opts: Options{Addr: "127.0.0.1:3100"}},
		{name: "cert and key", opts: Options{Addr: ":0", CertFile: "c.pem", KeyFile: "k.pem"}},
		{name: "no addr", opts: Options{}, wantErr: "-addr"},
		{name: "cert without key", opts: Options{Addr: ":0", CertFile: "c.pem"}, wantErr: "go together"},
		{name: "write-ca with cert", opts: Options{Addr: ":0", CertFile: "c.pem", KeyFile: "k.pem", WriteCA: "ca.pem"}, wantErr: "-write-ca"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestSelfSignedCert(t *testing.T) {
	now := time.Now()
	cert, certPEM, err := selfSignedCert(now)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(certPEM) {
		t.Fatal("the PEM holds no certificate")
	}
	for _, host := range []string{"127.0.0.1", "::1", "localhost"} {
		t.Run(host, func(t *testing.T) {
			_, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: pool, CurrentTime: now})
			if err != nil {
				t.Errorf("Verify(%s) = %v", host, err)
			}
		})
	}
}

// TestRun starts the server on a free port, with a generated certificate or
// one from files, and sends it one review over HTTPS.
func TestRun(t *testing.T) {
	tests := []struct {
		name string
		// setup returns the extra flags and the file of the certificate to
		// trust, which may only exist once the server listens.
		setup func(t *testing.T, dir string) (args []string, caFile string)
	}{
		{
			name: "generated certificate",
			setup: func(t *testing.T, dir string) ([]string, string) {
				ca := filepath.Join(dir, "ca.pem")
				return []string{"-write-ca", ca}, ca
			},
		},
		{
			name: "certificate files",
			setup: func(t *testing.T, dir string) ([]string, string) {
				cert, certPEM, err := selfSignedCert(time.Now())
				if err != nil {
					t.Fatal(err)
				}
				keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
				if err != nil {
					t.Fatal(err)
				}
				certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
				keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
				if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
					t.Fatal(err)
				}
				return []string{"-cert-file", certFile, "-key-file", keyFile}, certFile
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			extra, caFile := tt.setup(t, t.TempDir())
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			outR, outW := io.Pipe()
			var stderr strings.Builder
			done := make(chan int, 1)
			go func() {
				args := append([]string{"floorserver", "-addr", "127.0.0.1:0"}, extra...)
				done <- run(ctx, args, outW, &stderr)
				outW.Close()
			}()

			sc := bufio.NewScanner(outR)
			if !sc.Scan() {
				t.Fatalf("no output; exit %d, stderr %q", <-done, stderr.String())
			}
			base, ok := strings.CutPrefix(sc.Text(), "listening on ")
			if !ok {
				t.Fatalf("first line = %q, want listening on ...", sc.Text())
			}
			go func() { _, _ = io.Copy(io.Discard, outR) }()

			caPEM, err := os.ReadFile(caFile)
			if err != nil {
				t.Fatal(err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(caPEM) {
				t.Fatalf("%s holds no certificate", caFile)
			}
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
			defer client.CloseIdleConnections()
			resp, err := client.Post(base+"/validate/labels", "application/json", strings.NewReader(review))
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK || string(body) != allowed {
				t.Errorf("answer = %d %s, want 200 %s", resp.StatusCode, body, allowed)
			}

			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("run returned %d, want 0; stderr %q", code, stderr.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("run did not return after cancel")
			}
		})
	}
}
