package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const allowedBody = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true}}`

// countingServer is a TLS test server that counts the requests it answers.
type countingServer struct {
	*httptest.Server
	requests atomic.Int64
	caFile   string
}

// newServer starts a TLS server answering with h, and writes its certificate
// to a file for -cacert.
func newServer(t *testing.T, h http.HandlerFunc) *countingServer {
	t.Helper()
	s := &countingServer{}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	s.caFile = filepath.Join(t.TempDir(), "ca.pem")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	if err := os.WriteFile(s.caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// answer returns a handler that reads the body and answers status and body.
func answer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in bytes.Buffer
		if _, err := in.ReadFrom(r.Body); err != nil || r.Method != http.MethodPost {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

// runJSON runs the tool with -json and returns its exit status and decoded
// result.
func runJSON(t *testing.T, args ...string) (int, Result) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	code := run(ctx, append([]string{"loadtest", "-json"}, args...), &stdout, &stderr)
	out := strings.TrimSpace(stdout.String())
	var res Result
	if err := json.Unmarshal([]byte(out[strings.LastIndexByte(out, '\n')+1:]), &res); err != nil {
		t.Fatalf("exit %d, no JSON result (%v); stdout:\n%s\nstderr:\n%s", code, err, stdout.String(), stderr.String())
	}
	t.Logf("exit %d; stdout:\n%s", code, stdout.String())
	return code, res
}

func writeBody(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(f, []byte(`{"request":{"uid":"u"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestClosedLoopMaxRequests(t *testing.T) {
	tests := []struct {
		name        string
		concurrency string
		max         int64
	}{
		{name: "one worker", concurrency: "1", max: 25},
		{name: "eight workers", concurrency: "8", max: 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, answer(http.StatusOK, allowedBody))
			code, res := runJSON(t, "-url", srv.URL+"/validate/x", "-body", writeBody(t), "-cacert", srv.caFile,
				"-c", tt.concurrency, "-d", "1m", "-warmup", "0", "-max-requests", itoa(tt.max),
				"-expect-body-contains", `"allowed":true`)
			if code != 0 {
				t.Errorf("exit = %d, want 0", code)
			}
			if res.Requests != uint64(tt.max) || res.OK != uint64(tt.max) {
				t.Errorf("requests, ok = %d, %d, want %d", res.Requests, res.OK, tt.max)
			}
			if got := srv.requests.Load(); got != tt.max {
				t.Errorf("server answered %d requests, want %d", got, tt.max)
			}
			if res.Errors.Total() != 0 {
				t.Errorf("errors = %+v, want none", res.Errors)
			}
			if res.Latency.Max <= 0 {
				t.Errorf("latency max = %v, want > 0", res.Latency.Max)
			}
			if !strings.HasPrefix(res.Protocol, "HTTP/1.1 over TLS") {
				t.Errorf("protocol = %q, want HTTP/1.1 over TLS", res.Protocol)
			}
			if res.Connections < 1 || res.Connections > int64(res.Concurrency) {
				t.Errorf("connections = %d, want 1..%d (keep-alive)", res.Connections, res.Concurrency)
			}
		})
	}
}

func TestClosedLoopWarmupIsNotCounted(t *testing.T) {
	srv := newServer(t, answer(http.StatusOK, allowedBody))
	code, res := runJSON(t, "-url", srv.URL+"/validate/x", "-insecure", "-c", "2", "-d", "200ms", "-warmup", "200ms")
	if code != 0 {
		t.Errorf("exit = %d, want 0", code)
	}
	if res.Requests == 0 || res.WarmupRequests == 0 {
		t.Errorf("requests, warmup requests = %d, %d, want both > 0", res.Requests, res.WarmupRequests)
	}
	if got, want := srv.requests.Load(), int64(res.Requests+res.WarmupRequests); got != want {
		t.Errorf("server answered %d requests, the tool counted %d", got, want)
	}
}

