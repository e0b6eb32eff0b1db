package certwatch

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
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
	"github.com/wardenhq/warden/internal/testkit"
)

// --- fixtures ---------------------------------------------------------------

// testCA is a certificate authority made up for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// issue returns a certificate and key in PEM, for a server on localhost or
// for a client.
func (ca *testCA) issue(t *testing.T, serial int64, client bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: fmt.Sprintf("leaf-%d", serial)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

func (ca *testCA) clientCert(t *testing.T, serial int64) *tls.Certificate {
	t.Helper()
	certPEM, keyPEM := ca.issue(t, serial, true)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &pair
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

func pool(cas ...*testCA) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca.cert)
	}
	return p
}

// servedSerial returns the serial the server presents now, failing the test
// if the connection fails.
func servedSerial(t *testing.T, addr string, roots *x509.CertPool, clientCert *tls.Certificate) int64 {
	t.Helper()
	serial, err := dial(addr, roots, clientCert)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	return serial.Int64()
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
	ca := newCA(t, "ca")
	cert1, key1 := ca.issue(t, 1, false)
	_, key2 := ca.issue(t, 2, false)
	dir := t.TempDir()
	files := map[string][]byte{
		"cert1": cert1, "key1": key1, "key2": key2, "ca": ca.pem,
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
	ca := newCA(t, "ca")
	roots := pool(ca)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	cert1, key1 := ca.issue(t, 1001, false)
	writeFile(t, certFile, cert1)
	writeFile(t, keyFile, key1)
	_, logs, addr := start(t, certFile, keyFile, nil, time.Hour) // events only

	if got := servedSerial(t, addr, roots, nil); got != 1001 {
		t.Fatalf("serial = %d, want 1001", got)
	}

	// Rewrite both files in place; the watcher may see the new certificate
	// with the old key in between, which must not be served.
	cert2, key2 := ca.issue(t, 1002, false)
	writeFile(t, certFile, cert2)
	writeFile(t, keyFile, key2)
	testkit.Eventually(t, 20*time.Second, "serial 1002", func() bool { return servedSerial(t, addr, roots, nil) == 1002 })
	testkit.Eventually(t, 20*time.Second, "reload logged", func() bool { return len(logLines(logs, msgCertReloaded)) > 0 })

	// A broken key: the previous pair keeps being served, and a warning says why.
	logs.Reset()
	writeFile(t, keyFile, []byte("-----BEGIN PRIVATE KEY-----\nbroken\n-----END PRIVATE KEY-----\n"))
	testkit.Eventually(t, 20*time.Second, "reload failure logged", func() bool { return len(logLines(logs, msgCertReloadFailed)) > 0 })
	if line := logLines(logs, msgCertReloadFailed)[0]; !strings.Contains(line, "level=WARN") || !strings.Contains(line, "error=") {
		t.Errorf("failure log = %q, want a warning with an error", line)
	}
	if got := servedSerial(t, addr, roots, nil); got != 1002 {
		t.Errorf("serial after broken key = %d, want 1002", got)
	}

	// The next good pair is picked up.
	cert3, key3 := ca.issue(t, 1003, false)
	writeFile(t, keyFile, key3)
	writeFile(t, certFile, cert3)
	testkit.Eventually(t, 20*time.Second, "serial 1003", func() bool { return servedSerial(t, addr, roots, nil) == 1003 })
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
	ca := newCA(t, "ca")
	roots := pool(ca)
	secret := &atomicWriter{dir: t.TempDir()}
	cert1, key1 := ca.issue(t, 2001, false)
	secret.write(t, map[string][]byte{"tls.crt": cert1, "tls.key": key1})
	certFile, keyFile := filepath.Join(secret.dir, "tls.crt"), filepath.Join(secret.dir, "tls.key")
	_, logs, addr := start(t, certFile, keyFile, nil, time.Hour) // events only

	if got := servedSerial(t, addr, roots, nil); got != 2001 {
		t.Fatalf("serial = %d, want 2001", got)
	}

	cert2, key2 := ca.issue(t, 2002, false)
	secret.write(t, map[string][]byte{"tls.crt": cert2, "tls.key": key2})
	testkit.Eventually(t, 20*time.Second, "serial 2002", func() bool { return servedSerial(t, addr, roots, nil) == 2002 })

	// A Secret whose key does not match its certificate.
	logs.Reset()
	cert3, _ := ca.issue(t, 2003, false)
	secret.write(t, map[string][]byte{"tls.crt": cert3, "tls.key": key1})
	testkit.Eventually(t, 20*time.Second, "reload failure logged", func() bool { return len(logLines(logs, msgCertReloadFailed)) > 0 })
	if got := servedSerial(t, addr, roots, nil); got != 2002 {
		t.Errorf("serial after mismatched pair = %d, want 2002", got)
	}

	cert4, key4 := ca.issue(t, 2004, false)
	secret.write(t, map[string][]byte{"tls.crt": cert4, "tls.key": key4})
	testkit.Eventually(t, 20*time.Second, "serial 2004", func() bool { return servedSerial(t, addr, roots, nil) == 2004 })
}

// TestResyncWithoutEvents changes the files where no watch sees it: the
// served files are symlinks into another directory.
func TestResyncWithoutEvents(t *testing.T) {
	ca := newCA(t, "ca")
	roots := pool(ca)
	watched, elsewhere := t.TempDir(), t.TempDir()
	cert1, key1 := ca.issue(t, 3001, false)
	writeFile(t, filepath.Join(elsewhere, "tls.crt"), cert1)
	writeFile(t, filepath.Join(elsewhere, "tls.key"), key1)
	for _, name := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join(elsewhere, name), filepath.Join(watched, name)); err != nil {
			t.Fatal(err)
		}
	}
	_, _, addr := start(t, filepath.Join(watched, "tls.crt"), filepath.Join(watched, "tls.key"), nil, 50*time.Millisecond)

	cert2, key2 := ca.issue(t, 3002, false)
	writeFile(t, filepath.Join(elsewhere, "tls.crt"), cert2)
	writeFile(t, filepath.Join(elsewhere, "tls.key"), key2)
	testkit.Eventually(t, 20*time.Second, "serial 3002", func() bool { return servedSerial(t, addr, roots, nil) == 3002 })
}

