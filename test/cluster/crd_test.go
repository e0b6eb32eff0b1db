//go:build cluster

package cluster_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wardenhq/warden/internal/clustertest"
)

// TestCRDDirectory checks that clustertest.WithCRDDirectory installs the CRDs
// of a directory before Start returns, so a test can create their objects
// at once.
func TestCRDDirectory(t *testing.T) {
	c := clustertest.Start(t, clustertest.WithCRDDirectory("testdata/crds"))
	ctx := t.Context()

	gvk := schema.GroupVersionKind{Group: "smoke.warden.test", Version: "v1", Kind: "Widget"}
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(gvk)
	w.SetNamespace("default")
	w.SetName("small")
	if err := unstructured.SetNestedField(w.Object, int64(3), "spec", "size"); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.Create(ctx, w); err != nil {
		t.Fatalf("creating a widget: %v", err)
	}

	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(gvk)
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
		t.Fatalf("reading widget %s/%s back: %v", w.GetNamespace(), w.GetName(), err)
	}
	size, found, err := unstructured.NestedInt64(got.Object, "spec", "size")
	if err != nil || !found || size != 3 {
		t.Errorf("widget spec.size read back = %d (found %t, error %v), want 3", size, found, err)
	}
}