func TestErrorsAreCounted(t *testing.T) {
	hangUp := func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		args       []string
		wantErrors ErrorCounts // per measured request: 1 or 0
	}{
		{
			name:       "status 500",
			handler:    answer(http.StatusInternalServerError, allowedBody),
			wantErrors: ErrorCounts{Status: 1},
		},
		{
			name:       "other expected status",
			handler:    answer(http.StatusAccepted, allowedBody),
			args:       []string{"-expect-status", "202"},
			wantErrors: ErrorCounts{},
		},
		{
			name:       "redirect is a status error",
			handler:    func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/elsewhere", http.StatusFound) },
			wantErrors: ErrorCounts{Status: 1},
		},
		{
			name:       "body mismatch",
			handler:    answer(http.StatusOK, strings.Replace(allowedBody, "true", "false", 1)),
			args:       []string{"-expect-body-contains", `"allowed":true`},
			wantErrors: ErrorCounts{Body: 1},
		},
		{
			name:       "wrong status and body counts as status",
			handler:    answer(http.StatusBadRequest, "nope"),
			args:       []string{"-expect-body-contains", `"allowed":true`},
			wantErrors: ErrorCounts{Status: 1},
		},
		{
			name:       "connection closed",
			handler:    hangUp,
			wantErrors: ErrorCounts{Transport: 1},
		},
	}
	const n = 40
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, tt.handler)
			args := append([]string{"-url", srv.URL + "/validate/x", "-cacert", srv.caFile,
				"-c", "4", "-d", "1m", "-warmup", "0", "-max-requests", itoa(n)}, tt.args...)
			code, res := runJSON(t, args...)
			want := ErrorCounts{Transport: tt.wantErrors.Transport * n, Status: tt.wantErrors.Status * n, Body: tt.wantErrors.Body * n}
			if res.Errors != want {
				t.Errorf("errors = %+v, want %+v", res.Errors, want)
			}
			if res.Requests != n || res.OK != n-want.Total() {
				t.Errorf("requests, ok = %d, %d, want %d, %d", res.Requests, res.OK, n, n-want.Total())
			}
			wantCode := 0
			if want.Total() > 0 {
				wantCode = 1
				if len(res.FirstErrors) == 0 {
					t.Error("no first error reported")
				}
			}
			if code != wantCode {
				t.Errorf("exit = %d, want %d", code, wantCode)
			}
		})
	}
}

