package jsontape

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/testkit"
)

// decodes reports whether encoding/json decodes text into any.
func decodes(text string) bool {
	var v any
	return json.Unmarshal([]byte(text), &v) == nil
}

func TestParseAcceptsWhatEncodingJSONDecodes(t *testing.T) {
	tests := []string{
		`{}`, `[]`, `""`, `0`, `-0.5e+3`, `true`, `null`, ` {"a" : [1, "x", {"b": null}] } `,
		`"\u00e9\ud83d\ude00\n"`, `{"a":1,"a":2}`,
		``, `{`, `{"a"}`, `[1,]`, `01`, `1.`, `.5`, `"\x"`, `"` + "\x01" + `"`, `tru`, `{} {}`,
		`1e400`, strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	}
	for _, text := range tests {
		var tape Tape
		if got, want := tape.Parse(text), decodes(text); got != want {
			t.Errorf("Parse(%.40q) = %v, encoding/json decodes it: %v", text, got, want)
		}
	}
}

// TestStringScan puts each kind of byte a string scan stops at at every
// offset of the 8-byte words the scan reads.
func TestStringScan(t *testing.T) {
	for _, special := range []string{`"`, `\\`, `\n`, `\u00e9`, "\x01", "\x1f", "é", "\xff", "\x7f", " "} {
		for offset := 0; offset < 20; offset++ {
			for tail := 0; tail < 10; tail++ {
				text := `"` + strings.Repeat("a", offset) + special + strings.Repeat("b", tail) + `"`
				var tape Tape
				ok := tape.Parse(text)
				if ok != decodes(text) {
					t.Fatalf("Parse(%q) = %v, encoding/json decodes it: %v", text, ok, !ok)
				}
				var want string
				if ok && (json.Unmarshal([]byte(text), &want) != nil || tape.Str(0) != want) {
					t.Fatalf("Str of %q = %q, encoding/json: %q", text, tape.Str(0), want)
				}
			}
		}
	}
}

func TestReaders(t *testing.T) {
	var tape Tape
	if !tape.Parse(`{"s":"a\tb","n":-12.5,"o":{"k":[1,2]},"r":1,"r":2}`) {
		t.Fatal("Parse failed")
	}
	if got := tape.Str(tape.Member(0, "s")); got != "a\tb" {
		t.Errorf(`Str(s) = %q`, got)
	}
	if got := tape.Number(tape.Member(0, "n")); got != -12.5 {
		t.Errorf("Number(n) = %v", got)
	}
	o := tape.Member(0, "o")
	if got := tape.Raw(o); got != `{"k":[1,2]}` {
		t.Errorf("Raw(o) = %s", got)
	}
	if k := tape.Member(o, "k"); tape.Nodes[k].Count != 2 {
		t.Errorf("k has %d elements, want 2", tape.Nodes[k].Count)
	}
	if tape.Member(0, "missing") != -1 {
		t.Error("Member(missing) found something")
	}
	if !tape.Unique(o) || tape.Unique(0) {
		t.Errorf("Unique(o) = %v, Unique(root) = %v; want true, false", tape.Unique(o), tape.Unique(0))
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`{"a":[1,2.5e3,"\u00e9"],"b":null}`)
	f.Add(`"\ud800x"`)
	f.Add(`{"ab":1,"ba":2,"a\u0062":3}`)
	f.Add(`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"a":18}`)
	f.Fuzz(func(t *testing.T, text string) {
		var tape Tape
		ok := tape.Parse(text)
		if ok != decodes(text) {
			t.Fatalf("Parse = %v, encoding/json decodes it: %v", ok, !ok)
		}
		if !ok {
			return
		}
		for i := range tape.Nodes {
			switch n := tape.Nodes[i]; n.Kind {
			case '{':
				keys := map[string]int32{} // the last value of each key
				for k := int32(i) + 1; k < n.Next; k = tape.Nodes[k+1].Next {
					keys[tape.Str(k)] = k + 1
				}
				for key, v := range keys {
					if got := tape.LastMember(int32(i), key); got != v {
						t.Fatalf("LastMember(%d, %q) = %d, want %d", i, key, got, v)
					}
				}
				if tape.LastMember(int32(i), "\x00missing") != -1 {
					t.Fatalf("LastMember(%d) found a missing key", i)
				}
				if want := len(keys) == int(n.Count); tape.Unique(int32(i)) != want {
					t.Fatalf("Unique(%d) = %v, want %v", i, !want, want)
				}
			case '"':
				var want string
				if err := json.Unmarshal([]byte(tape.Raw(int32(i))), &want); err != nil || want != tape.Str(int32(i)) {
					t.Fatalf("Str(%d) = %q, encoding/json: %q (%v)", i, tape.Str(int32(i)), want, err)
				}
			case '0':
				var want float64
				if err := json.Unmarshal([]byte(tape.Raw(int32(i))), &want); err != nil ||
					math.Float64bits(want) != math.Float64bits(tape.Number(int32(i))) {
					t.Fatalf("Number(%d) = %v, encoding/json: %v (%v)", i, tape.Number(int32(i)), want, err)
				}
			}
		}
	})
}

// BenchmarkParse parses the 5 KB Pod CREATE request of the CEL benchmarks,
// compacted as the API server sends it, onto a reused tape.
func BenchmarkParse(b *testing.B) {
	text, err := os.ReadFile("../../testdata/cel/pod-create.json")
	if err != nil {
		b.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, text); err != nil {
		b.Fatal(err)
	}
	s := compact.String()
	var tape Tape
	b.SetBytes(int64(len(s)))
	b.ReportAllocs()
	cpu := testkit.CPUTime()
	for b.Loop() {
		if !tape.Parse(s) {
			b.Fatal("Parse failed")
		}
	}
	b.ReportMetric(float64(testkit.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
}
