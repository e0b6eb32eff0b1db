package policyserver_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/hostcap"
	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/testkit"
)

// TestNoEvaluationForClientsThatHangUp replays a row of issue 31 over the
// server's real TLS listener: clients pipeline requests on their
// connections and close them at once. net/http does not cancel the request
// it is serving on such a connection (it stops watching a connection with
// more input), so it took the server's own look at the connection for
// their evaluations not to run.
//
// The policy makes a host call to a registry that holds it until told:
// two requests of a client that stays take the policy's two turns, and
// every request of the clients that hang up waits for one. Once they have
// gone the registry answers; the policy must then have been evaluated for
// the client that stayed and one new client, and its registry asked by
// them only.
func TestNoEvaluationForClientsThatHangUp(t *testing.T) {
	var hits atomic.Int32
	arrived, release := make(chan struct{}, 100), make(chan struct{})
	registry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		arrived <- struct{}{}
		<-release
		http.NotFound(w, r)
	}))
	t.Cleanup(registry.Close)
	letGo := sync.OnceFunc(func() { close(release) })
	t.Cleanup(letGo)
	host := strings.TrimPrefix(registry.URL, "http://")
	sources := filepath.Join(t.TempDir(), "sources.yml")
	if err := os.WriteFile(sources, []byte("insecure_sources: ["+host+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := testOptions(t, writePolicies(t, fmt.Sprintf(`
held:
  module: "{hostile}"
  timeoutEvalSeconds: 600
  hostCapabilities: ["oci/*"]
  settings: {host_call: {namespace: oci, operation: v1/manifest_digest, payload: "%s/policy:v1"}}
`, host)))
	registryClient, err := policyfetch.New(policyfetch.Options{StoreDir: t.TempDir(), Sources: mustSources(t, sources)})
	if err != nil {
		t.Fatal(err)
	}
	opts.HostCapabilities = hostcap.NewHost(hostcap.NewDirect(hostcap.Options{Registry: registryClient}))
	opts.Workers = 2 // the policy's turns
	ts := startServer(t, opts)
	review := admissiontest.New().JSON()
	dial := func() *tls.Conn {
		// TLS 1.2: no session ticket arrives after the handshake, so a
		// client that closes leaves nothing unread and sends a FIN, not
		// a RST that would drop its requests at the server.
		c, err := tls.Dial("tcp", ts.srv.Addr().String(), &tls.Config{
			RootCAs: ts.client.Transport.(*http.Transport).TLSClientConfig.RootCAs, MaxVersion: tls.VersionTLS12,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	request := func() []byte {
		return fmt.Appendf(nil, "POST /validate/held HTTP/1.1\r\nHost: warden\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(review), review)
	}

	// The client that stays takes both turns.
	var held []*tls.Conn
	for range 2 {
		c := dial()
		if _, err := c.Write(request()); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		select {
		case <-arrived:
		case <-time.After(time.Minute): // bounds the wait only
			c.SetReadDeadline(time.Now().Add(time.Second))
			out, _ := io.ReadAll(c)
			t.Fatalf("the policy's host call never reached the registry; the server answered %s", out)
		}
	}

	const clients, pipelined = 20, 25
	var conns []*tls.Conn
	for range clients {
		c := dial()
		if _, err := c.Write(bytes.Repeat(request(), pipelined)); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close()
	}
	testkit.Eventually(t, time.Minute, "every client's first request is not evaluated", func() bool {
		return strings.Count(ts.logs.String(), "evaluation not started: the client has gone") >= clients
	})
	letGo()
	for _, c := range held {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the client that stayed: status %d", resp.StatusCode)
		}
	}

	status, body := ts.post(t, "/validate/held", "application/json", review)
	if status != http.StatusOK || !strings.Contains(string(body), "manifest_digest") {
		t.Fatalf("a new client: status %d, %s", status, body)
	}
	if got := evaluations(t, ts, "held"); got != 3 {
		t.Errorf("%d evaluations, want 3: the two of the client that stayed and the new client's", got)
	}
	if n := hits.Load(); n > 3*2 { // a host call asks the registry twice at most (/v2/, the manifest)
		t.Errorf("the registry was asked %d times: evaluations ran for clients that had gone", n)
	}
}

// evaluations sums kubewarden_policy_evaluations_total of a policy.
func evaluations(t *testing.T, ts *testServer, policy string) int {
	t.Helper()
	resp, err := http.Get(ts.ready + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	total := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "kubewarden_policy_evaluations_total{") || !strings.Contains(line, `policy_name="`+policy+`"`) {
			continue
		}
		n, err := strconv.Atoi(line[strings.LastIndexByte(line, ' ')+1:])
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		total += n
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}