func TestOpenLoop(t *testing.T) {
	tests := []struct {
		name                    string
		args                    []string
		minScheduled, maxSched  int64
		wantWarmup              bool
		finishesWithinTheMinute bool
	}{
		{name: "200/s for 1s", args: []string{"-rate", "200", "-d", "1s", "-warmup", "0"}, minScheduled: 190, maxSched: 210},
		{name: "with warm-up", args: []string{"-rate", "100", "-d", "500ms", "-warmup", "300ms"}, minScheduled: 45, maxSched: 55, wantWarmup: true},
		{name: "max requests", args: []string{"-rate", "500", "-d", "1m", "-warmup", "0", "-max-requests", "60"}, minScheduled: 60, maxSched: 60},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, answer(http.StatusOK, allowedBody))
			args := append([]string{"-url", srv.URL + "/validate/x", "-body", writeBody(t), "-cacert", srv.caFile}, tt.args...)
			code, res := runJSON(t, args...)
			if code != 0 {
				t.Errorf("exit = %d, want 0", code)
			}
			o := res.Open
			if o == nil {
				t.Fatal("no open-loop result")
			}
			if o.Scheduled < tt.minScheduled || o.Scheduled > tt.maxSched {
				t.Errorf("scheduled = %d, want %d..%d", o.Scheduled, tt.minScheduled, tt.maxSched)
			}
			// Generous: a loaded test machine may fall behind, but not by half.
			if o.Sent < uint64(o.Scheduled)/2 || o.Sent > uint64(o.Scheduled) {
				t.Errorf("sent = %d, want %d..%d", o.Sent, o.Scheduled/2, o.Scheduled)
			}
			if o.NotSent != o.Scheduled-int64(o.Sent) {
				t.Errorf("not sent = %d, want scheduled - sent = %d", o.NotSent, o.Scheduled-int64(o.Sent))
			}
			if res.Requests != o.Sent || res.OK != o.Sent {
				t.Errorf("requests, ok = %d, %d, want sent = %d", res.Requests, res.OK, o.Sent)
			}
			if tt.wantWarmup != (res.WarmupRequests > 0) {
				t.Errorf("warm-up requests = %d, want some: %v", res.WarmupRequests, tt.wantWarmup)
			}
			if got, want := srv.requests.Load(), int64(res.Requests+res.WarmupRequests); got != want {
				t.Errorf("server answered %d requests, the tool counted %d", got, want)
			}
			if o.MaxInFlight < 1 || o.MaxInFlight > int64(res.Concurrency) {
				t.Errorf("max in flight = %d, want 1..%d", o.MaxInFlight, res.Concurrency)
			}
			if res.Concurrency != defaultRateConcurrency || res.Connections > int64(res.Concurrency) {
				t.Errorf("concurrency, connections = %d, %d, want %d, at most that", res.Concurrency, res.Connections, defaultRateConcurrency)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{name: "no url", args: nil, wantStderr: "-url is required"},
		{name: "unknown flag", args: []string{"-url", "https://127.0.0.1:1/", "-nope"}, wantStderr: "flag provided but not defined"},
		{name: "stray argument", args: []string{"-url", "https://127.0.0.1:1/", "extra"}, wantStderr: "unexpected arguments"},
		{name: "missing body", args: []string{"-url", "https://127.0.0.1:1/", "-body", missing}, wantStderr: "reading -body"},
		{name: "cacert not PEM", args: []string{"-url", "https://127.0.0.1:1/", "-cacert", notPEM}, wantStderr: "no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), append([]string{"loadtest"}, tt.args...), &stdout, &stderr)
			if code != 2 {
				t.Errorf("exit = %d, want 2", code)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tt.wantStderr)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	valid := func(edit func(*Options)) Options {
		o := Options{URL: "https://127.0.0.1:3000/validate/x", Duration: time.Second, Timeout: time.Second, ExpectStatus: 200}
		if edit != nil {
			edit(&o)
		}
		return o
	}
	tests := []struct {
		name            string
		opts            Options
		wantErr         string
		wantConcurrency int
	}{
		{name: "closed-loop default", opts: valid(nil), wantConcurrency: defaultConcurrency},
		{name: "open-loop default", opts: valid(func(o *Options) { o.Rate = 1000 }), wantConcurrency: defaultRateConcurrency},
		{name: "explicit c", opts: valid(func(o *Options) { o.Rate = 1000; o.Concurrency = 8 }), wantConcurrency: 8},
		{name: "no url", opts: valid(func(o *Options) { o.URL = "" }), wantErr: "-url is required"},
		{name: "bad scheme", opts: valid(func(o *Options) { o.URL = "ftp://x/" }), wantErr: "want http:// or https://"},
		{name: "negative c", opts: valid(func(o *Options) { o.Concurrency = -1 }), wantErr: "-c -1"},
		{name: "zero duration", opts: valid(func(o *Options) { o.Duration = 0 }), wantErr: "-d 0s"},
		{name: "negative rate", opts: valid(func(o *Options) { o.Rate = -1 }), wantErr: "-rate"},
		{name: "cacert and insecure", opts: valid(func(o *Options) { o.CACertFile = "ca.pem"; o.Insecure = true }), wantErr: "exclude each other"},
		{name: "bad status", opts: valid(func(o *Options) { o.ExpectStatus = 42 }), wantErr: "-expect-status 42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
			if tt.wantErr == "" && tt.opts.Concurrency != tt.wantConcurrency {
				t.Errorf("Concurrency = %d, want %d", tt.opts.Concurrency, tt.wantConcurrency)
			}
		})
	}
}

func TestScheduleFirstAtOrAfter(t *testing.T) {
	tests := []struct {
		name string
		rate float64
		d    time.Duration
		want int64
	}{
		{name: "zero", rate: 1000, d: 0, want: 0},
		{name: "exact boundary", rate: 1000, d: time.Second, want: 1000},
		{name: "just after", rate: 1000, d: time.Second + 1, want: 1001},
		{name: "non-integer interval", rate: 3, d: time.Second, want: 3},
		{name: "inexact interval", rate: 7, d: 2 * time.Second, want: 14},
		{name: "slow rate", rate: 0.5, d: 3 * time.Second, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := schedule{interval: float64(time.Second) / tt.rate}
			got := s.firstAtOrAfter(tt.d)
			if got != tt.want {
				t.Errorf("firstAtOrAfter(%v) = %d, want %d", tt.d, got, tt.want)
			}
			if s.offset(got) < tt.d || (got > 0 && s.offset(got-1) >= tt.d) {
				t.Errorf("firstAtOrAfter(%v) = %d: offsets %v, %v", tt.d, got, s.offset(got-1), s.offset(got))
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestInterruptStopsTheRun(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{name: "closed loop", args: []string{"-c", "4"}},
		{name: "open loop", args: []string{"-rate", "500"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, answer(http.StatusOK, allowedBody))
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			var stdout, stderr bytes.Buffer
			args := append([]string{"loadtest", "-json", "-url", srv.URL + "/validate/x", "-cacert", srv.caFile, "-d", "1h", "-warmup", "0"}, tt.args...)
			began := time.Now()
			code := run(ctx, args, &stdout, &stderr)
			if took := time.Since(began); took > 30*time.Second {
				t.Errorf("run took %v after the interrupt", took)
			}
			if code != 0 {
				t.Errorf("exit = %d, want 0; stdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
			}
			out := strings.TrimSpace(stdout.String())
			var res Result
			if err := json.Unmarshal([]byte(out[strings.LastIndexByte(out, '\n')+1:]), &res); err != nil {
				t.Fatal(err)
			}
			if !res.Interrupted || res.Requests == 0 || res.Errors.Total() != 0 {
				t.Errorf("interrupted, requests, errors = %v, %d, %+v, want true, > 0, none", res.Interrupted, res.Requests, res.Errors)
			}
			// Only what was due before the interruption counts as scheduled.
			if o := res.Open; o != nil && (o.Scheduled > 5000 || o.NotSent < 0 || o.NotSent > o.Scheduled) {
				t.Errorf("scheduled, not sent = %d, %d, want about 150 (not 1.8 million), at most that", o.Scheduled, o.NotSent)
			}
		})
	}
}
