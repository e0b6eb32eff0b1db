package celpolicy

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unsafe"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"github.com/wardenhq/warden/internal/jsontape"
)

// input holds the values of one request: lazy CEL values from the fast
// decoder, or encoding/json's maps from the slow path, which cel-go adapts
// alike.
type input struct {
	request, object, oldObject any
}

// emptyObject is what cel-policy binds object and oldObject to when the
// request has them null (or has no oldObject): encoding/json leaves its map
// nil, which cel-go sees as an empty map, not null. It is immutable.
var emptyObject = types.NewRefValMap(types.DefaultTypeAdapter, map[ref.Val]ref.Val{})

// namespaceObject is cel-policy's namespaceObject: null for an object without
// a namespace; otherwise cel-policy reads the Namespace from the cluster, a
// host call Warden does not make yet, so using it fails the evaluation.
func (in *input) namespaceObject() ref.Val {
	ns := ""
	switch o := in.object.(type) {
	case *jsonObject:
		if meta, ok := o.Find(types.String("metadata")); ok {
			if meta, ok := meta.(*jsonObject); ok {
				v, _ := meta.Find(types.String("namespace"))
				s, _ := v.(types.String)
				ns = string(s)
			}
		}
	case map[string]any:
		meta, _ := o["metadata"].(map[string]any)
		ns, _ = meta["namespace"].(string)
	}
	if ns == "" {
		return types.NullValue
	}
	return types.NewErr("namespaceObject: reading Namespace %q needs the Kubernetes host capability (a context-aware host call), which Warden's native CEL runner does not support yet", ns)
}

// decode decodes a request as cel-policy does, on doc's tape when it can. A
// rejection is cel-policy's answer to a request that does not decode; an
// error is an evaluation that failed. The fast path takes every well-formed
// AdmissionRequest; anything unusual goes through encoding/json exactly as
// cel-policy does. The tape reads raw in place: the values share its memory.
func (in *input) decode(doc *document, raw, settings json.RawMessage) (*Result, error) {
	if doc.parse(unsafe.String(unsafe.SliceData(raw), len(raw))) && in.fast(doc) {
		return nil, nil
	}
	return in.slow(raw, settings)
}

// decodeParsed is decode of the request at node of t, a parse of the text
// the request is part of.
func (in *input) decodeParsed(doc *document, t *jsontape.Tape, node int32, settings json.RawMessage) (*Result, error) {
	doc.use(t, node)
	if in.fast(doc) {
		return nil, nil
	}
	return in.slow(json.RawMessage(t.Raw(node)), settings)
}

