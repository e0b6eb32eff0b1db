package admission

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/wardenhq/warden/internal/jsontape"
)

// The fast decoder reads an AdmissionReview in one pass (jsontape) where
// encoding/json would scan the body four times: twice for the review and
// twice for the request. It takes only reviews that encoding/json decodes
// without error into the same Request, and leaves everything else (errors,
// repeated keys, keys that differ from a field name only in case, fields of
// the wrong JSON type) to encoding/json, so that the answers and the error
// messages stay encoding/json's.

// tapes reuses tapes between requests; a Request keeps nothing of its tape.
var tapes = sync.Pool{New: func() any { return new(jsontape.Tape) }}

// JSON types of the decoded fields, by tape node kind; 0 accepts any value.
// The request's type is checked on its own, as the object it is.
var (
	reviewFields  = fieldsOf(map[string]byte{"request": 0})
	requestFields = fieldsOf(map[string]byte{
		"uid": '"', "kind": '{', "requestKind": '{', "name": '"', "namespace": '"',
		"operation": '"', "object": 0, "oldObject": 0,
		// Not decoded, but read for the span (Request.Resource).
		"resource": '{', "subResource": '"',
	})
	gvkFields = fieldsOf(map[string]byte{"group": '"', "version": '"', "kind": '"'})
	gvrFields = fieldsOf(map[string]byte{"group": '"', "version": '"', "resource": '"'})
	// nestedFields are the fields of the objects among requestFields.
	nestedFields = map[string]fieldSet{"kind": gvkFields, "requestKind": gvkFields, "resource": gvrFields}
	// rawRequestFields are those of a raw request, when it is an object.
	rawRequestFields = fieldsOf(map[string]byte{"uid": '"'})
)

// fieldSet is the fields of an object: their JSON types by name, and the
// names in a slice, which the case-insensitive match that encoding/json
// makes walks faster than the map.
type fieldSet struct {
	kinds map[string]byte
	names []string
}

func fieldsOf(kinds map[string]byte) fieldSet {
	return fieldSet{kinds: kinds, names: slices.Sorted(maps.Keys(kinds))}
}

// decodeReviewFast decodes body when it is a review the fast decoder takes.
func decodeReviewFast(body []byte) (*Request, bool) {
	t := tapes.Get().(*jsontape.Tape)
	// The Request's strings are slices of the text, so they share body's
	// memory like its raw fields: DecodeReview's callers leave body alone.
	// The Request keeps the tape (see Parsed).
	r := &Request{tape: t}
	if !t.Parse(unsafe.String(unsafe.SliceData(body), len(body))) || !typedObject(t, 0, reviewFields) {
		r.Release()
		return nil, false
	}
	req := t.Member(0, "request")
	if req < 0 || t.Nodes[req].Kind != '{' || !typedObject(t, req, requestFields) {
		r.Release()
		return nil, false // no request, or null: encoding/json's error
	}
	r.Raw, r.node = raw(t, body, req), req
	end := t.Nodes[req].Next
	for k := req + 1; k < end; k = t.Nodes[k+1].Next {
		v := k + 1
		if t.Nodes[v].Kind == 'n' {
			switch t.Str(k) {
			case "object":
				r.Object = raw(t, body, v)
			case "oldObject":
				r.OldObject = raw(t, body, v)
			}
			continue // encoding/json leaves other fields unset for null
		}
		switch t.Str(k) {
		case "uid":
			r.UID = t.Str(v)
		case "kind":
			r.Kind = gvk(t, v)
		case "requestKind":
			rk := gvk(t, v)
			r.RequestKind = &rk
		case "name":
			r.Name = t.Str(v)
		case "namespace":
			r.Namespace = t.Str(v)
		case "operation":
			r.Operation = t.Str(v)
		case "object":
			r.Object = raw(t, body, v)
		case "oldObject":
			r.OldObject = raw(t, body, v)
		}
	}
	return r, true
}

// raw returns the text of the value at node i as a slice of body.
func raw(t *jsontape.Tape, body []byte, i int32) []byte {
	n := t.Nodes[i]
	return body[n.Start:n.End:n.End]
}

func gvk(t *jsontape.Tape, i int32) GroupVersionKind {
	var g GroupVersionKind
	g.Group, g.Version, g.Kind = groupVersion(t, i, "kind")
	return g
}

// resourceParsed is Request.Resource of the request at node req of t, a
// request the fast decoder took: the fields have their types, or are null.
func resourceParsed(t *jsontape.Tape, req int32) (resource GroupVersionResource, subResource string) {
	if i := t.Member(req, "resource"); i >= 0 && t.Nodes[i].Kind == '{' {
		resource.Group, resource.Version, resource.Resource = groupVersion(t, i, "resource")
	}
	if i := t.Member(req, "subResource"); i >= 0 && t.Nodes[i].Kind == '"' {
		subResource = t.Str(i)
	}
	return resource, subResource
}

// groupVersion returns the string members group, version and name of the
// object at node i, "" for those absent or null.
func groupVersion(t *jsontape.Tape, i int32, name string) (group, version, named string) {
	end := t.Nodes[i].Next
	for k := i + 1; k < end; k = t.Nodes[k+1].Next {
		if t.Nodes[k+1].Kind == 'n' {
			continue
		}
		switch t.Str(k) {
		case "group":
			group = t.Str(k + 1)
		case "version":
			version = t.Str(k + 1)
		case name:
			named = t.Str(k + 1)
		}
	}
	return group, version, named
}

// typedObject reports whether node i is an object without repeated keys
// whose members named in fields have the field's JSON type or null, with no
// key that matches a field name only in another case (encoding/json would
// take it for the field); objects named in fields are checked against
// their nestedFields.
func typedObject(t *jsontape.Tape, i int32, fields fieldSet) bool {
	if t.Nodes[i].Kind != '{' || !t.Unique(i) {
		return false
	}
	end := t.Nodes[i].Next
	for k := i + 1; k < end; k = t.Nodes[k+1].Next {
		key, v := t.Str(k), k+1
		want, ok := fields.kinds[key]
		if !ok {
			for _, name := range fields.names {
				if strings.EqualFold(key, name) {
					return false
				}
			}
			continue
		}
		switch kind := t.Nodes[v].Kind; {
		case kind == 'n' || want == 0:
		case kind != want:
			return false
		case want == '{' && !typedObject(t, v, nestedFields[key]):
			return false
		}
	}
	return true
}

// decodeRawReviewFast decodes body when it is a raw review the fast decoder
// takes: the review and, when the request is an object, the request without
// repeated keys or keys that differ from "request" or "uid" only in case,
// and a uid that is a string or null.
func decodeRawReviewFast(body []byte) (*RawRequest, bool) {
	t := tapes.Get().(*jsontape.Tape)
	r := &RawRequest{tape: t} // the RawRequest keeps the tape (see Parsed)
	if !t.Parse(unsafe.String(unsafe.SliceData(body), len(body))) || !typedObject(t, 0, reviewFields) {
		r.Release()
		return nil, false
	}
	req := t.Member(0, "request")
	if req < 0 || t.Nodes[req].Kind == '{' && !typedObject(t, req, rawRequestFields) {
		r.Release()
		return nil, false // no request (encoding/json's error), or an unusual uid
	}
	r.Raw, r.node = raw(t, body, req), req
	if t.Nodes[req].Kind == '{' {
		if uid := t.Member(req, "uid"); uid >= 0 && t.Nodes[uid].Kind == '"' {
			r.UID = t.Str(uid)
		}
	}
	return r, true
}
