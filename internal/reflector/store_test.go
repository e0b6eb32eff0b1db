package reflector

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func openStore(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var pods = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// object is a Pod as the API server would send it, trimmed for the store.
func object(t testing.TB, namespace, name string, extra map[string]any) Object {
	t.Helper()
	md := map[string]any{"name": name}
	if namespace != "" {
		md["namespace"] = namespace
	}
	obj := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": md}
	for k, v := range extra {
		obj[k] = v
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	o, err := Trimmed(raw, metav1.TypeMeta{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// list writes objects as a full list, in pages of pageSize.
func list(t testing.TB, tbl *Table, pageSize int, objects ...Object) {
	t.Helper()
	l, err := tbl.NewListing(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(objects); i += pageSize {
		if err := l.Page(context.Background(), objects[i:min(i+pageSize, len(objects))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// names lists the table's objects as namespace/name.
func names(t *testing.T, tbl *Table, namespace *string) string {
	t.Helper()
	objects, err := tbl.List(context.Background(), namespace)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objects {
		var meta struct{ Metadata objectMeta }
		if err := json.Unmarshal(o, &meta); err != nil {
			t.Fatal(err)
		}
		out = append(out, meta.Metadata.Namespace+"/"+meta.Metadata.Name)
	}
	return strings.Join(out, " ")
}

func TestTableName(t *testing.T) {
	for gvr, want := range map[schema.GroupVersionResource]string{
		pods: "v1_pods",
		{Group: "apps", Version: "v1", Resource: "deployments"}:             "apps_v1_deployments",
		{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}:  "networking_k8s_io_v1_ingresses",
		{Group: "policies.kubewarden.io", Version: "v1", Resource: "x-y.z"}: "policies_kubewarden_io_v1_x_y_z",
	} {
		if got := TableName(gvr); got != want {
			t.Errorf("TableName(%v) = %q, want %q", gvr, got, want)
		}
	}
}

func TestTrimmed(t *testing.T) {
	raw := `{"metadata":{"name":"web","namespace":"b","resourceVersion":"7",` +
		`"managedFields":[{"manager":"kubectl"}],` +
		`"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}","note":"kept"}},` +
		`"spec":{"big":1234567890123456789,"ratio":0.10}}`
	// A list's item has no apiVersion and kind: they are the list's.
	o, err := Trimmed([]byte(raw), metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"v1","kind":"Pod","metadata":{"annotations":{"note":"kept"},"name":"web","namespace":"b",` +
		`"resourceVersion":"7"},"spec":{"big":1234567890123456789,"ratio":0.1}}`
	if o.Name != "web" || o.Namespace != "b" || string(o.JSON) != want {
		t.Errorf("Trimmed = %s %s %s,\nwant web b %s", o.Name, o.Namespace, o.JSON, want)
	}
	for _, bad := range []string{`{"metadata":{}}`, `[1]`, `{"metadata":`} {
		if _, err := Trimmed([]byte(bad), metav1.TypeMeta{}); err == nil || !strings.HasPrefix(err.Error(), "reading an object") {
			t.Errorf("Trimmed(%s): %v", bad, err)
		}
	}
}

func TestTableWrites(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, filepath.Join(t.TempDir(), "reflectors.db"))
	tbl, err := s.Table(ctx, pods)
	if err != nil {
		t.Fatal(err)
	}
	if tbl.HasSynced() {
		t.Fatal("synced before the first list")
	}
	start, v0 := time.Now(), tbl.Version()
	l, err := tbl.NewListing(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Page(ctx, []Object{object(t, "b", "web", nil), object(t, "a", "db", nil)}); err != nil {
		t.Fatal(err)
	}
	if got := names(t, tbl, nil); got != "" {
		t.Errorf("a page before the list's end is visible: %s", got)
	}
	if err := l.Page(ctx, []Object{object(t, "", "node-1", nil)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !tbl.HasSynced() {
		t.Fatal("not synced after the first list")
	}
	if got := names(t, tbl, nil); got != "/node-1 a/db b/web" {
		t.Errorf("after the list: %s", got)
	}
	if !tbl.ChangedSince(start) || tbl.Version() == v0 {
		t.Error("a list is no change")
	}

	mark, v1 := time.Now(), tbl.Version()
	if tbl.ChangedSince(mark) {
		t.Error("changed without a write")
	}
	steps := []struct {
		do   func() error
		want string
	}{
		{func() error { return tbl.Put(ctx, object(t, "a", "cache", nil)) }, "/node-1 a/cache a/db b/web"},
		{func() error { return tbl.Put(ctx, object(t, "a", "cache", map[string]any{"spec": "v2"})) }, "/node-1 a/cache a/db b/web"},
		{func() error { return tbl.Remove(ctx, "b", "web") }, "/node-1 a/cache a/db"},
		{func() error { return tbl.Remove(ctx, "b", "never-there") }, "/node-1 a/cache a/db"},
		// A cluster-scoped object and a namespaced one of the same name
		// are two rows.
		{func() error { return tbl.Put(ctx, object(t, "a", "node-1", nil)) }, "/node-1 a/cache a/db a/node-1"},
	}
	for i, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := names(t, tbl, nil); got != st.want {
			t.Errorf("step %d: %s, want %s", i, got, st.want)
		}
	}
	if !tbl.ChangedSince(mark) || tbl.Version() == v1 {
		t.Error("writes are no change")
	}
	if got := names(t, tbl, new("a")); got != "a/cache a/db a/node-1" {
		t.Errorf("namespace a: %s", got)
	}
	got, err := tbl.Get(ctx, "a", "cache")
	if err != nil || !strings.Contains(string(got), `"spec":"v2"`) {
		t.Errorf("Get a/cache = %s, %v", got, err)
	}
	if got, err := tbl.Get(ctx, "", "cache"); got != nil || err != nil {
		t.Errorf("Get of a cluster-scoped object that is not there = %s, %v", got, err)
	}

	// A list again: the table becomes that list, the synced channel stays
	// closed.
	list(t, tbl, 1, object(t, "c", "only", nil))
	if got := names(t, tbl, nil); got != "c/only" {
		t.Errorf("after another list: %s", got)
	}
}

// TestReadersDuringListings reads while lists are written page by page:
// the write-ahead log keeps readers from waiting on, or failing for, the
// writer, and a reader sees a list whole, never part of one.
func TestReadersDuringListings(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "reflectors.db"))
	tbl, err := s.Table(context.Background(), pods)
	if err != nil {
		t.Fatal(err)
	}
	objects := func(n int) []Object {
		out := make([]Object, n)
		for i := range n {
			out[i] = object(t, "a", fmt.Sprintf("p%03d", i), nil)
		}
		return out
	}
	list(t, tbl, 30, objects(100)...)
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				objects, err := tbl.List(context.Background(), nil)
				if err != nil {
					errs <- err
					return
				}
				if n := len(objects); n != 100 && n != 200 {
					errs <- fmt.Errorf("read %d objects: part of a list", n)
					return
				}
			}
		})
	}
	for i := range 20 {
		list(t, tbl, 30, objects(100+100*(i%2))...)
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestListCheckpointsTheLog: a list larger than the write-ahead log's limit
// leaves the log near that limit, not as large as what was written.
func TestListCheckpointsTheLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reflectors.db")
	s := openStore(t, path)
	tbl, err := s.Table(context.Background(), pods)
	if err != nil {
		t.Fatal(err)
	}
	objects := make([]Object, 3000)
	for i := range objects {
		objects[i] = object(t, "a", fmt.Sprintf("p%04d", i), map[string]any{"data": strings.Repeat("x", 4096)})
	}
	const written = 3000 * 4096
	list(t, tbl, 250, objects...)
	// One write more: a log fully checkpointed starts again, cut back.
	if err := tbl.Put(context.Background(), object(t, "a", "late", nil)); err != nil {
		t.Fatal(err)
	}
	db, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	wal, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if db.Size() < written || wal.Size() > walLimit+2<<20 {
		t.Errorf("database %d bytes, write-ahead log %d bytes: want the %d bytes written in the database and a log of at most %d",
			db.Size(), wal.Size(), written, walLimit+2<<20)
	}
}

// TestReopenedStoreStartsEmpty: the database is a cache; a file left by an
// earlier run is emptied as its tables are taken again.
func TestReopenedStoreStartsEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reflectors.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := s.Table(context.Background(), pods)
	if err != nil {
		t.Fatal(err)
	}
	list(t, tbl, 10, object(t, "a", "old", nil))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	tbl, err = openStore(t, path).Table(context.Background(), pods)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(t, tbl, nil); got != "" {
		t.Errorf("reopened: %s", got)
	}
}

// BenchmarkTableList reads a table of 1,000 ConfigMap-sized objects, the
// work of one list_resources_all answered from a reflector.
func BenchmarkTableList(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "reflectors.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	tbl, err := s.Table(context.Background(), pods)
	if err != nil {
		b.Fatal(err)
	}
	objects := make([]Object, 1000)
	for i := range objects {
		objects[i] = object(b, fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("object-%04d", i), map[string]any{
			"data": map[string]any{"config": strings.Repeat("x", 512)},
		})
	}
	list(b, tbl, 500, objects...)
	ns := "ns-3"
	b.Run("all", func(b *testing.B) {
		for b.Loop() {
			if objects, err := tbl.List(context.Background(), nil); err != nil || len(objects) != 1000 {
				b.Fatal(len(objects), err)
			}
		}
	})
	b.Run("namespace", func(b *testing.B) {
		for b.Loop() {
			if objects, err := tbl.List(context.Background(), &ns); err != nil || len(objects) != 100 {
				b.Fatal(len(objects), err)
			}
		}
	})
}