func TestMutualTLS(t *testing.T) {
	serverCA, clientCA, otherCA := newCA(t, "server-ca"), newCA(t, "client-ca"), newCA(t, "other-ca")
	roots := pool(serverCA)
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "client-ca.crt")
	cert, key := serverCA.issue(t, 4001, false)
	writeFile(t, certFile, cert)
	writeFile(t, keyFile, key)
	writeFile(t, caFile, clientCA.pem)
	_, logs, addr := start(t, certFile, keyFile, []string{caFile}, time.Hour)

	trusted, untrusted := clientCA.clientCert(t, 1), otherCA.clientCert(t, 2)
	if _, err := dial(addr, roots, nil); err == nil {
		t.Error("client without a certificate: accepted, want refused")
	}
	if _, err := dial(addr, roots, untrusted); err == nil {
		t.Error("client with a certificate of another CA: accepted, want refused")
	}
	if got := servedSerial(t, addr, roots, trusted); got != 4001 {
		t.Errorf("serial = %d, want 4001", got)
	}

	// The client CA is reloaded too.
	writeFile(t, caFile, otherCA.pem)
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
	serverCA, clientCA := newCA(t, "server-ca"), newCA(t, "client-ca")
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "client-ca.crt")
	cert, key := serverCA.issue(t, 5001, false)
	writeFile(t, certFile, cert)
	writeFile(t, keyFile, key)
	writeFile(t, caFile, clientCA.pem)
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
				RootCAs:      pool(serverCA),
				ServerName:   "localhost",
				Certificates: []tls.Certificate{*clientCA.clientCert(t, 7)},
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
