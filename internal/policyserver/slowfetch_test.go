package policyserver_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/policybuild"
)

// slowModuleServer serves the labels test policy over plain HTTP: its first
// 64 KiB at once, the rest once release is called (at the latest when the
// test ends).
func slowModuleServer(t *testing.T) (host string, release func()) {
	t.Helper()
	wasm, err := os.ReadFile(policybuild.ForTest(t, "labels"))
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(wasm)))
		w.Write(wasm[:64<<10])
		w.(http.Flusher).Flush()
		select {
		case <-released:
			w.Write(wasm[64<<10:])
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(release) // first: Close waits for the handlers
	return strings.TrimPrefix(srv.URL, "http://"), release
}

// fetchState is what GET /policies says of a policy being fetched.
type fetchState struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Fetch *struct {
		Modules []string `json:"modules"`
		Bytes   int64    `json:"bytes"`
		Total   int64    `json:"total"`
	} `json:"fetch"`
}

// TestASlowFetchDoesNotHoldReloads adds a policy whose module comes slowly:
// the reload does not wait for it (it shows as fetching, with its
// progress), a policy added meanwhile is served at once, and the slow one
// is served once its module has come.
func TestASlowFetchDoesNotHoldReloads(t *testing.T) {
	host, release := slowModuleServer(t)
	dir := t.TempDir()
	sources := filepath.Join(dir, "sources.yml")
	if err := os.WriteFile(sources, []byte("insecure_sources: ["+host+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := policiesDoc(t, "p: {module: {labels}, settings: {denied_labels: [bad]}}\n")
	path := writePolicies(t, good)
	opts := testOptions(t, path)
	opts.WatchPolicies = false // reloads on Reload only
	opts.SourcesPath = sources
	opts.DownloadDir = filepath.Join(dir, "store")
	ts := startServer(t, opts)
	bad := map[string]string{"bad": "x"}

	slow := "slow: {module: 'http://" + host + "/labels.wasm', settings: {denied_labels: [bad]}}\n"
	reload := func(doc string) {
		t.Helper()
		replaceFile(t, path, "rename", doc)
		done := make(chan struct{})
		go func() {
			ts.srv.Reload(t.Context())
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(reloadWait): // bounds the test: the module never comes on its own
			t.Fatal("the reload waited for the slow fetch")
		}
	}
	reload(good + slow)
	var st fetchState
	deadline := time.Now().Add(reloadWait)
	for st.Fetch == nil || st.Fetch.Bytes == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("GET /policies never showed the slow fetch's progress: %+v", st)
		}
		st = ts.fetchState(t, "slow")
		time.Sleep(5 * time.Millisecond)
	}
	if st.State != "fetching" || st.Fetch.Total <= st.Fetch.Bytes || len(st.Fetch.Modules) != 1 {
		t.Errorf("slow: %+v, want fetching, some bytes of more", st)
	}
	if got := ts.verdict("slow", bad); !strings.Contains(got, "status 404") {
		t.Errorf("slow answers %q before its module came", got)
	}

	fast := policiesDoc(t, "fast: {module: {labels}, settings: {denied_labels: [bad]}}\n")
	reload(good + slow + fast)
	if got := ts.verdict("fast", bad); got != "reject" {
		t.Errorf("a policy added while another is fetched answers %q", got)
	}
	release()
	ts.waitVerdict(t, "slow", bad, "reject")
	if st := ts.fetchState(t, "slow"); st.State != "active" || st.Fetch != nil {
		t.Errorf("slow once served: %+v", st)
	}
}

// fetchState reads what GET /policies says of one policy.
func (ts *testServer) fetchState(t *testing.T, id string) fetchState {
	t.Helper()
	var out struct {
		Policies []fetchState `json:"policies"`
	}
	ts.getPolicies(t, &out)
	for _, p := range out.Policies {
		if p.ID == id {
			return p
		}
	}
	return fetchState{ID: id}
}
