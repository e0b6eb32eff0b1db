package hostcap

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wardenhq/warden/internal/reflector"
)

// configMapTable returns a table of ConfigMaps holding n objects in
// namespace a, listed.
func configMapTable(t *testing.T, n int) *reflector.Table {
	t.Helper()
	ctx := context.Background()
	store, err := reflector.Open(filepath.Join(t.TempDir(), "reflectors.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	tbl, err := store.Table(ctx, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := tbl.NewListing(ctx)
	if err != nil {
		t.Fatal(err)
	}
	objects := make([]reflector.Object, n)
	for i := range objects {
		objects[i] = configMap(t, "a", fmt.Sprintf("cm-%d", i), "v")
	}
	if err := l.Page(ctx, objects); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return tbl
}

func configMap(t *testing.T, namespace, name, value string) reflector.Object {
	t.Helper()
	o, err := reflector.Trimmed([]byte(fmt.Sprintf(`{"metadata":{"namespace":%q,"name":%q,"labels":{"app":%q}},"data":{"k":%q}}`,
		namespace, name, name, value)), metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestListCacheFollowsTheTable(t *testing.T) {
	ctx := context.Background()
	tbl := configMapTable(t, 3)
	c := newListCache(maxListCacheBytes)
	a := new("a")
	q := listQuery{apiVersion: "v1", kind: "ConfigMap", namespace: a}
	first, err := c.answer(ctx, tbl, q)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Kind  string
		Items []json.RawMessage
	}
	if err := json.Unmarshal(first, &list); err != nil || list.Kind != "ConfigMapList" || len(list.Items) != 3 {
		t.Fatalf("answer %s: %v", first, err)
	}
	again, err := c.answer(ctx, tbl, q)
	if err != nil {
		t.Fatal(err)
	}
	if &again[0] != &first[0] {
		t.Error("an unchanged table's answer was assembled again")
	}
	// Another query of the same table is another answer.
	one, err := c.answer(ctx, tbl, listQuery{apiVersion: "v1", kind: "ConfigMap", namespace: a, labelSelector: new("app=cm-1")})
	if err != nil || strings.Count(string(one), `"name":`) != 1 {
		t.Errorf("selected answer %s, %v", one, err)
	}

	if err := tbl.Put(ctx, configMap(t, "a", "cm-1", "changed")); err != nil {
		t.Fatal(err)
	}
	changed, err := c.answer(ctx, tbl, q)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(changed), `"k":"changed"`) {
		t.Errorf("after a change: %s", changed)
	}
	if err := tbl.Remove(ctx, "a", "cm-1"); err != nil {
		t.Fatal(err)
	}
	if removed, _ := c.answer(ctx, tbl, q); strings.Contains(string(removed), `"cm-1"`) {
		t.Errorf("after a removal: %s", removed)
	}
}

// TestListCacheIsBounded: the answers kept never add up to more than the
// cache's bound; the oldest go first, and an answer larger than the bound
// is served but not kept.
func TestListCacheIsBounded(t *testing.T) {
	ctx := context.Background()
	tbl := configMapTable(t, 20)
	all, err := assembleList(ctx, tbl, listQuery{apiVersion: "v1", kind: "ConfigMap"})
	if err != nil {
		t.Fatal(err)
	}
	c := newListCache(len(all) - 1)
	if _, err := c.answer(ctx, tbl, listQuery{apiVersion: "v1", kind: "ConfigMap"}); err != nil {
		t.Fatal(err)
	}
	if len(c.entries) != 0 || c.size != 0 {
		t.Errorf("an answer larger than the bound was kept: %d entries, %d bytes", len(c.entries), c.size)
	}
	for i := range 20 {
		if _, err := c.answer(ctx, tbl, listQuery{apiVersion: "v1", kind: "ConfigMap", labelSelector: new(fmt.Sprintf("app=cm-%d", i))}); err != nil {
			t.Fatal(err)
		}
		if c.size > c.maxBytes {
			t.Fatalf("after %d answers the cache holds %d bytes, over its bound %d", i+1, c.size, c.maxBytes)
		}
	}
	if _, ok := c.entries[listQuery{apiVersion: "v1", kind: "ConfigMap", labelSelector: new("app=cm-19")}.key(tbl.Name())]; !ok {
		t.Error("the newest answer was not kept")
	}
	if _, ok := c.entries[listQuery{apiVersion: "v1", kind: "ConfigMap", labelSelector: new("app=cm-0")}.key(tbl.Name())]; ok && len(c.entries) < 20 {
		t.Error("the oldest answer was kept while newer ones were dropped")
	}
}

// TestListAnswer: the answer written around the items is what json.Marshal
// writes for a kubeList of them.
func TestListAnswer(t *testing.T) {
	for _, items := range [][]json.RawMessage{
		nil,
		{json.RawMessage(`{"metadata":{"name":"a"}}`)},
		{json.RawMessage(`{"metadata":{"name":"a"}}`), json.RawMessage(`{"metadata":{"name":"b"}}`)},
	} {
		got, err := listAnswer("example.com/v1", "Widget", items)
		if err != nil {
			t.Fatal(err)
		}
		list := kubeList{APIVersion: "example.com/v1", Kind: "WidgetList", Items: []any{}}
		for _, it := range items {
			list.Items = append(list.Items, it)
		}
		want, _ := json.Marshal(list)
		if string(got) != string(want) {
			t.Errorf("listAnswer = %s, want %s", got, want)
		}
	}
}
