package reflector

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

func openStore(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var pods = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

func object(namespace, name string, extra map[string]any) *unstructured.Unstructured {
	md := map[string]any{"name": name}
	if namespace != "" {
		md["namespace"] = namespace
	}
	obj := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": md}
	for k, v := range extra {
		obj[k] = v
	}
	return &unstructured.Unstructured{Object: obj}
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
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(o); err != nil {
			t.Fatal(err)
		}
		out = append(out, u.GetNamespace()+"/"+u.GetName())
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

func TestTableFollowsTheReflector(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "reflectors.db"))
	tbl, err := s.Table(context.Background(), pods)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tbl.Synced():
		t.Fatal("synced before the first list")
	default:
	}
	start := time.Now()
	managed := map[string]any{"metadata": map[string]any{"name": "web", "namespace": "b",
		"managedFields": []any{map[string]any{"manager": "kubectl"}},
		"annotations":   map[string]any{"kubectl.kubernetes.io/last-applied-configuration": "{}", "note": "kept"}}}
	if err := tbl.Replace([]any{object("b", "web", managed), object("a", "db", nil), object("", "node-1", nil)}, "7"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tbl.Synced():
	default:
		t.Fatal("not synced after the first list")
	}
	if got := names(t, tbl, nil); got != "/node-1 a/db b/web" {
		t.Errorf("after Replace: %s", got)
	}
	if !tbl.ChangedSince(start) {
		t.Error("Replace is no change")
	}
	objects, _ := tbl.List(context.Background(), new("b"))
	if got := string(objects[0]); strings.Contains(got, "managedFields") || strings.Contains(got, "last-applied") || !strings.Contains(got, `"note":"kept"`) {
		t.Errorf("kept object: %s", got)
	}

	mark := time.Now()
	if tbl.ChangedSince(mark) {
		t.Error("changed without a write")
	}
	steps := []struct {
		do   func() error
		want string
	}{
		{func() error { return tbl.Add(object("a", "cache", nil)) }, "/node-1 a/cache a/db b/web"},
		{func() error { return tbl.Update(object("a", "cache", map[string]any{"spec": "v2"})) }, "/node-1 a/cache a/db b/web"},
		{func() error { return tbl.Delete(object("b", "web", nil)) }, "/node-1 a/cache a/db"},
		// A delete the watch missed reaches the store wrapped.
		{func() error {
			return tbl.Delete(cache.DeletedFinalStateUnknown{Key: "a/db", Obj: object("a", "db", nil)})
		}, "/node-1 a/cache"},
		// A cluster-scoped object and a namespaced one of the same name
		// are two rows.
		{func() error { return tbl.Add(object("a", "node-1", nil)) }, "/node-1 a/cache a/node-1"},
	}
	for i, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := names(t, tbl, nil); got != st.want {
			t.Errorf("step %d: %s, want %s", i, got, st.want)
		}
	}
	if !tbl.ChangedSince(mark) {
		t.Error("writes are no change")
	}
	if got := names(t, tbl, new("a")); got != "a/cache a/node-1" {
		t.Errorf("namespace a: %s", got)
	}
	objects, _ = tbl.List(context.Background(), new("a"))
	if !strings.Contains(string(objects[0]), `"spec":"v2"`) {
		t.Errorf("updated object: %s", objects[0])
	}
	if err := tbl.Add("not an object"); err == nil {
		t.Error("a string was stored")
	}
}

// TestReadersDuringWrites reads while the writer replaces and adds: the
// write-ahead log keeps readers from waiting on, or failing for, the writer,
// and a reader sees a list whole, never half replaced.
func TestReadersDuringWrites(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "reflectors.db"))
	tbl, err := s.Table(context.Background(), pods)
	if err != nil {
		t.Fatal(err)
	}
	list := func(n int) []any {
		out := make([]any, n)
		for i := range n {
			out[i] = object("a", fmt.Sprintf("p%03d", i), nil)
		}
		return out
	}
	if err := tbl.Replace(list(100), "1"); err != nil {
		t.Fatal(err)
	}
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
					errs <- fmt.Errorf("read %d objects: a list half replaced", n)
					return
				}
			}
		})
	}
	for i := range 20 {
		if err := tbl.Replace(list(100+100*(i%2)), "2"); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
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
	if err := tbl.Replace([]any{object("a", "old", nil)}, "1"); err != nil {
		t.Fatal(err)
	}
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
	list := make([]any, 1000)
	for i := range list {
		list[i] = object(fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("object-%04d", i), map[string]any{
			"data": map[string]any{"config": strings.Repeat("x", 512)},
		})
	}
	if err := tbl.Replace(list, "1"); err != nil {
		b.Fatal(err)
	}
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
