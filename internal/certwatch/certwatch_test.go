package certwatch

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/pkitest"
	"github.com/wardenhq/warden/internal/testkit"
)

// --- fixtures ---------------------------------------------------------------

// writePair writes a certificate and its key.
func writePair(t *testing.T, certFile, keyFile string, pair pkitest.Pair) {
	t.Helper()
	writeFile(t, certFile, pair.CertPEM)
	writeFile(t, keyFile, pair.KeyPEM)
}

// clientCert returns a client certificate of ca named name.
func clientCert(t *testing.T, ca *pkitest.CA, name string) *tls.Certificate {
	t.Helper()
	c := ca.Client(t, name).TLSCertificate(t)
	return &c
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// logLines returns the logged lines that contain msg.
func logLines(b *logtest.Buffer, msg string) []string {
	var out []string
	for line := range strings.Lines(b.String()) {
		if strings.Contains(line, msg) {
			out = append(out, line)
		}
	}
	return out
}

// serve runs a TLS server with cfg that writes "ok\n" to every connection
// whose handshake succeeds, and returns its address.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				if err := conn.(*tls.Conn).Handshake(); err != nil {
					return
				}
				_, _ = conn.Write([]byte("ok\n"))
			}()
		}
	}()
	return l.Addr().String()
}

// dial connects to addr trusting roots, presenting clientCert if not nil, and
// returns the serial number of the server's leaf certificate once the server
// has accepted the connection.
func dial(addr string, roots *x509.CertPool, clientCert *tls.Certificate) (*big.Int, error) {
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost"}
	if clientCert != nil {
		cfg.Certificates = []tls.Certificate{*clientCert}
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// With TLS 1.3 the server checks the client certificate after the
	// client's side of the handshake is done: a refusal shows on read.
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	if line != "ok\n" {
		return nil, fmt.Errorf("read %q", line)
	}
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// serving tells whether the server presents pair's certificate now,
// failing the test if the connection fails.
func serving(t *testing.T, addr string, roots *x509.CertPool, clientCert *tls.Certificate, pair pkitest.Pair) bool {
	t.Helper()
	serial, err := dial(addr, roots, clientCert)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	block, _ := pem.Decode(pair.CertPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return serial.Cmp(cert.SerialNumber) == 0
}

// start creates a Watcher on the files, runs it until the test ends and
// serves TLS with it.
func start(t *testing.T, certFile, keyFile string, caFiles []string, resync time.Duration) (*Watcher, *logtest.Buffer, string) {
	t.Helper()
	logs := &logtest.Buffer{}
	w, err := New(certFile, keyFile, caFiles, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	w.resync = resync
	w.settle = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	// Changes the test makes from now on happen after the watch is set up.
	testkit.Eventually(t, 20*time.Second, "watch set up", func() bool { return len(logLines(logs, msgWatching)) > 0 })
	return w, logs, serve(t, w.TLSConfig())
}

// --- tests ------------------------------------------------------------------

func TestNewErrors(t *testing.T) {
	ca := pkitest.NewCA(t, "ca")
	pair1, pair2 := ca.Server(t), ca.Server(t)
	dir := t.TempDir()
	files := map[string][]byte{
		"cert1": pair1.CertPEM, "key1": pair1.KeyPEM, "key2": pair2.KeyPEM, "ca": ca.CertPEM,
		"garbage": []byte("not PEM"), "empty": nil,
	}
	for name, data := range files {
		writeFile(t, filepath.Join(dir, name), data)
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	tests := []struct {
		name          string
		cert, key     string
		cas           []string
		wantErrSubstr string
	}{
		{name: "missing cert", cert: p("nope"), key: p("key1"), wantErrSubstr: "reading certificate"},
		{name: "missing key", cert: p("cert1"), key: p("nope"), wantErrSubstr: "reading key"},
		{name: "key of another cert", cert: p("cert1"), key: p("key2"), wantErrSubstr: "private key does not match public key"},
		{name: "garbage key", cert: p("cert1"), key: p("garbage"), wantErrSubstr: "loading certificate"},
		{name: "missing client CA", cert: p("cert1"), key: p("key1"), cas: []string{p("ca"), p("nope")}, wantErrSubstr: "reading client CA"},
		{name: "empty client CA", cert: p("cert1"), key: p("key1"), cas: []string{p("empty")}, wantErrSubstr: "no PEM certificate found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cert, tt.key, tt.cas, nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantErrSubstr) {
				t.Errorf("New: err = %v, want one containing %q", err, tt.wantErrSubstr)
			}
		})
	}
	t.Run("valid", func(t *testing.T) {
		w, err := New(p("cert1"), p("key1"), []string{p("ca")}, nil)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		cfg := w.TLSConfig()
		if cfg.MinVersion != tls.VersionTLS12 || cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.GetConfigForClient == nil {
			t.Errorf("TLSConfig = MinVersion %x, ClientAuth %v, GetConfigForClient set %v", cfg.MinVersion, cfg.ClientAuth, cfg.GetConfigForClient != nil)
		}
	})
}

func TestReloadPlainRewrite(t *testing.T) {
	ca := pkitest.NewCA(t, "ca")
	roots := ca.Pool()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	pair1 := ca.Server(t)
	writePair(t, certFile, keyFile, pair1)
	_, logs, addr := start(t, certFile, keyFile, nil, time.Hour) // events only

	if !serving(t, addr, roots, nil, pair1) {
		t.Fatal("the server does not present certificate 1")
	}

	// Rewrite both files in place; the watcher may see the new certificate
	// with the old key in between, which must not be served.
	pair2 := ca.Server(t)
	writePair(t, certFile, keyFile, pair2)
	testkit.Eventually(t, 20*time.Second, "certificate 2 served", func() bool { return serving(t, addr, roots, nil, pair2) })
	testkit.Eventually(t, 20*time.Second, "reload logged", func() bool { return len(logLines(logs, msgCertReloaded)) > 0 })

	// A broken key: the previous pair keeps being served, and a warning says why.
	logs.Reset()
	writeFile(t, keyFile, []byte("-----BEGIN PRIVATE KEY-----\nbroken\n-----END PRIVATE KEY-----\n"))
	testkit.Eventually(t, 20*time.Second, "reload failure logged", func() bool { return len(logLines(logs, msgCertReloadFailed)) > 0 })
	if line := logLines(logs, msgCertReloadFailed)[0]; !strings.Contains(line, "level=WARN") || !strings.Contains(line, "error=") {
		t.Errorf("failure log = %q, want a warning with an error", line)
	}
	if !serving(t, addr, roots, nil, pair2) {
		t.Error("after a broken key, the server does not present certificate 2")
	}

	// The next good pair is picked up.
	pair3 := ca.Server(t)
	writeFile(t, keyFile, pair3.KeyPEM)
	writeFile(t, certFile, pair3.CertPEM)
	testkit.Eventually(t, 20*time.Second, "certificate 3 served", func() bool { return serving(t, addr, roots, nil, pair3) })
}

// atomicWriter lays files out as Kubernetes does for a mounted Secret:
//
//	dir/tls.crt -> ..data/tls.crt
//	dir/..data  -> ..<timestamp>
//	dir/..<timestamp>/tls.crt
//
// and updates them by swapping the ..data symlink.
type atomicWriter struct {
	dir     string
	version int
}

func (a *atomicWriter) write(t *testing.T, files map[string][]byte) {
	t.Helper()
	a.version++
	ts := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", a.version, a.version)
	if err := os.Mkdir(filepath.Join(a.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		writeFile(t, filepath.Join(a.dir, ts, name), data)
	}
	old, _ := os.Readlink(filepath.Join(a.dir, "..data"))
	if err := os.Symlink(ts, filepath.Join(a.dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(a.dir, "..data_tmp"), filepath.Join(a.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(a.dir, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(a.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReloadKubernetesSymlinkSwap(t *testing.T) {
	ca := pkitest.NewCA(t, "ca")
	roots := ca.Pool()
	secret := &atomicWriter{dir: t.TempDir()}
	pair1 := ca.Server(t)
	secret.write(t, map[string][]byte{"tls.crt": pair1.CertPEM, "tls.key": pair1.KeyPEM})
	certFile, keyFile := filepath.Join(secret.dir, "tls.crt"), filepath.Join(secret.dir, "tls.key")
	_, logs, addr := start(t, certFile, keyFile, nil, time.Hour) // events only

	if !serving(t, addr, roots, nil, pair1) {
		t.Fatal("the server does not present certificate 1")
	}

	pair2 := ca.Server(t)
	secret.write(t, map[string][]byte{"tls.crt": pair2.CertPEM, "tls.key": pair2.KeyPEM})
	testkit.Eventually(t, 20*time.Second, "certificate 2 served", func() bool { return serving(t, addr, roots, nil, pair2) })

	// A Secret whose key does not match its certificate.
	logs.Reset()
	pair3 := ca.Server(t)
	secret.write(t, map[string][]byte{"tls.crt": pair3.CertPEM, "tls.key": pair1.KeyPEM})
	testkit.Eventually(t, 20*time.Second, "reload failure logged", func() bool { return len(logLines(logs, msgCertReloadFailed)) > 0 })
	if !serving(t, addr, roots, nil, pair2) {
		t.Error("after a mismatched pair, the server does not present certificate 2")
	}

	pair4 := ca.Server(t)
	secret.write(t, map[string][]byte{"tls.crt": pair4.CertPEM, "tls.key": pair4.KeyPEM})
	testkit.Eventually(t, 20*time.Second, "certificate 4 served", func() bool { return serving(t, addr, roots, nil, pair4) })
}

// TestResyncWithoutEvents changes the files where no watch sees it: the
// served files are symlinks into another directory.
func TestResyncWithoutEvents(t *testing.T) {
	ca := pkitest.NewCA(t, "ca")
	roots := ca.Pool()
	watched, elsewhere := t.TempDir(), t.TempDir()
	pair1 := ca.Server(t)
	writePair(t, filepath.Join(elsewhere, "tls.crt"), filepath.Join(elsewhere, "tls.key"), pair1)
	for _, name := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join(elsewhere, name), filepath.Join(watched, name)); err != nil {
			t.Fatal(err)
		}
	}
	_, _, addr := start(t, filepath.Join(watched, "tls.crt"), filepath.Join(watched, "tls.key"), nil, 50*time.Millisecond)

	pair2 := ca.Server(t)
	writePair(t, filepath.Join(elsewhere, "tls.crt"), filepath.Join(elsewhere, "tls.key"), pair2)
	testkit.Eventually(t, 20*time.Second, "certificate 2 served", func() bool { return serving(t, addr, roots, nil, pair2) })
}

func TestMutualTLS(t *testing.T) {
	serverCA, clientCA, otherCA := pkitest.NewCA(t, "server-ca"), pkitest.NewCA(t, "client-ca"), pkitest.NewCA(t, "other-ca")
	roots := serverCA.Pool()
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "client-ca.crt")
	pair := serverCA.Server(t)
	writePair(t, certFile, keyFile, pair)
	writeFile(t, caFile, clientCA.CertPEM)
	_, logs, addr := start(t, certFile, keyFile, []string{caFile}, time.Hour)

	trusted, untrusted := clientCert(t, clientCA, "leaf-1"), clientCert(t, otherCA, "leaf-2")
	if _, err := dial(addr, roots, nil); err == nil {
		t.Error("client without a certificate: accepted, want refused")
	}
	if _, err := dial(addr, roots, untrusted); err == nil {
		t.Error("client with a certificate of another CA: accepted, want refused")
	}
	if !serving(t, addr, roots, trusted, pair) {
		t.Error("the server does not present its certificate")
	}

	// The client CA is reloaded too.
	writeFile(t, caFile, otherCA.CertPEM)
	testkit.Eventually(t, 20*time.Second, "new client CA", func() bool { _, err := dial(addr, roots, untrusted); return err == nil })
	if _, err := dial(addr, roots, trusted); err == nil {
		t.Error("client of the replaced CA: accepted, want refused")
	}
	testkit.Eventually(t, 20*time.Second, "CA reload logged", func() bool { return len(logLines(logs, msgCAReloaded)) > 0 })

	// A client CA file without certificates keeps the previous pool.
	logs.Reset()
	writeFile(t, caFile, []byte("nothing here"))
	testkit.Eventually(t, 20*time.Second, "CA reload failure logged", func() bool { return len(logLines(logs, msgCAReloadFailed)) > 0 })
	if _, err := dial(addr, roots, untrusted); err != nil {
		t.Errorf("client of the current CA after a broken CA file: %v", err)
	}
}

// TestHTTPServerMutualTLS checks the configuration with net/http: the
// per-connection configuration keeps the ALPN protocols http.Server adds, so
// HTTP/2 is still negotiated.
func TestHTTPServerMutualTLS(t *testing.T) {
	serverCA, clientCA := pkitest.NewCA(t, "server-ca"), pkitest.NewCA(t, "client-ca")
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "client-ca.crt")
	pair := serverCA.Server(t)
	writePair(t, certFile, keyFile, pair)
	writeFile(t, caFile, clientCA.CertPEM)
	w, err := New(certFile, keyFile, []string{caFile}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		TLSConfig: w.TLSConfig(),
		Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			fmt.Fprint(rw, r.TLS.PeerCertificates[0].Subject.CommonName)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { srv.Close() })

	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			ForceAttemptHTTP2: true,
			TLSClientConfig: &tls.Config{
				RootCAs:      serverCA.Pool(),
				ServerName:   "localhost",
				Certificates: []tls.Certificate{*clientCert(t, clientCA, "leaf-7")},
			},
		},
	}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Get("https://" + l.Addr().String() + "/")
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	body, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if resp.Proto != "HTTP/2.0" || body != "leaf-7" {
		t.Errorf("response: %s %q, want HTTP/2.0 %q", resp.Proto, body, "leaf-7")
	}
}
