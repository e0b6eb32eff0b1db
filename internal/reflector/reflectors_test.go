package reflector

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// The reflectors' list-and-watch against the real API server is tested in
// test/cluster (TestReflectedLists). The faults below cannot be caused on
// demand there: an expired continue token, a watch whose resource version
// the API server no longer has (410 Gone), a stream cut in the middle of
// an event. A fake API server plays them, one step per request.

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// fakeAPIServer answers the requests of one resource with the responses
// queued for lists and for watches, in order; once a queue is empty, lists
// fail and watches hang until the client goes.
type fakeAPIServer struct {
	t *testing.T

	mu       sync.Mutex
	lists    []func(w http.ResponseWriter, r *http.Request)
	watches  []func(w http.ResponseWriter, r *http.Request)
	requests []string // "list <continue>" or "watch <resourceVersion>"
	limits   []string // of the lists
}

func (f *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/configmaps" {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	f.mu.Lock()
	var next func(http.ResponseWriter, *http.Request)
	if q.Get("watch") == "true" {
		f.requests = append(f.requests, "watch "+q.Get("resourceVersion"))
		if len(f.watches) > 0 {
			next, f.watches = f.watches[0], f.watches[1:]
		}
	} else {
		f.requests = append(f.requests, "list "+q.Get("continue"))
		f.limits = append(f.limits, q.Get("limit"))
		if len(f.lists) > 0 {
			next, f.lists = f.lists[0], f.lists[1:]
		}
	}
	f.mu.Unlock()
	switch {
	case next != nil:
		next(w, r)
	case q.Get("watch") == "true":
		<-r.Context().Done()
	default:
		status(w, http.StatusInternalServerError, "InternalError", "no more lists")
	}
}

func (f *fakeAPIServer) requested() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.requests, ", ")
}

func status(w http.ResponseWriter, code int, reason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":%q,"reason":%q,"code":%d}`, message, reason, code)
}

// page answers a page of ConfigMaps named names, in namespace a.
func page(rv, cont string, names ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		items := make([]string, len(names))
		for i, n := range names {
			items[i] = fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"a","resourceVersion":%q}}`, n, rv)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":%q,"continue":%q},"items":[%s]}`,
			rv, cont, strings.Join(items, ","))
	}
}

// events answers a watch stream of the events given, as JSON lines, then
// ends it with tail.
func events(tail string, evs ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for _, ev := range evs {
			fmt.Fprintln(w, ev)
		}
		fmt.Fprint(w, tail)
	}
}

func event(typ, name, rv string) string {
	return fmt.Sprintf(`{"type":%q,"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"a","resourceVersion":%q}}}`, typ, name, rv)
}

