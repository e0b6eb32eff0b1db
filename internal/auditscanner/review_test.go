package auditscanner

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/wardenhq/warden/internal/pkitest"
)

func TestReviewBody(t *testing.T) {
	obj := pod("team-a", "web")
	obj.SetLabels(map[string]string{"app": "web"})
	b, err := reviewBody(obj)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	req, _ := doc["request"].(map[string]any)
	if req == nil || doc["apiVersion"] != nil || doc["response"] != nil {
		t.Fatalf("review %s", b)
	}
	gvk := map[string]any{"group": "", "version": "v1", "kind": "Pod"}
	want := map[string]any{
		"uid":         "uid-web",
		"kind":        gvk,
		"resource":    map[string]any{"group": "", "version": "v1", "resource": "Pod"},
		"requestKind": gvk,
		"name":        "web",
		"namespace":   "team-a",
		"operation":   "CREATE",
		"object":      obj.Object,
	}
	for k, v := range want {
		got := req[k]
		if k == "object" {
			var o map[string]any
			raw, _ := json.Marshal(got)
			_ = json.Unmarshal(raw, &o)
			got = o
		}
		if !reflect.DeepEqual(got, v) {
			t.Errorf("request.%s = %v, want %v", k, got, v)
		}
	}
}

// policyServer is an HTTPS test server requiring a client certificate of
// ca, answering with handler.
func policyServer(t *testing.T, ca *pkitest.CA, handler http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(handler)
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{ca.Server(t).TLSCertificate(t)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
		MinVersion:   tls.VersionTLS12,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func answer(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func TestAudit(t *testing.T) {
	ca := pkitest.NewCA(t, "warden-ca")
	dir := t.TempDir()
	caFile := ca.WriteCA(t, dir)
	certFile, keyFile := ca.Client(t, "audit-scanner").WriteFiles(t, dir, "client-")
	otherCA := pkitest.NewCA(t, "other-ca")
	otherCAFile := otherCA.WriteCA(t, t.TempDir())
	mtls := Options{ExtraCA: caFile, ClientCert: certFile, ClientKey: keyFile}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downURL := "https://" + closed.Addr().String() + "/audit/p"
	closed.Close()

	tests := []struct {
		name    string
		opts    Options
		handler http.HandlerFunc
		url     string // instead of the test server's
		want    verdict
		// wantMessage is a part of the message, when not exactly want's.
		wantMessage string
	}{
		{name: "allowed", opts: mtls, handler: answer(200, `{"response":{"uid":"u","allowed":true}}`),
			want: verdict{allowed: true}},
		{name: "rejected", opts: mtls, handler: answer(200, `{"response":{"uid":"u","allowed":false,"status":{"message":"label x is denied","code":400}}}`),
			want: verdict{message: "label x is denied"}},
		{name: "evaluation error", opts: mtls, handler: answer(200, `{"response":{"uid":"u","allowed":false,"status":{"message":"Policy execution interrupted","code":500}}}`),
			want: verdict{message: "Policy execution interrupted", errored: true}},
		{name: "HTTP 500", opts: mtls, handler: answer(500, `{"message":"Something went wrong","status":500}`),
			want:        verdict{errored: true, unavailable: true},
			wantMessage: `policy server answered 500 Internal Server Error: {"message":"Something went wrong","status":500}`},
		{name: "unknown policy", opts: mtls, handler: answer(404, `{"message":"policy not found","status":404}`),
			want: verdict{errored: true, unavailable: true}, wantMessage: "policy server answered 404 Not Found"},
		{name: "not a review", opts: mtls, handler: answer(200, `hello`),
			want: verdict{errored: true, unavailable: true}, wantMessage: "decoding the policy server's answer"},
		{name: "no response", opts: mtls, handler: answer(200, `{}`),
			want: verdict{errored: true, unavailable: true}, wantMessage: "the policy server's answer has no response"},
		{name: "down", opts: mtls, url: downURL,
			want: verdict{errored: true, unavailable: true}, wantMessage: "policy server unreachable: Post \"" + downURL + "\""},
		{name: "no client certificate", opts: Options{ExtraCA: caFile}, handler: answer(200, `{"response":{"allowed":true}}`),
			want: verdict{errored: true, unavailable: true}, wantMessage: "policy server unreachable"},
		{name: "server of another CA", opts: Options{ExtraCA: otherCAFile, ClientCert: certFile, ClientKey: keyFile}, handler: answer(200, `{"response":{"allowed":true}}`),
			want: verdict{errored: true, unavailable: true}, wantMessage: "certificate signed by unknown authority"},
		{name: "insecure", opts: Options{InsecureSSL: true, ClientCert: certFile, ClientKey: keyFile}, handler: answer(200, `{"response":{"allowed":true}}`),
			want: verdict{allowed: true}},
	}
	body, err := reviewBody(pod("team-a", "web"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := tt.url
			if url == "" {
				url = policyServer(t, ca, tt.handler).URL + "/audit/clusterwide-p"
			}
			rv, err := newReviewer(&tt.opts, 4)
			if err != nil {
				t.Fatal(err)
			}
			defer rv.close()
			got := rv.audit(t.Context(), url, body)
			if tt.wantMessage != "" {
				if !strings.Contains(got.message, tt.wantMessage) {
					t.Errorf("message %q, want it to contain %q", got.message, tt.wantMessage)
				}
				got.message = ""
			}
			if got != tt.want {
				t.Errorf("verdict %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestNewReviewerErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{name: "missing CA", opts: Options{ExtraCA: dir + "/missing.pem"}, want: "reading --extra-ca"},
		{name: "missing client certificate", opts: Options{ClientCert: dir + "/c.pem", ClientKey: dir + "/k.pem"}, want: "loading --client-cert and --client-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := newReviewer(&tt.opts, 1); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// TestAuditUnresolvableName checks that a policy server whose name does not
// resolve (a Service name in a cluster without DNS) is reported as such,
// at once, and that the name is looked up once per run, not once per
// object: each object used to wait requestTimeout for "context deadline
// exceeded". The names are under .invalid (RFC 6761) and looked up on
// 127.0.0.1 only.
func TestAuditUnresolvableName(t *testing.T) {
	body, err := reviewBody(pod("team-a", "web"))
	if err != nil {
		t.Fatal(err)
	}
	nx := nxdomainServer(t)
	tests := []struct {
		name string
		dial func(ctx context.Context) (net.Conn, error)
		want string
	}{
		{name: "no such host", dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", nx)
		}, want: "no such host"},
		// Every query times out at once, as it would after the
		// resolver's timeout when no name server answers.
		{name: "no name server answers", dial: func(context.Context) (net.Conn, error) {
			return nil, context.DeadlineExceeded
		}, want: "i/o timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rv, err := newReviewer(&Options{}, 4)
			if err != nil {
				t.Fatal(err)
			}
			defer rv.close()
			var queries atomic.Int32
			rv.resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
				queries.Add(1)
				return tt.dial(ctx)
			}}
			const host = "policy-server-default.kubewarden.svc.invalid"
			url := "https://" + host + ":443/audit/clusterwide-p"
			got := rv.audit(t.Context(), url, body)
			wantMessage := "policy server unreachable: lookup " + host
			if !got.errored || !got.unavailable || !strings.HasPrefix(got.message, wantMessage) || !strings.HasSuffix(got.message, ": "+tt.want) {
				t.Errorf("verdict %+v, want unavailable with %q...%q", got, wantMessage, tt.want)
			}
			t.Logf("%s", got.message)
			asked := queries.Load()
			for range 3 {
				if again := rv.audit(t.Context(), url, body); again != got {
					t.Errorf("next object: verdict %+v, want %+v", again, got)
				}
			}
			if n := queries.Load(); n != asked {
				t.Errorf("%d DNS queries for four objects, %d for the first: the name was looked up again", n, asked)
			}
		})
	}
}

// nxdomainServer answers every DNS query sent to the address it returns,
// on 127.0.0.1, with "no such name", until the test ends.
func nxdomainServer(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return // closed at cleanup
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, RecursionDesired: h.RecursionDesired,
				RecursionAvailable: true, RCode: dnsmessage.RCodeNameError})
			if b.StartQuestions() != nil || b.Question(q) != nil {
				continue
			}
			if answer, err := b.Finish(); err == nil {
				_, _ = pc.WriteTo(answer, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}
