// Package admission is the admission.k8s.io/v1 AdmissionReview wire format as
// the policy server reads and writes it.
//
// The request is kept as raw bytes and handed to policies verbatim
// (docs/compatibility.md#validation-requests-and-responses); only the fields
// Warden itself needs are decoded, once: DecodeReview (and DecodeRawReview
// for raw requests) is the only decoding of a review: the policy server and
// the engine read what it returns, and do not decode the request again. It
// imports nothing from Warden but jsontape.
package admission

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/wardenhq/warden/internal/jsontape"
)

// APIVersion and Kind of the AdmissionReview Warden answers with.
const (
	APIVersion = "admission.k8s.io/v1"
	Kind       = "AdmissionReview"
)

// GroupVersionKind is a Kubernetes group, version and kind.
type GroupVersionKind struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// GroupVersionResource is a Kubernetes group, version and resource.
type GroupVersionResource struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
}

// Request holds the AdmissionRequest fields Warden reads. Raw is the whole
// request object exactly as received.
type Request struct {
	UID         string            `json:"uid"`
	Kind        GroupVersionKind  `json:"kind"`
	RequestKind *GroupVersionKind `json:"requestKind,omitempty"`
	Name        string            `json:"name,omitempty"`
	Namespace   string            `json:"namespace,omitempty"`
	Operation   string            `json:"operation"`
	Object      json.RawMessage   `json:"object,omitempty"`
	OldObject   json.RawMessage   `json:"oldObject,omitempty"`

	Raw json.RawMessage `json:"-"`

	// tape is the parse of the review, when the fast decoder read it, and
	// node the request's node in it: see Parsed.
	tape *jsontape.Tape
	node int32
}

// Parsed returns the parse of the review the request was decoded from and
// the request's node in it, for an evaluator that reads the request (nil
// when the request was decoded otherwise). It is valid until Release and,
// like any Tape, not safe for concurrent use.
func (r *Request) Parsed() (*jsontape.Tape, int32) {
	return r.tape, r.node
}

// Release gives the request's parse back for another review to reuse, once
// nothing reads it any more. Without it the parse is left to the garbage
// collector.
func (r *Request) Release() {
	if r.tape != nil {
		r.tape.Text = "" // the pool must not keep the body alive
		tapes.Put(r.tape)
		r.tape = nil
	}
}

// ResourceKind is the kind used for metrics: requestKind.kind, or "".
func (r *Request) ResourceKind() string {
	if r.RequestKind == nil {
		return ""
	}
	return r.RequestKind.Kind
}

// HasObject reports whether the request carries a non-null object.
func (r *Request) HasObject() bool {
	return len(r.Object) > 0 && string(r.Object) != "null"
}

// ErrNoRequest is returned for a review without a request object.
var ErrNoRequest = errors.New("the AdmissionReview has no request")

type reviewIn struct {
	Request json.RawMessage `json:"request"`
}

// DecodeReview decodes an AdmissionReview body, with encoding/json's
// meaning and errors. The raw fields and the strings of the Request share
// body's memory: body must not change while the Request is in use.
func DecodeReview(body []byte) (*Request, error) {
	if r, ok := decodeReviewFast(body); ok {
		return r, nil
	}
	return decodeReviewSlow(body)
}

// decodeReviewSlow is DecodeReview with encoding/json, for what the fast
// decoder leaves to it: errors and unusual shapes.
func decodeReviewSlow(body []byte) (*Request, error) {
	var in reviewIn
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	if len(in.Request) == 0 || string(in.Request) == "null" {
		return nil, ErrNoRequest
	}
	return DecodeRequest(in.Request)
}

// DecodeRequest decodes an AdmissionRequest object.
func DecodeRequest(raw json.RawMessage) (*Request, error) {
	var r Request
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	r.Raw = raw
	return &r, nil
}

// Resource returns the request's resource and subresource, which only its
// span records: read from the parse when the fast decoder kept one (until
// Release), else decoded from Raw. They never fail: as encoding/json reads
// them, a field of the wrong type is left empty and the others are read.
func (r *Request) Resource() (resource GroupVersionResource, subResource string) {
	if r.tape != nil {
		return resourceParsed(r.tape, r.node)
	}
	var f struct {
		Resource    GroupVersionResource `json:"resource"`
		SubResource string               `json:"subResource"`
	}
	_ = json.Unmarshal(r.Raw, &f) // Raw decoded as a Request already: only these fields' types can fail
	return f.Resource, f.SubResource
}

