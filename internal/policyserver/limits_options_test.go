package policyserver

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestLimitOptions covers the flags of the request limits and of TLS.
func TestLimitOptions(t *testing.T) {
	tests := []optionCase{
		{name: "defaults", check: func(t *testing.T, o Options) {
			if o.inFlightBodyBytes() != 64<<20 || o.RequestReadTimeout != 10*time.Second || o.TLSMinVersion != "1.2" || o.TLSCipherSuites != nil {
				t.Errorf("budget %d, %+v", o.inFlightBodyBytes(), o)
			}
		}},
		{name: "the budget follows the body limit", args: []string{"--max-request-body-bytes", "1000"}, check: func(t *testing.T, o Options) {
			if o.inFlightBodyBytes() != 4000 {
				t.Errorf("budget %d", o.inFlightBodyBytes())
			}
		}},
		{name: "the budget does not overflow", args: []string{"--max-request-body-bytes", "4611686018427387904"}, check: func(t *testing.T, o Options) {
			if o.inFlightBodyBytes() != math.MaxInt64 {
				t.Errorf("budget %d", o.inFlightBodyBytes())
			}
		}},
		{name: "variables", env: map[string]string{
			"WARDEN_MAX_IN_FLIGHT_REQUEST_BODY_BYTES": "100000000", "WARDEN_REQUEST_READ_TIMEOUT": "30s",
			"WARDEN_TLS_MIN_VERSION": "VersionTLS13", "WARDEN_TLS_CIPHER_SUITES": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
		}, check: func(t *testing.T, o Options) {
			if o.inFlightBodyBytes() != 100000000 || o.RequestReadTimeout != 30*time.Second || o.TLSMinVersion != "VersionTLS13" || len(o.TLSCipherSuites) != 2 {
				t.Errorf("%+v", o)
			}
		}},
		{name: "budget below one body", args: []string{"--max-in-flight-request-body-bytes", "1000"},
			wantErr: "--max-in-flight-request-body-bytes must be 0 or at least --max-request-body-bytes"},
		{name: "negative budget", args: []string{"--max-in-flight-request-body-bytes=-1"},
			wantErr: "--max-in-flight-request-body-bytes must be 0 or at least --max-request-body-bytes"},
		{name: "guest bounds: defaults", check: func(t *testing.T, o Options) {
			if o.MaxHostCallBytes != 1<<20 || o.MaxResponseBytes != 16<<20 {
				t.Errorf("host call %d, response %d", o.MaxHostCallBytes, o.MaxResponseBytes)
			}
		}},
		{name: "guest bounds: flags and variables", args: []string{"--max-host-call-payload-bytes", "4096"},
			env: map[string]string{"WARDEN_MAX_POLICY_RESPONSE_BYTES": "65536"}, check: func(t *testing.T, o Options) {
				if o.MaxHostCallBytes != 4096 || o.MaxResponseBytes != 65536 {
					t.Errorf("host call %d, response %d", o.MaxHostCallBytes, o.MaxResponseBytes)
				}
			}},
		{name: "fetch timeouts: defaults and flags", args: []string{"--fetch-idle-timeout", "5s"}, check: func(t *testing.T, o Options) {
			if o.FetchConnectTimeout != 10*time.Second || o.FetchIdleTimeout != 5*time.Second || o.FetchTimeout != 5*time.Minute {
				t.Errorf("connect %s, idle %s, fetch %s", o.FetchConnectTimeout, o.FetchIdleTimeout, o.FetchTimeout)
			}
		}},
		{name: "no fetch timeout", args: []string{"--fetch-timeout", "0s"}, wantErr: "--fetch-connect-timeout, --fetch-idle-timeout and --fetch-timeout must be positive"},
		{name: "no host call payload", args: []string{"--max-host-call-payload-bytes", "0"}, wantErr: "--max-host-call-payload-bytes must be positive"},
		{name: "no response", args: []string{"--max-policy-response-bytes", "0"}, wantErr: "--max-policy-response-bytes must be positive"},
		{name: "no read timeout", args: []string{"--request-read-timeout", "0s"}, wantErr: "--request-read-timeout must be positive"},
		{name: "unknown cipher suite", args: []string{"--tls-cipher-suites", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,ECDHE-ECDSA-AES128-SHA"},
			wantErr: `--tls-cipher-suites: unknown or insecure TLS 1.2 cipher suite "ECDHE-ECDSA-AES128-SHA" (accepted: TLS_`},
		{name: "TLS 1.1", args: []string{"--tls-min-version", "1.1"}, wantErr: `--tls-min-version: unknown or insecure TLS version "1.1" (accepted: 1.2, 1.3, VersionTLS12, VersionTLS13)`},
	}
	runOptionCases(t, tests)
}

// The command reports an unknown cipher suite before anything starts.
func TestMainRefusesUnknownCipherSuite(t *testing.T) {
	var stdout, stderr strings.Builder
	code := Main(t.Context(), []string{"--tls-cipher-suites", "TLS_RSA_WITH_RC4_128_SHA"}, &stdout, &stderr, func(string) string { return "" })
	if code != 2 || !strings.Contains(stderr.String(), `Error: --tls-cipher-suites: unknown or insecure TLS 1.2 cipher suite "TLS_RSA_WITH_RC4_128_SHA" (accepted: `) ||
		!strings.Contains(stderr.String(), "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

// TestBodyBudget checks the budget's accounting: a waiter gets its bytes
// once they are released, in order of arrival, and one that cannot get them
// in time holds nothing.
func TestBodyBudget(t *testing.T) {
	b := newBodyBudget(10)
	if !b.acquire(t.Context(), 6, 0) || !b.acquire(t.Context(), 4, 0) {
		t.Fatal("the budget refused what it has")
	}
	if b.acquire(t.Context(), 1, time.Millisecond) {
		t.Fatal("the budget gave more than it has")
	}
	if b.acquire(t.Context(), 11, time.Hour) {
		t.Fatal("the budget gave more than its size")
	}
	done := make(chan bool, 2)
	go func() { done <- b.acquire(t.Context(), 5, time.Hour) }()
	for b.queued() == 0 {
		time.Sleep(time.Millisecond)
	}
	go func() { done <- b.acquire(t.Context(), 1, time.Hour) }()
	for b.queued() < 2 {
		time.Sleep(time.Millisecond)
	}
	b.release(4) // enough for the second waiter, not the first: it waits its turn
	if n := b.queued(); n != 2 {
		t.Fatalf("%d waiting after a release that fits only the second, want 2", n)
	}
	b.release(6)
	if first, second := <-done, <-done; !first || !second {
		t.Fatal("a waiter was refused")
	}
	if b.held != 6 {
		t.Errorf("held %d, want 6", b.held)
	}
	b.release(6)
	if b.held != 0 || b.queued() != 0 {
		t.Errorf("held %d with %d waiting, want 0 and 0", b.held, b.queued())
	}
}

// queued returns the number of waiters.
func (b *bodyBudget) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiters.Len()
}
