// Package admissiontest builds AdmissionReviews for tests, in the manner of
// cert-manager's test/unit/gen: New returns the review of a request to
// create a Pod, and each option changes one thing of it.
//
//	body := admissiontest.New(
//		admissiontest.WithUID("u2"),
//		admissiontest.WithLabels(map[string]string{"forbidden": "yes"}),
//	).JSON()
//
// Only tests import it.
package admissiontest

import (
	"encoding/json"
	"testing"

	"github.com/wardenhq/warden/internal/admission"
)

// Review is an admission.k8s.io/v1 AdmissionReview, as the API server sends
// it. Options change it; JSON, RequestJSON and Decode read it.
type Review struct {
	request request
	// pod is the object, until WithObject replaces it.
	pod *pod
}

// request is an AdmissionRequest, with the fields Kubernetes sends that
// Warden's tests read.
type request struct {
	UID         string                         `json:"uid"`
	Kind        admission.GroupVersionKind     `json:"kind"`
	Resource    admission.GroupVersionResource `json:"resource"`
	SubResource string                         `json:"subResource,omitempty"`
	RequestKind admission.GroupVersionKind     `json:"requestKind"`
	Name        string                         `json:"name,omitempty"`
	Namespace   string                         `json:"namespace,omitempty"`
	Operation   string                         `json:"operation"`
	UserInfo    userInfo                       `json:"userInfo"`
	Object      json.RawMessage                `json:"object,omitempty"`
	OldObject   json.RawMessage                `json:"oldObject,omitempty"`
}

type userInfo struct {
	Username string `json:"username"`
}

// pod is the object of a review no WithObject changed: a Pod with one
// container.
type pod struct {
	name, namespace string
	labels          map[string]string
	image           string
}

// Option changes one thing of a Review.
type Option func(*Review)

// New returns the review of a request to create the Pod nginx (one
// container, nginx, of image nginx, no labels) in namespace default, by the
// user alice, uid u1, changed by opts in order.
func New(opts ...Option) *Review {
	r := &Review{
		request: request{
			UID:         "u1",
			Kind:        admission.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:    admission.GroupVersionResource{Version: "v1", Resource: "pods"},
			RequestKind: admission.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Name:        "nginx",
			Namespace:   "default",
			Operation:   "CREATE",
			UserInfo:    userInfo{Username: "alice"},
		},
		pod: &pod{name: "nginx", namespace: "default", image: "nginx"},
	}
	for _, opt := range opts {
		opt(r)
	}
	return r
}

// WithUID sets the request's uid.
func WithUID(uid string) Option {
	return func(r *Review) { r.request.UID = uid }
}

// WithKind sets the kind of the object (kind and requestKind).
func WithKind(group, version, kind string) Option {
	return func(r *Review) {
		r.request.Kind = admission.GroupVersionKind{Group: group, Version: version, Kind: kind}
		r.request.RequestKind = r.request.Kind
	}
}

// WithResource sets the resource the request is for.
func WithResource(group, version, resource string) Option {
	return func(r *Review) {
		r.request.Resource = admission.GroupVersionResource{Group: group, Version: version, Resource: resource}
	}
}

// WithSubResource sets the subresource the request is for (none by
// default).
func WithSubResource(subResource string) Option {
	return func(r *Review) { r.request.SubResource = subResource }
}

// WithName sets the name of the request, and of the Pod unless WithObject
// replaced it.
func WithName(name string) Option {
	return func(r *Review) {
		r.request.Name = name
		if r.pod != nil {
			r.pod.name = name
		}
	}
}

// WithNamespace sets the namespace of the request, and of the Pod unless
// WithObject replaced it.
func WithNamespace(namespace string) Option {
	return func(r *Review) {
		r.request.Namespace = namespace
		if r.pod != nil {
			r.pod.namespace = namespace
		}
	}
}

// WithOperation sets the operation: CREATE, UPDATE, DELETE or CONNECT.
func WithOperation(operation string) Option {
	return func(r *Review) { r.request.Operation = operation }
}

// WithUser sets the name of the user making the request.
func WithUser(username string) Option {
	return func(r *Review) { r.request.UserInfo.Username = username }
}

// WithObject replaces the Pod with object, a JSON value ("null": none, as
// in a DELETE). The request's name and namespace stay as they are.
func WithObject(object string) Option {
	return func(r *Review) {
		r.request.Object = json.RawMessage(object)
		r.pod = nil
	}
}

// WithOldObject sets the object as it was before an UPDATE or a DELETE, a
// JSON value (none by default).
func WithOldObject(object string) Option {
	return func(r *Review) { r.request.OldObject = json.RawMessage(object) }
}

// WithLabels sets the Pod's labels. It panics after WithObject, whose
// object it cannot change.
func WithLabels(labels map[string]string) Option {
	return func(r *Review) { r.mustPod("WithLabels").labels = labels }
}

// WithImage sets the image of the Pod's container. It panics after
// WithObject, whose object it cannot change.
func WithImage(image string) Option {
	return func(r *Review) { r.mustPod("WithImage").image = image }
}

func (r *Review) mustPod(option string) *pod {
	if r.pod == nil {
		panic("admissiontest: " + option + " changes the Pod, which WithObject replaced")
	}
	return r.pod
}

// JSON returns the AdmissionReview.
func (r *Review) JSON() []byte {
	return marshal(struct {
		APIVersion string  `json:"apiVersion"`
		Kind       string  `json:"kind"`
		Request    request `json:"request"`
	}{admission.APIVersion, admission.Kind, r.filled()})
}

// RequestJSON returns the AdmissionRequest alone, as wardenctl reads it
// from a file.
func (r *Review) RequestJSON() json.RawMessage {
	return marshal(r.filled())
}

// Decode decodes the review as the policy server does
// (admission.DecodeReview); the request is released when tb ends.
func (r *Review) Decode(tb testing.TB) *admission.Request {
	tb.Helper()
	req, err := admission.DecodeReview(r.JSON())
	if err != nil {
		tb.Fatalf("decoding the review: %v", err)
	}
	tb.Cleanup(req.Release)
	return req
}

// filled is the request with its object.
func (r *Review) filled() request {
	req := r.request
	if r.pod != nil {
		req.Object = r.pod.json()
	}
	return req
}

func (p *pod) json() json.RawMessage {
	type container struct {
		Name  string `json:"name"`
		Image string `json:"image"`
	}
	type metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace,omitempty"`
		Labels    map[string]string `json:"labels,omitempty"`
	}
	return marshal(struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Metadata   metadata `json:"metadata"`
		Spec       struct {
			Containers []container `json:"containers"`
		} `json:"spec"`
	}{
		APIVersion: "v1",
		Kind:       "Pod",
		Metadata:   metadata{Name: p.name, Namespace: p.namespace, Labels: p.labels},
		Spec: struct {
			Containers []container `json:"containers"`
		}{[]container{{Name: "nginx", Image: p.image}}},
	})
}

// marshal is admission.Marshal (no HTML escapes: objects stay as written)
// of what cannot fail to marshal.
func marshal(v any) []byte {
	b, err := admission.Marshal(v)
	if err != nil {
		panic("admissiontest: " + err.Error())
	}
	return b
}
