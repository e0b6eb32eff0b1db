package policyserver_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
)

// dialRaw opens a connection to the main listener (TLS) or to the readiness
// one, closed when the test ends.
func (ts *testServer) dialRaw(t *testing.T, main bool) net.Conn {
	t.Helper()
	var conn net.Conn
	var err error
	if main {
		cfg := ts.client.Transport.(*http.Transport).TLSClientConfig.Clone()
		conn, err = tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", ts.srv.Addr().String(), cfg)
	} else {
		conn, err = net.DialTimeout("tcp", ts.srv.ReadinessAddr().String(), 30*time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// readResponse reads an answer on conn, failing the test if none comes
// within a generous deadline; it returns its status, headers and body.
func readResponse(t *testing.T, conn net.Conn, br *bufio.Reader) (int, http.Header, []byte) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return resp.StatusCode, resp.Header, body
}

// TestRequestBodyBudget fills the budget of bodies in memory with two
// unfinished bodies, one of declared length and one chunked, and checks that
// another request is then refused with 429 until they are done.
func TestRequestBodyBudget(t *testing.T) {
	opts := testOptions(t, writePolicies(t, "labels: {module: {labels}}\n"))
	opts.MaxRequestBodySize = 1 << 20
	opts.MaxInFlightBodyBytes = 2 << 20
	opts.RequestReadTimeout = 10 * time.Minute // the bodies wait for the test, however slow
	ts := startServer(t, opts)
	review := admissiontest.New(admissiontest.WithUID("u")).JSON()

	// A body that declares 1 MiB holds 1 MiB from its first byte.
	declaredBody := append(append([]byte{}, review...), bytes.Repeat([]byte(" "), int(opts.MaxRequestBodySize)-len(review))...)
	declared := ts.dialRaw(t, true)
	fmt.Fprintf(declared, "POST /validate/labels HTTP/1.1\r\nHost: warden\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(declaredBody))
	if _, err := declared.Write(declaredBody[:1]); err != nil {
		t.Fatal(err)
	}
	// A chunked body holds what its buffer grows to: 1 MiB past 512 KiB.
	chunked := ts.dialRaw(t, true)
	padding := bytes.Repeat([]byte(" "), 600<<10)
	fmt.Fprintf(chunked, "POST /validate/labels HTTP/1.1\r\nHost: warden\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(padding), padding)

	post := func() (int, http.Header, []byte) {
		t.Helper()
		resp, err := ts.client.Post(ts.base+"/validate/labels", "application/json", bytes.NewReader(review))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, body
	}
	deadline := time.Now().Add(60 * time.Second)
	var status int
	var header http.Header
	var body []byte
	for status, header, body = post(); status != http.StatusTooManyRequests; status, header, body = post() {
		if status != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("with the budget held: %d %s, want 429", status, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var e struct {
		Message string `json:"message"`
		Status  int    `json:"status"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Status != 429 ||
		!strings.Contains(e.Message, "the server is at its request-memory budget") || header.Get("Retry-After") == "" {
		t.Errorf("refusal: %s (Retry-After %q), want a JSON message naming the budget and a Retry-After", body, header.Get("Retry-After"))
	}
	resp, err := http.Get(ts.ready + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `warden_policy_server_refused_requests_total{reason="memory_budget"} `; !strings.Contains(string(metrics), want) {
		t.Errorf("the metrics do not count the refusal (%s...):\n%s", want, metrics)
	}

	// The held bodies finish and are answered; the budget is free again.
	if _, err := declared.Write(declaredBody[1:]); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(chunked, "%x\r\n%s\r\n0\r\n\r\n", len(review), review)
	for name, conn := range map[string]net.Conn{"declared": declared, "chunked": chunked} {
		if status, _, body := readResponse(t, conn, bufio.NewReader(conn)); status != http.StatusOK || !bytes.Contains(body, []byte(`"allowed":true`)) {
			t.Errorf("%s body: %d %s", name, status, body)
		}
	}
	for status, _, body = post(); status != http.StatusOK; status, _, body = post() {
		if status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("after the held bodies are done: %d %s", status, body)
		}
	}
}

// TestSlowRequestBodies trickles request bodies, a byte every 200 ms, at
// each listener: the server must answer and close the connection once
// --request-read-timeout has passed, and it must not cut evaluations or
// keep-alive connections that outlive it.
func TestSlowRequestBodies(t *testing.T) {
	opts := testOptions(t, writePolicies(t, "labels: {module: {labels}}\nloop: {module: {loop}, timeoutEvalSeconds: 2}\n"))
	opts.RequestReadTimeout = time.Second
	ts := startServer(t, opts)

	tests := []struct {
		name       string
		main       bool
		head       string
		wantStatus int
	}{
		{"webhook", true, "POST /validate/labels HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n", http.StatusRequestTimeout},
		{"webhook, chunked", true, "POST /validate/labels HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n", http.StatusRequestTimeout},
		{"route that reads no body", true, "POST /nope HTTP/1.1\r\nContent-Length: 100000\r\n", http.StatusNotFound},
		{"readiness", false, "GET /readiness HTTP/1.1\r\nContent-Length: 100000\r\n", http.StatusRequestEntityTooLarge},
		{"metrics", false, "GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n", http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := ts.dialRaw(t, tt.main)
			if _, err := fmt.Fprintf(conn, "%sHost: warden\r\n\r\n", tt.head); err != nil {
				t.Fatal(err)
			}
			chunked := strings.Contains(tt.head, "chunked")
			go func() { // until the server closes the connection, or the test ends
				for {
					b := []byte(" ")
					if chunked {
						b = []byte("1\r\n \r\n")
					}
					if _, err := conn.Write(b); err != nil {
						return
					}
					time.Sleep(200 * time.Millisecond)
				}
			}()
			br := bufio.NewReader(conn)
			status, _, body := readResponse(t, conn, br)
			if status != tt.wantStatus {
				t.Errorf("answer %d %s, want %d", status, body, tt.wantStatus)
			}
			if tt.wantStatus == http.StatusRequestTimeout && !bytes.Contains(body, []byte("--request-read-timeout")) {
				t.Errorf("answer %s, want it to name --request-read-timeout", body)
			}
			// Then the server closes the connection.
			_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
			rest, err := io.ReadAll(br)
			if err != nil && !errors.Is(err, syscall.ECONNRESET) { // EOF, or a reset of the unread bytes
				t.Errorf("the connection stays open: %v (read %q)", err, rest)
			}
		})
	}

	t.Run("an evaluation and an idle keep-alive connection outlive the bound", func(t *testing.T) {
		tr := ts.client.Transport.(*http.Transport).Clone()
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr, Timeout: 60 * time.Second}
		reused := false
		post := func(path string) []byte {
			t.Helper()
			trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
			req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodPost, ts.base+path, bytes.NewReader(admissiontest.New(admissiontest.WithUID("u")).JSON()))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
			}
			return body
		}
		// The loop runs to its 2 s timeout, past the read deadline.
		if body := post("/validate/loop"); !bytes.Contains(body, []byte("exceeded the allowed execution time")) {
			t.Errorf("loop: %s", body)
		}
		time.Sleep(opts.RequestReadTimeout + 500*time.Millisecond) // idle past the bound
		post("/validate/labels")
		if !reused {
			t.Error("the keep-alive connection was closed while idle")
		}
	})
}

// TestTLSSettings checks the suites and versions a client may negotiate,
// by default and with --tls-cipher-suites and --tls-min-version.
func TestTLSSettings(t *testing.T) {
	cbc := []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA}
	gcm := []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}
	type client struct {
		max     uint16
		suites  []uint16
		wantErr bool
	}
	tests := []struct {
		name       string
		minVersion string
		suites     []string
		clients    []client
	}{
		{name: "defaults", clients: []client{
			{tls.VersionTLS12, cbc, true},
			{tls.VersionTLS12, gcm, false},
			{tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}, false},
			{tls.VersionTLS13, nil, false},
		}},
		{name: "--tls-cipher-suites with a CBC suite", suites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA"}, clients: []client{
			{tls.VersionTLS12, cbc, false},
			{tls.VersionTLS12, gcm, true},
		}},
		{name: "--tls-min-version 1.3", minVersion: "1.3", clients: []client{
			{tls.VersionTLS12, gcm, true},
			{tls.VersionTLS13, nil, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := testOptions(t, writePolicies(t, "labels: {module: {labels}}\n"))
			if tt.minVersion != "" {
				opts.TLSMinVersion = tt.minVersion
			}
			opts.TLSCipherSuites = tt.suites
			ts := startServer(t, opts)
			for _, c := range tt.clients {
				cfg := ts.client.Transport.(*http.Transport).TLSClientConfig.Clone()
				cfg.MaxVersion, cfg.CipherSuites = c.max, c.suites
				conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", ts.srv.Addr().String(), cfg)
				if err == nil {
					conn.Close()
				}
				if (err != nil) != c.wantErr {
					var names []string
					for _, id := range c.suites {
						names = append(names, tls.CipherSuiteName(id))
					}
					t.Errorf("%s client offering %v: error %v, want error: %v", tls.VersionName(c.max), names, err, c.wantErr)
				}
			}
		})
	}
}

// TestTLSSettingsStartupErrors checks that New refuses the TLS settings
// Validate does, for callers that skip it.
func TestTLSSettingsStartupErrors(t *testing.T) {
	opts := testOptions(t, writePolicies(t, "labels: {module: {labels}}\n"))
	opts.CertFile, opts.KeyFile = "unused.crt", "unused.key"
	opts.TLSCipherSuites = []string{"ECDHE-ECDSA-AES128-SHA"}
	err := startFailure(t, opts)
	if !strings.Contains(err.Error(), `--tls-cipher-suites: unknown or insecure TLS 1.2 cipher suite "ECDHE-ECDSA-AES128-SHA" (accepted: `) {
		t.Errorf("error = %v", err)
	}
}