// RawRequest is the request of a raw review
// (docs/compatibility.md#raw-policies): any JSON value, kept as received in
// Raw, and its uid when it is an object with a string uid.
type RawRequest struct {
	UID string
	Raw json.RawMessage

	// tape is the parse of the review, when the fast decoder read it, and
	// node the request's node in it: see Parsed.
	tape *jsontape.Tape
	node int32
}

// Parsed returns the parse of the review the raw request was decoded from
// and the request's node in it (nil when it was decoded otherwise), as
// Request.Parsed does.
func (r *RawRequest) Parsed() (*jsontape.Tape, int32) {
	return r.tape, r.node
}

// Release gives the request's parse back, as Request.Release does.
func (r *RawRequest) Release() {
	if r.tape != nil {
		r.tape.Text = ""
		tapes.Put(r.tape)
		r.tape = nil
	}
}

// ErrNoRawRequest is returned for a raw review without a request member,
// in serde's words, as Kubewarden answers it.
var ErrNoRawRequest = errors.New("missing field `request`")

// DecodeRawReview decodes the body of a raw review, {"request": <any JSON
// value>}, with encoding/json's meaning and errors: a request of null is a
// request, a review without one is ErrNoRawRequest. Raw shares body's
// memory: body must not change while the RawRequest is in use.
func DecodeRawReview(body []byte) (*RawRequest, error) {
	if r, ok := decodeRawReviewFast(body); ok {
		return r, nil
	}
	return decodeRawReviewSlow(body)
}

// decodeRawReviewSlow is DecodeRawReview with encoding/json.
func decodeRawReviewSlow(body []byte) (*RawRequest, error) {
	var in reviewIn
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	if len(in.Request) == 0 {
		return nil, ErrNoRawRequest
	}
	return DecodeRawRequest(in.Request), nil
}

// DecodeRawRequest reads the uid of a raw request, any JSON value: an
// object's string uid, else "".
func DecodeRawRequest(raw json.RawMessage) *RawRequest {
	var withUID struct {
		UID string `json:"uid"`
	}
	_ = json.Unmarshal(raw, &withUID) // the uid is optional; any JSON value is a valid raw request
	return &RawRequest{UID: withUID.UID, Raw: raw}
}

// Response is an AdmissionResponse.
type Response struct {
	UID              string            `json:"uid"`
	Allowed          bool              `json:"allowed"`
	PatchType        string            `json:"patchType,omitempty"`
	Patch            []byte            `json:"patch,omitempty"` // base64 on the wire
	Status           *Status           `json:"status,omitempty"`
	AuditAnnotations map[string]string `json:"auditAnnotations,omitempty"`
	Warnings         []string          `json:"warnings,omitempty"`
}

// PatchTypeJSONPatch is the only patch type Kubernetes accepts.
const PatchTypeJSONPatch = "JSONPatch"

// Status is the metav1.Status subset an AdmissionResponse carries.
type Status struct {
	Status  string         `json:"status,omitempty"`
	Message string         `json:"message,omitempty"`
	Reason  string         `json:"reason,omitempty"`
	Details *StatusDetails `json:"details,omitempty"`
	Code    int32          `json:"code,omitempty"`
}

// StatusDetails carries the causes of a rejection.
type StatusDetails struct {
	Name   string  `json:"name,omitempty"`
	Group  string  `json:"group,omitempty"`
	Kind   string  `json:"kind,omitempty"`
	UID    string  `json:"uid,omitempty"`
	Causes []Cause `json:"causes,omitempty"`
}

// Cause is one metav1.StatusCause.
type Cause struct {
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Field   string `json:"field,omitempty"`
}

// Review is the AdmissionReview Warden writes back.
type Review struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Response   *Response `json:"response"`
}

// NewReview wraps a response in an admission.k8s.io/v1 AdmissionReview.
func NewReview(r *Response) *Review {
	return &Review{APIVersion: APIVersion, Kind: Kind, Response: r}
}

// Marshal encodes v as JSON as Kubewarden (serde_json) writes it: <, > and
// & as they are, where encoding/json escapes them for HTML. Messages such
// as "conflicts with an existing ingress <foo.bar.com>" then read the same.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
