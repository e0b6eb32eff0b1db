package policysync

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

var rlp = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "ratelimitpolicies"}

func hubObject() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "RateLimitPolicy",
		"metadata": map[string]any{
			"name": "limits", "namespace": "team", "uid": "hub-uid", "resourceVersion": "42", "generation": int64(3),
			"labels":        map[string]any{"sync": "true"},
			"annotations":   map[string]any{"owner": "platform", syncv1alpha1.SyncedAnnotation: "elsewhere"},
			"managedFields": []any{map[string]any{"manager": "kubectl"}},
		},
		"spec": map[string]any{
			"targetRef": map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "edge", "uid": "u", "resourceVersion": "7"},
			"limit":     int64(10),
		},
		"status": map[string]any{"ok": true},
	}}
}

func TestMakeCopy(t *testing.T) {
	hub := hubObject()
	c, err := makeCopy(rlp, hub, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "RateLimitPolicy",
		"metadata": map[string]any{
			"name": "limits", "namespace": "team",
			"labels":      map[string]any{"sync": "true"},
			"annotations": map[string]any{"owner": "platform", syncv1alpha1.SyncedAnnotation: "fleet"},
		},
		"spec": map[string]any{
			"targetRef": map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "edge"},
			"limit":     int64(10),
		},
	}
	if !reflect.DeepEqual(c.object.Object, want) {
		t.Errorf("copy:\n got %v\nwant %v", c.object.Object, want)
	}
	if c.key != (objectKey{gvr: rlp, namespace: "team", name: "limits"}) || c.hubGeneration != 3 {
		t.Errorf("key %v generation %d", c.key, c.hubGeneration)
	}
	if _, ok := hub.Object["spec"].(map[string]any)["targetRef"].(map[string]any)["uid"]; !ok {
		t.Error("retargeting the copy changed the hub object")
	}

	again, err := makeCopy(rlp, hubObject(), "fleet")
	if err != nil {
		t.Fatal(err)
	}
	if again.digest != c.digest {
		t.Error("two copies of the same object have different digests")
	}
	changed := hubObject()
	changed.Object["spec"].(map[string]any)["limit"] = int64(11)
	other, err := makeCopy(rlp, changed, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	if other.digest == c.digest {
		t.Error("a changed spec kept the digest")
	}
	// The hub's resourceVersion is not part of the copy: a status update
	// on the hub does not make the copies be applied again.
	statusOnly := hubObject()
	statusOnly.SetResourceVersion("43")
	statusOnly.Object["status"] = map[string]any{"ok": false}
	if s, _ := makeCopy(rlp, statusOnly, "fleet"); s.digest != c.digest {
		t.Error("a status change on the hub changed the copy's digest")
	}
}

func TestFeedback(t *testing.T) {
	rules, err := compileFeedback([]syncv1alpha1.StatusFeedback{
		{Name: "status", JSONPath: ".status.policyStatus"},
		{Name: "limit", JSONPath: "{.spec.limit}"},
		{Name: "conditions", JSONPath: ".status.conditions[*].type"},
		{Name: "missing", JSONPath: ".status.nothing"},
		{Name: "object", JSONPath: ".spec.targetRef"},
	})
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"limit": int64(10), "targetRef": map[string]any{"kind": "Gateway", "name": "edge"}},
		"status": map[string]any{
			"policyStatus": "active",
			"conditions":   []any{map[string]any{"type": "Ready"}, map[string]any{"type": "Synced"}},
		},
	}}
	got := readFeedback(rules, obj)
	want := map[string]string{
		"status":     "active",
		"limit":      "10",
		"conditions": `["Ready","Synced"]`,
		"object":     `{"kind":"Gateway","name":"edge"}`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("feedback:\n got %v\nwant %v", got, want)
	}
	if got := readFeedback(rules, &unstructured.Unstructured{Object: map[string]any{}}); got != nil {
		t.Errorf("feedback of an object without the fields: %v, want none", got)
	}

	if _, err := compileFeedback([]syncv1alpha1.StatusFeedback{{Name: "bad", JSONPath: ".status[?(@"}}); err == nil {
		t.Error("an invalid JSONPath compiled")
	}
}
