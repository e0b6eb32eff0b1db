package admissiontest_test

import (
	"encoding/json"
	"testing"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/admission/admissiontest"
)

// resource is the request's resource/subresource.
func resource(r *admission.Request) string {
	res, sub := r.Resource()
	if sub != "" {
		return res.Resource + "/" + sub
	}
	return res.Resource
}

func TestNew(t *testing.T) {
	tests := []struct {
		name   string
		opts   []admissiontest.Option
		check  func(r *admission.Request) bool
		object string
	}{
		{name: "defaults", check: func(r *admission.Request) bool {
			return r.UID == "u1" && r.Kind.Kind == "Pod" && r.ResourceKind() == "Pod" && resource(r) == "pods" &&
				r.Name == "nginx" && r.Namespace == "default" && r.Operation == "CREATE"
		}, object: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"nginx","namespace":"default"},"spec":{"containers":[{"name":"nginx","image":"nginx"}]}}`},
		{name: "the Pod", opts: []admissiontest.Option{admissiontest.WithName("web"), admissiontest.WithNamespace("shop"),
			admissiontest.WithLabels(map[string]string{"app": "web"}), admissiontest.WithImage("nginx:1.27")},
			check: func(r *admission.Request) bool { return r.Name == "web" && r.Namespace == "shop" },
			object: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"shop","labels":{"app":"web"}},` +
				`"spec":{"containers":[{"name":"nginx","image":"nginx:1.27"}]}}`},
		{name: "another object", opts: []admissiontest.Option{admissiontest.WithKind("apps", "v1", "Deployment"),
			admissiontest.WithResource("apps", "v1", "deployments"), admissiontest.WithSubResource("scale"),
			admissiontest.WithOperation("UPDATE"), admissiontest.WithUID("u2"),
			admissiontest.WithObject(`{"spec":{"replicas":2}}`), admissiontest.WithOldObject(`{"spec":{"replicas":1}}`)},
			check: func(r *admission.Request) bool {
				return r.UID == "u2" && r.Kind.Group == "apps" && r.ResourceKind() == "Deployment" && resource(r) == "deployments/scale" && r.Operation == "UPDATE" && string(r.OldObject) == `{"spec":{"replicas":1}}`
			}, object: `{"spec":{"replicas":2}}`},
		{name: "no object", opts: []admissiontest.Option{admissiontest.WithOperation("DELETE"), admissiontest.WithObject("null")},
			check: func(r *admission.Request) bool { return !r.HasObject() }, object: "null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			review := admissiontest.New(tt.opts...)
			r := review.Decode(t)
			if !tt.check(r) {
				t.Errorf("request: %s", r.Raw)
			}
			if string(r.Object) != tt.object {
				t.Errorf("object %s, want %s", r.Object, tt.object)
			}
			if string(r.Raw) != string(review.RequestJSON()) {
				t.Errorf("RequestJSON %s, want the review's request %s", review.RequestJSON(), r.Raw)
			}
			var user struct {
				UserInfo struct{ Username string } `json:"userInfo"`
			}
			if err := json.Unmarshal(r.Raw, &user); err != nil || user.UserInfo.Username != "alice" {
				t.Errorf("user %q, %v; want alice", user.UserInfo.Username, err)
			}
		})
	}
}

func TestPodOptionsAfterWithObjectPanic(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("WithLabels after WithObject did not panic")
		}
	}()
	admissiontest.New(admissiontest.WithObject(`{}`), admissiontest.WithLabels(map[string]string{"a": "b"}))
}
