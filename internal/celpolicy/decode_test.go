package celpolicy

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// native converts a decoded value to the Go value encoding/json gives for
// any, through the CEL interfaces expressions use.
func native(t testing.TB, v ref.Val) any {
	t.Helper()
	switch v := v.(type) {
	case traits.Mapper:
		out := map[string]any{}
		for it := v.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			out[string(k.(types.String))] = native(t, v.Get(k))
		}
		if n := int(v.Size().(types.Int)); n != len(out) {
			t.Fatalf("map of size %d iterates %d keys", n, len(out))
		}
		return out
	case traits.Lister:
		out := make([]any, int(v.Size().(types.Int)))
		for i := range out {
			out[i] = native(t, v.Get(types.Int(i)))
		}
		return out
	case types.String:
		return string(v)
	case types.Double:
		return float64(v)
	case types.Bool:
		return bool(v)
	case types.Null:
		return nil
	}
	t.Fatalf("unexpected value %T %v", v, v)
	return nil
}

// same compares decoded JSON values; doubles bit for bit (-0 is not 0), a
// nil map as an empty one.
func same(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			w, ok := b[k]
			if !ok || !same(v, w) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !same(a[i], b[i]) {
				return false
			}
		}
		return true
	case float64:
		b, ok := b.(float64)
		return ok && math.Float64bits(a) == math.Float64bits(b)
	}
	return a == b
}

var decodeSeeds = []string{
	`{"a":1,"b":[true,false,null,"x",-0,0.5,1e3,-12345678901234567890]}`,
	`  {"k":"v"}  `,
	`"\u00e9\ud83d\ude00\ud800x\udc00\\\/\b\f\n\r\t\""`,
	"\"caf\xc3\xa9 \xff\xfe end\"",
	`{"a":1,"a":2,"b":{},"b":[]}`,
	`{"K":1,"k":2}`,
	`[1e400]`, `[1e-400]`, `[-0]`, `[01]`, `[1.]`, `{"a" 1}`, `[1,]`, `{,}`, `nul`, `"\x"`, "\"\x01\"",
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	`{"a":{"b":{"c":[{"d":"e"},{"d":"f","d":"g"}]}}}`,
	`{"0":0,"1":1,"2":2,"3":3,"4":4,"5":5,"6":6,"7":7,"8":8,"9":9,"10":10,"11":11,"12":12,"13":13,"14":14,"15":15,"16":16,"5":"five"}`,
	manyKeys(40, true), manyKeys(40, false),
}

// manyKeys is an object of n members, with a repeated key or not.
func manyKeys(n int, repeat bool) string {
	members := make([]string, n)
	for i := range members {
		members[i] = fmt.Sprintf(`"k%d":%d`, i, i)
	}
	if repeat {
		members[n-1] = `"k7":"again"`
	}
	return "{" + strings.Join(members, ",") + "}"
}

// FuzzDecode checks the fast decoder against encoding/json: it takes what
// encoding/json decodes into any, refuses what it does not, and gives the
// same values.
func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	if b, err := os.ReadFile("../../testdata/cel/pod-create.json"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want any
		stdErr := json.Unmarshal(data, &want)
		var d document
		ok := d.parse(string(data))
		if ok != (stdErr == nil) {
			t.Fatalf("parse = %v, encoding/json error = %v", ok, stdErr)
		}
		if !ok {
			return
		}
		if got := native(t, d.value(0)); !same(got, want) {
			t.Fatalf("decoded %#v, encoding/json %#v", got, want)
		}
	})
}

// FuzzRequest checks that a request the fast path takes decodes on
// cel-policy's path to the same object, oldObject and request.
func FuzzRequest(f *testing.F) {
	for _, s := range []string{
		`{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"userInfo":{"username":"a","groups":["g",null],"extra":{"x":["y"]}},"object":{"a":1},"oldObject":null,"dryRun":true}`,
		`{"object":null}`, `{"object":{},"oldObject":{"b":[]}}`, `{"Object":{}}`, `{"object":{},"UID":1}`,
		`{"uid":1,"object":{}}`, `{"kind":{"Group":1},"object":{}}`, `{"userInfo":{"groups":[1]},"object":{}}`,
		`{"dryRun":"yes","object":{}}`, `{"object":[]}`, `{"object":{},"oldObject":3}`, `{"object":{},"object":{"x":1}}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d document
		var fast input
		if !d.parse(string(data)) || !fast.fast(&d) {
			return
		}
		var slow input
		if rej, err := slow.slow(data, json.RawMessage(`{}`)); rej != nil || err != nil {
			t.Fatalf("the fast path took a request cel-policy answers with %+v, %v", rej, err)
		}
		for _, v := range []struct {
			name       string
			fast, slow any
		}{
			{"request", fast.request, slow.request},
			{"object", fast.object, slow.object},
			{"oldObject", fast.oldObject, slow.oldObject},
		} {
			want := v.slow
			if m, ok := want.(map[string]any); ok && m == nil {
				want = map[string]any{}
			}
			if got := native(t, v.fast.(ref.Val)); !same(got, want) {
				t.Fatalf("%s: fast %#v, cel-policy's %#v", v.name, got, want)
			}
		}
	})
}