// JSON types of the fields of cel-policy's typed view of the request
// (policy-sdk-go's protocol.KubernetesAdmissionRequest), by tape node kind:
// null is always accepted, 0 accepts anything, 'b' a boolean, 's' a list of
// strings.
var (
	requestFields = fieldsOf(map[string]byte{
		"uid": '"', "kind": '{', "resource": '{', "subResource": '"',
		"requestKind": '{', "requestResource": '{', "requestSubResource": '"',
		"name": '"', "namespace": '"', "operation": '"',
		"userInfo": '{', "object": 0, "oldObject": 0, "dryRun": 'b', "options": 0,
	})
	gvkFields      = fieldsOf(map[string]byte{"group": '"', "version": '"', "kind": '"'})
	userInfoFields = fieldsOf(map[string]byte{"username": '"', "groups": 's', "extra": 0})
	// nestedFields are the fields of the objects of the typed view.
	nestedFields = map[string]fieldSet{
		"kind": gvkFields, "resource": gvkFields, "requestKind": gvkFields, "requestResource": gvkFields,
		"userInfo": userInfoFields,
	}
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

// fast takes the parsed request when encoding/json would decode it into
// cel-policy's typed request without error and with the same object and
// oldObject: every field of the typed view has its JSON type (or null), no
// key differs from a field name only in case (encoding/json would match it),
// object is an object or null, oldObject is absent, an object or null.
func (in *input) fast(d *document) bool {
	r := d.root
	if d.Nodes[r].Kind != '{' || !d.Unique(r) || !d.typed(r, requestFields) {
		return false
	}
	object, ok := d.objectOrEmpty(d.Member(r, varObject), false)
	if !ok {
		return false
	}
	oldObject, ok := d.objectOrEmpty(d.Member(r, varOldObject), true)
	if !ok {
		return false
	}
	in.request, in.object, in.oldObject = d.value(r), object, oldObject
	return true
}

// objectOrEmpty returns the object at node i, emptyObject for null.
func (d *document) objectOrEmpty(i int32, absentOK bool) (ref.Val, bool) {
	switch {
	case i < 0:
		return emptyObject, absentOK
	case d.Nodes[i].Kind == 'n':
		return emptyObject, true
	case d.Nodes[i].Kind == '{':
		return d.value(i), true
	}
	return nil, false
}

// typed reports whether the members of the object at node i that match
// fields (in any case) match exactly and have the field's JSON type or null.
func (d *document) typed(i int32, fields fieldSet) bool {
	end := d.Nodes[i].Next
	for k := i + 1; k < end; k = d.Nodes[k+1].Next {
		key, v := d.Str(k), d.Nodes[k+1]
		want, ok := fields.kinds[key]
		if !ok {
			for _, name := range fields.names {
				if strings.EqualFold(key, name) {
					return false
				}
			}
			continue
		}
		if v.Kind == 'n' || want == 0 {
			continue
		}
		switch want {
		case 'b':
			ok = v.Kind == 't' || v.Kind == 'f'
		case 's':
			ok = v.Kind == '['
			for e := k + 2; ok && e < v.Next; e = d.Nodes[e].Next {
				ok = d.Nodes[e].Kind == '"' || d.Nodes[e].Kind == 'n'
			}
		case '{':
			ok = v.Kind == '{' && d.Unique(k+1) && d.typed(k+1, nestedFields[key])
		default:
			ok = v.Kind == want
		}
		if !ok {
			return false
		}
	}
	return true
}

// slow decodes a request with encoding/json, step by step as cel-policy does,
// with its messages.
func (in *input) slow(raw, settings json.RawMessage) (*Result, error) {
	// cel-policy's typed view of the request; the names are its, they show
	// in encoding/json's errors.
	type GroupVersionKind struct {
		Group   string `json:"group"`
		Version string `json:"version"`
		Kind    string `json:"kind"`
	}
	type UserInfo struct {
		Username string          `json:"username"`
		Groups   []string        `json:"groups"`
		Extra    json.RawMessage `json:"extra,omitempty"`
	}
	type KubernetesAdmissionRequest struct {
		UID                string           `json:"uid"`
		Kind               GroupVersionKind `json:"kind"`
		Resource           GroupVersionKind `json:"resource"`
		SubResource        string           `json:"subResource"`
		RequestKind        GroupVersionKind `json:"requestKind"`
		RequestResource    GroupVersionKind `json:"requestResource"`
		RequestSubResource string           `json:"requestSubResource"`
		Name               string           `json:"name"`
		Namespace          string           `json:"namespace"`
		Operation          string           `json:"operation"`
		UserInfo           UserInfo         `json:"userInfo"`
		Object             json.RawMessage  `json:"object"`
		OldObject          json.RawMessage  `json:"oldObject"`
		DryRun             bool             `json:"dryRun"`
		Options            json.RawMessage  `json:"options"`
	}
	// The ValidationRequest cel-policy reads: settings decoded when the
	// policy was compiled, so only the request can fail here.
	var vr struct {
		Request json.RawMessage `json:"request"`
	}
	body := make([]byte, 0, len(raw)+len(settings)+26)
	body = append(append(append(append(append(body, `{"request":`...), raw...), `,"settings":`...), settings...), '}')
	if err := json.Unmarshal(body, &vr); err != nil {
		return &Result{Message: fmt.Sprintf("Error deserializing validation request: %v", err), Code: 400}, nil
	}
	var req KubernetesAdmissionRequest
	if err := json.Unmarshal(vr.Request, &req); err != nil {
		return &Result{Message: fmt.Sprintf("Error deserializing request: %v", err), Code: 400}, nil
	}
	var object, oldObject, request map[string]any
	if err := json.Unmarshal(req.Object, &object); err != nil {
		return nil, fmt.Errorf("cannot unmarshal request object %w", err)
	}
	if req.OldObject != nil {
		if err := json.Unmarshal(req.OldObject, &oldObject); err != nil {
			return nil, fmt.Errorf("cannot unmarshal request oldObject %w", err)
		}
	}
	if err := json.Unmarshal(vr.Request, &request); err != nil {
		return nil, fmt.Errorf("cannot unmarshal request %w", err)
	}
	in.request, in.object, in.oldObject = request, object, oldObject
	return nil, nil
}
