package hostcap

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// selectObjects picks, of a reflector's objects, those the selectors
// match, and applies the field masks, as the API server would answer a
// list. A field selector is evaluated on the fields it names, by path, so
// any field works where the API server knows a few per kind (and refuses
// the others). Without masks the objects picked are returned as they are;
// only an object a mask prunes is written again.
func selectObjects(objects []json.RawMessage, labelSelector, fieldSelector *string, m mask) ([]json.RawMessage, error) {
	ls, fs := labels.Everything(), fields.Everything()
	var err error
	if labelSelector != nil {
		if ls, err = labels.Parse(*labelSelector); err != nil {
			return nil, fmt.Errorf("invalid label selector %q: %w", *labelSelector, err)
		}
	}
	if fieldSelector != nil {
		if fs, err = fields.ParseSelector(*fieldSelector); err != nil {
			return nil, fmt.Errorf("invalid field selector %q: %w", *fieldSelector, err)
		}
	}
	if ls.Empty() && fs.Empty() && len(m) == 0 {
		return objects, nil
	}
	items := make([]json.RawMessage, 0, len(objects))
	for _, raw := range objects {
		var obj map[string]any
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, fmt.Errorf("reading a reflected object: %w", err)
		}
		if !ls.Matches(objectLabels(obj)) || !fs.Matches(objectFields(obj, fs)) {
			continue
		}
		if len(m) == 0 {
			items = append(items, raw)
			continue
		}
		m.prune(obj)
		pruned, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		items = append(items, pruned)
	}
	return items, nil
}

func objectLabels(obj map[string]any) labels.Set {
	md, _ := obj["metadata"].(map[string]any)
	l, _ := md["labels"].(map[string]any)
	set := make(labels.Set, len(l))
	for k, v := range l {
		if s, ok := v.(string); ok {
			set[k] = s
		}
	}
	return set
}

// objectFields returns the values of the fields fs names: a string as it
// is, another value as JSON writes it, a missing field as "".
func objectFields(obj map[string]any, fs fields.Selector) fields.Set {
	set := fields.Set{}
	for _, r := range fs.Requirements() {
		var v any = obj
		for _, part := range strings.Split(r.Field, ".") {
			m, ok := v.(map[string]any)
			if !ok {
				v = nil
				break
			}
			v = m[part]
		}
		switch v := v.(type) {
		case nil:
			set[r.Field] = ""
		case string:
			set[r.Field] = v
		default:
			b, _ := json.Marshal(v)
			set[r.Field] = string(b)
		}
	}
	return set
}
