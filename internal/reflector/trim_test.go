package reflector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"
)

// trimmedByMaps is Trimmed the plain way, as it was written before the
// trimmer: decode the object as client-go decodes an unstructured object,
// Trim it, json.Marshal it. The trimmer must write the same bytes.
func trimmedByMaps(raw []byte, typ metav1.TypeMeta) (Object, error) {
	var obj map[string]any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &obj); err != nil {
		return Object{}, err
	}
	if obj == nil {
		return Object{}, errors.New("null")
	}
	if _, ok := obj["apiVersion"]; !ok && typ.APIVersion != "" {
		obj["apiVersion"] = typ.APIVersion
	}
	if _, ok := obj["kind"]; !ok && typ.Kind != "" {
		obj["kind"] = typ.Kind
	}
	Trim(obj)
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	namespace, _ := md["namespace"].(string)
	if name == "" {
		return Object{}, errors.New("no name")
	}
	b, err := json.Marshal(obj)
	return Object{Name: name, Namespace: namespace, JSON: b}, err
}

// trimSeeds are objects that take every path of the trimmer.
var trimSeeds = []string{
	`{"metadata":{"name":"web","namespace":"b","managedFields":[{"manager":"kubectl"}],` +
		`"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}","note":"kept"}},"spec":{"big":1234567890123456789,"ratio":0.10}}`,
	// Escapes, HTML characters, control characters, non-ASCII, U+2028.
	`{"metadata":{"name":"a\u0041\"\\\/","labels":{"x<y":"a&b>c","t":"\t\n\u0001\b\f","é":"ü\u2028 \u2029 😀"}}}`,
	// Repeated keys: the last wins, whatever its type.
	`{"metadata":{"name":"first","name":"second"},"a":1,"a":{"b":2},"metadata":{"name":"third","namespace":1}}`,
	`{"metadata":{"name":"n","name":5}}`,
	// Numbers: int64, beyond it, floats, exponents, negative zero.
	`{"metadata":{"name":"n"},"n":[0,-0,1e5,1E+2,-12.5e-10,9223372036854775807,9223372036854775808,-9223372036854775809,1.0,0.000001,1e21,123456789012345678901234567890]}`,
	// Metadata and annotations of other types; empty objects and arrays.
	`{"metadata":{"name":"n","annotations":null,"managedFields":null},"spec":{},"list":[],"null":null,"t":true,"f":false}`,
	`{"metadata":{"name":"n","annotations":["kubectl.kubernetes.io/last-applied-configuration"]}}`,
	`{"metadata":"n"}`,
	`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"}}`,
	`{"apiVersion":3,"metadata":{"name":"d"}}`,
	// Nested metadata is not trimmed.
	`{"metadata":{"name":"n"},"spec":{"template":{"metadata":{"managedFields":[1],"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"x"}}}}}`,
	// Invalid UTF-8 in a key and a value.
	"{\"metadata\":{\"name\":\"n\xff\"},\"k\xfe\":\"v\xc3\"}",
	// Not objects, or not JSON.
	`null`, `[1]`, `"s"`, `{"metadata":`, `{"metadata":{}}`, `{} {}`, ``,
}

func FuzzTrimmer(f *testing.F) {
	for _, s := range trimSeeds {
		f.Add([]byte(s), "v1", "Pod")
		f.Add([]byte(s), "", "")
	}
	f.Fuzz(func(t *testing.T, raw []byte, apiVersion, kind string) {
		typ := metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
		want, wantErr := trimmedByMaps(raw, typ)
		got, err := Trimmed(raw, typ)
		switch {
		case (err == nil) != (wantErr == nil):
			t.Fatalf("Trimmed(%q): %v; decoding it into maps: %v", raw, err, wantErr)
		case err != nil:
			if !strings.HasPrefix(err.Error(), "reading an object") {
				t.Errorf("Trimmed(%q): %v, want an error that starts with \"reading an object\"", raw, err)
			}
		case got.Name != want.Name || got.Namespace != want.Namespace || !bytes.Equal(got.JSON, want.JSON):
			t.Fatalf("Trimmed(%q)\n= %q %q %s\nwant %q %q %s", raw, got.Name, got.Namespace, got.JSON, want.Name, want.Namespace, want.JSON)
		}
	})
}

// testPage is a page of a list of n objects, with the fields of an API
// server's answer.
func testPage(n int, cont string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":%q},"items":[`, cont)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"metadata":{"name":"pod-%d","namespace":"ns-%d","uid":"u-%d","resourceVersion":"%d",`+
			`"managedFields":[{"manager":"kubelet","operation":"Update","fieldsV1":{"f:status":{}}}],"labels":{"app":"web"}},`+
			`"spec":{"containers":[{"name":"c","image":"nginx:1.27","ports":[{"containerPort":80}]}]},"status":{"phase":"Pending"}}`, i, i%3, i, 100+i)
	}
	b.WriteString(`]}`)
	return b.String()
}

func TestTrimmerPage(t *testing.T) {
	var w trimmer
	body := testPage(5, "next")
	p, err := w.page(body)
	if err != nil {
		t.Fatal(err)
	}
	if p.itemType != (metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}) || p.resourceVersion != "42" || p.cont != "next" || len(p.items) != 5 {
		t.Fatalf("page = %+v", p)
	}
	var items struct{ Items []json.RawMessage }
	if err := json.Unmarshal([]byte(body), &items); err != nil {
		t.Fatal(err)
	}
	var got []Object
	for _, i := range p.items {
		o, err := w.object(i, p.itemType)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, o)
	}
	// Each object's JSON stays as written until reset, the others' too.
	for i, o := range got {
		want, err := trimmedByMaps(items.Items[i], p.itemType)
		if err != nil {
			t.Fatal(err)
		}
		if o.Name != want.Name || o.Namespace != want.Namespace || !bytes.Equal(o.JSON, want.JSON) {
			t.Errorf("item %d = %s %s %s, want %s %s %s", i, o.Name, o.Namespace, o.JSON, want.Name, want.Namespace, want.JSON)
		}
	}

	for _, bad := range []string{`[]`, `{"items":{}}`, `{"items":[1]`} {
		if _, err := w.page(bad); err == nil {
			t.Errorf("page(%s): no error", bad)
		}
	}
	if p, err := w.page(`{"kind":"PodList","items":null}`); err != nil || len(p.items) != 0 {
		t.Errorf("a page without items = %+v, %v", p, err)
	}
}

// A trimmer that has trimmed a page once trims the next ones without
// allocating: what a list holds is its pages' text and the trimmed JSON,
// not Go values of each object.
func TestTrimmerPageAllocations(t *testing.T) {
	var w trimmer
	body := testPage(200, "")
	trim := func() {
		p, err := w.page(body)
		if err != nil {
			t.Fatal(err)
		}
		w.reset()
		for _, i := range p.items {
			if _, err := w.object(i, p.itemType); err != nil {
				t.Fatal(err)
			}
		}
	}
	trim()
	if n := testing.AllocsPerRun(10, trim); n != 0 {
		t.Errorf("trimming a page of 200 objects again allocated %v times, want 0", n)
	}
}