// startReflector runs a reflector of ConfigMaps against f until the test
// ends.
func startReflector(t *testing.T, f *fakeAPIServer) *Table {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	r, err := New(openStore(t, filepath.Join(t.TempDir(), "reflectors.db")), &rest.Config{Host: srv.URL}, nil, Options{PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	tbl, err := r.Start(configMaps)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// waitFor waits until the table's objects are want.
func waitFor(t *testing.T, tbl *Table, f *fakeAPIServer, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if got := names(t, tbl, nil); got == want {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("objects %q, want %q; requests: %s", got, want, f.requested())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitForRequest waits until f was sent request.
func waitForRequest(t *testing.T, f *fakeAPIServer, request string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(f.requested()+", ", request+", ") {
		if time.Now().After(deadline) {
			t.Fatalf("requests: %s, want %s", f.requested(), request)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRelistAfterGone: a watch the API server ends with 410 Gone makes the
// reflector list again, and the table becomes the new list, objects
// deleted meanwhile gone.
func TestRelistAfterGone(t *testing.T) {
	f := &fakeAPIServer{t: t,
		lists: []func(http.ResponseWriter, *http.Request){
			page("10", "", "a1", "b1"),
			page("20", "", "a1", "d1"),
		},
		watches: []func(http.ResponseWriter, *http.Request){
			events(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410}}`+"\n",
				event("ADDED", "c1", "11")),
		},
	}
	tbl := startReflector(t, f)
	waitFor(t, tbl, f, "a/a1 a/d1")
	waitForRequest(t, f, "watch 20")
	if got, want := f.requested(), "list , watch 10, list , watch 20"; got != want {
		t.Errorf("requests: %s, want %s", got, want)
	}
}

// TestListRestartsWhenItsContinueExpires: a continue token the API server
// no longer knows starts the list again from its first page; the pages
// written before are not kept.
func TestListRestartsWhenItsContinueExpires(t *testing.T) {
	f := &fakeAPIServer{t: t,
		lists: []func(http.ResponseWriter, *http.Request){
			page("10", "next", "a1", "b1"),
			func(w http.ResponseWriter, _ *http.Request) {
				status(w, http.StatusGone, "Expired", "The provided continue parameter is too old")
			},
			page("30", "more", "a1", "c1"),
			page("30", "", "e1"),
		},
	}
	tbl := startReflector(t, f)
	waitFor(t, tbl, f, "a/a1 a/c1 a/e1")
	if got, want := f.requested(), "list , list next, list , list more, watch 30"; !strings.HasPrefix(got, want) {
		t.Errorf("requests: %s, want %s", got, want)
	}
}

// TestWatchResumesAfterACut: a stream cut in the middle of an event is
// watched again from the last event read, and the events after it apply.
func TestWatchResumesAfterACut(t *testing.T) {
	f := &fakeAPIServer{t: t,
		lists: []func(http.ResponseWriter, *http.Request){page("10", "", "a1")},
		watches: []func(http.ResponseWriter, *http.Request){
			events(`{"type":"ADDED","object":{"metadata":`, event("ADDED", "b1", "11"), event("MODIFIED", "a1", "12")),
			events("", event("DELETED", "a1", "13"), `{"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"15"}}}`),
		},
	}
	tbl := startReflector(t, f)
	waitFor(t, tbl, f, "a/b1")
	waitForRequest(t, f, "watch 15") // the bookmark's resource version
	if got, want := f.requested(), "list , watch 10, watch 12, watch 15"; got != want {
		t.Errorf("requests: %s, want %s", got, want)
	}
}

// TestSettled: a reflector whose list the API server refuses for good
// (forbidden) is settled, one that cannot list yet is not.
func TestSettled(t *testing.T) {
	f := forbiddenLists(t)
	r := newReflectors(t, f)
	if !r.Settled() {
		t.Error("no reflector is not settled")
	}
	if _, err := r.Start(configMaps); err != nil {
		t.Fatal(err)
	}
	if r.Settled() {
		t.Error("settled before its first list")
	}
	deadline := time.Now().Add(30 * time.Second)
	for !r.Settled() {
		if time.Now().After(deadline) {
			t.Fatalf("a forbidden list is not settled; requests: %s", f.requested())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A list that fails otherwise (a server error) is not settled.
	failing := &fakeAPIServer{t: t}
	r2 := newReflectors(t, failing)
	if _, err := r2.Start(configMaps); err != nil {
		t.Fatal(err)
	}
	waitForRequest(t, failing, "list ")
	if r2.Settled() {
		t.Errorf("a list that failed with a server error is settled; requests: %s", failing.requested())
	}
}

// TestWaitSyncedRefused: a request waiting for a reflector whose list the
// API server refuses (forbidden) gets the refusal, not a wait until its own
// deadline; one whose list failed otherwise waits for the next.
func TestWaitSyncedRefused(t *testing.T) {
	r := newReflectors(t, forbiddenLists(t))
	if _, err := r.Start(configMaps); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := r.WaitSynced(ctx, configMaps)
	if err == nil || !strings.Contains(err.Error(), "configmaps is forbidden") || ctx.Err() != nil {
		t.Errorf("WaitSynced = %v (ctx: %v), want the refusal", err, ctx.Err())
	}

	failing := &fakeAPIServer{t: t}
	r2 := newReflectors(t, failing)
	if _, err := r2.Start(configMaps); err != nil {
		t.Fatal(err)
	}
	waitForRequest(t, failing, "list ")
	short, cancel2 := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel2()
	if err := r2.WaitSynced(short, configMaps); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitSynced after a server error = %v, want the wait to last until the context's deadline", err)
	}
	if err := r2.WaitSynced(t.Context(), schema.GroupVersionResource{Version: "v1", Resource: "pods"}); err == nil {
		t.Error("WaitSynced of a resource no reflector reads: no error")
	}
}

// forbiddenLists is an API server that refuses the first lists of
// ConfigMaps: the policy server may not read them.
func forbiddenLists(t *testing.T) *fakeAPIServer {
	forbidden := func(w http.ResponseWriter, _ *http.Request) {
		status(w, http.StatusForbidden, "Forbidden", `configmaps is forbidden: User "warden" cannot list resource "configmaps"`)
	}
	return &fakeAPIServer{t: t, lists: []func(http.ResponseWriter, *http.Request){forbidden, forbidden, forbidden, forbidden}}
}

// newReflectors returns reflectors reading f, stopped when the test ends.
func newReflectors(t *testing.T, f *fakeAPIServer) *Reflectors {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	r, err := New(openStore(t, filepath.Join(t.TempDir(), "reflectors.db")), &rest.Config{Host: srv.URL}, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// TestPagesOfLargeObjects: a list's first page asks for minPageSize
// objects; after a page of small objects a list asks for PageSize, after a
// page of large ones for as many as make pageBytes, never fewer than
// minPageSize.
func TestPagesOfLargeObjects(t *testing.T) {
	big := strings.Repeat("x", 400<<10)
	bigPage := func(cont string, names ...string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			items := make([]string, len(names))
			for i, n := range names {
				items[i] = fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"a"},"data":{"k":%q}}`, n, big)
			}
			fmt.Fprintf(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5","continue":%q},"items":[%s]}`,
				cont, strings.Join(items, ","))
		}
	}
	f := &fakeAPIServer{t: t, lists: []func(http.ResponseWriter, *http.Request){
		page("5", "p2", "a1", "a2"), bigPage("p3", "a3"), page("5", "", "a4"),
	}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	r, err := New(openStore(t, filepath.Join(t.TempDir(), "reflectors.db")), &rest.Config{Host: srv.URL}, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	tbl, err := r.Start(configMaps)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, tbl, f, "a/a1 a/a2 a/a3 a/a4")
	f.mu.Lock()
	limits := strings.Join(f.limits, " ")
	f.mu.Unlock()
	// 400 KiB objects: 1 MiB holds 2 of them, minPageSize 10.
	if limits != "10 500 10" {
		t.Errorf("limits asked: %s, want 10 500 10", limits)
	}
	for _, tt := range []struct {
		n, size int
		want    int64
	}{
		{0, 0, 500}, {500, 500 * 700, 500}, {500, 500 * 34 << 10, 30}, {2, 2 << 30, 10},
	} {
		if got := r.nextPageSize(tt.n, tt.size); got != tt.want {
			t.Errorf("nextPageSize(%d, %d) = %d, want %d", tt.n, tt.size, got, tt.want)
		}
	}
}

// TestStates: what the metrics show of a reflector. A list the API server
// refuses is a failure and not synced; a relist after 410 Gone counts a
// second list; a watch that fails makes the reflector not synced until a
// watch is accepted again; a reflector stopped by Retain has no state.
func TestStates(t *testing.T) {
	state := func(t *testing.T, r *Reflectors) State {
		t.Helper()
		states := r.States()
		if len(states) != 1 || states[0].Resource != configMaps {
			t.Fatalf("states %+v, want the one of configmaps", states)
		}
		return states[0]
	}
	waitState := func(t *testing.T, r *Reflectors, f *fakeAPIServer, what string, ok func(State) bool) State {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			s := state(t, r)
			if ok(s) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("state %+v, want %s; requests: %s", s, what, f.requested())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	t.Run("refused", func(t *testing.T) {
		f := forbiddenLists(t)
		r := newReflectors(t, f)
		if _, err := r.Start(configMaps); err != nil {
			t.Fatal(err)
		}
		s := waitState(t, r, f, "a failed list", func(s State) bool { return s.ListFailures > 0 })
		if s.Synced || s.Lists != 0 || !s.LastList.IsZero() {
			t.Errorf("after a refused list: %+v, want not synced and no list", s)
		}
	})

	t.Run("relist after Gone", func(t *testing.T) {
		f := &fakeAPIServer{t: t,
			lists: []func(http.ResponseWriter, *http.Request){page("10", "", "a1"), page("20", "", "a1")},
			watches: []func(http.ResponseWriter, *http.Request){
				events(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410}}` + "\n"),
			},
		}
		r := newReflectors(t, f)
		if _, err := r.Start(configMaps); err != nil {
			t.Fatal(err)
		}
		waitForRequest(t, f, "watch 20")
		s := state(t, r)
		if !s.Synced || s.Lists != 2 || s.ListFailures != 0 || s.LastList.IsZero() {
			t.Errorf("after a relist: %+v, want synced, 2 lists, no failure", s)
		}
		r.Retain(t.Context(), func(schema.GroupVersionResource) bool { return false })
		if states := r.States(); len(states) != 0 {
			t.Errorf("after Retain stopped it: states %+v, want none", states)
		}
	})

	t.Run("failed watch", func(t *testing.T) {
		release := make(chan struct{})
		f := &fakeAPIServer{t: t,
			lists: []func(http.ResponseWriter, *http.Request){page("10", "", "a1")},
			watches: []func(http.ResponseWriter, *http.Request){
				func(w http.ResponseWriter, _ *http.Request) {
					status(w, http.StatusInternalServerError, "InternalError", "etcd is away")
				},
				func(w http.ResponseWriter, r *http.Request) { // accepted once released
					select {
					case <-release:
					case <-r.Context().Done():
						return
					}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusOK)
					w.(http.Flusher).Flush()
					<-r.Context().Done()
				},
			},
		}
		r := newReflectors(t, f)
		if _, err := r.Start(configMaps); err != nil {
			t.Fatal(err)
		}
		// The second watch waits for release: the first one failed.
		waitForRequest(t, f, "watch 10, watch 10")
		if s := state(t, r); s.Synced || s.Lists != 1 {
			t.Errorf("after a failed watch: %+v, want not synced, 1 list", s)
		}
		close(release)
		waitState(t, r, f, "synced once a watch is accepted", func(s State) bool { return s.Synced })
	})
}
