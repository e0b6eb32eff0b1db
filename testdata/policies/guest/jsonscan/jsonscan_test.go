package jsonscan

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

const doc = `{"request": {"uid": "x", "object": {"a": [1, {"}": "]"}], "metadata": {"name": "p\"q", "labels": {"app": "web", "tier": "fe"}}}},
 "settings": {"denied_labels": ["tier", "x"], "n": -1.5e3, "t": true}}`

func TestGet(t *testing.T) {
	tests := []struct {
		path []string
		want string
	}{
		{[]string{"request", "uid"}, `"x"`},
		{[]string{"request", "object", "metadata", "labels"}, `{"app": "web", "tier": "fe"}`},
		{[]string{"request", "object", "metadata", "name"}, `"p\"q"`},
		{[]string{"settings", "denied_labels"}, `["tier", "x"]`},
		{[]string{"settings", "n"}, `-1.5e3`},
		{[]string{"settings", "t"}, `true`},
		{[]string{"settings", "missing"}, ``},
		{[]string{"request", "uid", "deeper"}, ``},
		{nil, doc},
	}
	for _, tt := range tests {
		if got := string(Get([]byte(doc), tt.path...)); got != tt.want {
			t.Errorf("Get(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
}

func TestKeysAndStrings(t *testing.T) {
	var keys []string
	Keys(Get([]byte(doc), "request", "object", "metadata", "labels"), func(k []byte) bool {
		keys = append(keys, string(k))
		return true
	})
	if !reflect.DeepEqual(keys, []string{"app", "tier"}) {
		t.Errorf("keys = %q", keys)
	}
	var strs []string
	if !Strings(Get([]byte(doc), "settings", "denied_labels"), func(s []byte) { strs = append(strs, string(s)) }) {
		t.Error("not an array of strings")
	}
	if !reflect.DeepEqual(strs, []string{"tier", "x"}) {
		t.Errorf("strings = %q", strs)
	}
	for _, bad := range []string{`[1]`, `{"a":1}`, `["a" "b"]`, `["a",`} {
		if Strings([]byte(bad), func([]byte) {}) {
			t.Errorf("Strings(%s) = true", bad)
		}
	}
	if !Strings([]byte(` [ ] `), func([]byte) { t.Error("called") }) {
		t.Error("empty array refused")
	}
}

// firstValues decodes the top-level members of an object, keeping the first
// of duplicate keys as Get does (encoding/json keeps the last).
func firstValues(b []byte) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		return nil, false
	}
	first := map[string]json.RawMessage{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		if _, seen := first[k.(string)]; !seen {
			first[k.(string)] = raw
		}
	}
	return first, true
}

// FuzzGet checks that Get never panics and finds what encoding/json finds
// for top-level keys.
func FuzzGet(f *testing.F) {
	f.Add([]byte(doc), "settings")
	f.Add([]byte(`{"a":{"b":[1,2,{"c":"d"}]},"e":null}`), "e")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		got := Get(b, key)
		m, ok := firstValues(b)
		if !ok || !json.Valid([]byte(`"`+key+`"`)) {
			return
		}
		want, ok := m[key]
		if ok && got == nil {
			t.Fatalf("Get(%s, %q) missed %s", b, key, want)
		}
		if ok {
			var a, w any
			if json.Unmarshal(got, &a) != nil || json.Unmarshal(want, &w) != nil || !reflect.DeepEqual(a, w) {
				t.Fatalf("Get(%s, %q) = %s, want %s", b, key, got, want)
			}
		}
	})
}
