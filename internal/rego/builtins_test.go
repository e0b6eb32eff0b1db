package rego

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

func TestNewBuiltins(t *testing.T) {
	tests := []struct {
		names []string
		want  string // in the error; empty: no error
	}{
		{names: []string{"sprintf", "units.parse_bytes", "time.now_ns", "regex.split", "json.patch", "rand.intn"}},
		{names: []string{"sprintf", "http.send"}, want: "http.send (refused: it makes network requests)"},
		{names: []string{"net.lookup_ip_addr"}, want: "net.lookup_ip_addr (refused"},
		{names: []string{"json.match_schema"}, want: "json.match_schema (refused"},
		{names: []string{"opa.runtime"}, want: "opa.runtime (refused"},
		{names: []string{"acme.lookup"}, want: "acme.lookup (unknown to OPA"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.names, ","), func(t *testing.T) {
			_, err := NewBuiltins(tt.names)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("error = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestCall(t *testing.T) {
	b, err := NewBuiltins([]string{"sprintf", "units.parse_bytes", "object.keys", "numbers.range", "concat"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, builtin string
		args          []string
		want          string // empty: undefined
	}{
		{name: "sprintf formats sets as OPA does", builtin: "sprintf", args: []string{`"%v"`, `[{"b", 1, "a"}]`}, want: `"{1, \"a\", \"b\"}"`},
		{name: "control characters are JSON-escaped", builtin: "concat", args: []string{`""`, `["a", "\u0001"]`}, want: `"a\u0001"`},
		{name: "a set result", builtin: "object.keys", args: []string{`{"x": 1, "y": {"z": set()}}`}, want: `{"x","y"}`},
		{name: "a builtin error is undefined", builtin: "units.parse_bytes", args: []string{`"lots"`}},
		{name: "units.parse_bytes", builtin: "units.parse_bytes", args: []string{`"1Ki"`}, want: `1024`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := make([][]byte, len(tt.args))
			for i, a := range tt.args {
				args[i] = []byte(a)
			}
			got, err := b.NewEval(context.Background()).Call(tt.builtin, args)
			if err != nil || string(got) != tt.want {
				t.Fatalf("Call = %s, %v; want %s", got, err, tt.want)
			}
		})
	}
	t.Run("a builtin that halts on cancellation", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := b.NewEval(ctx).Call("numbers.range", [][]byte{[]byte("1"), []byte("100000000")}); err == nil {
			t.Fatal("Call succeeded, want the cancellation")
		}
	})
}

func TestTimeIsFixedPerEvaluation(t *testing.T) {
	b, err := NewBuiltins([]string{"time.now_ns"})
	if err != nil {
		t.Fatal(err)
	}
	e := b.NewEval(context.Background())
	first, _ := e.Call("time.now_ns", nil)
	for range 3 {
		if again, _ := e.Call("time.now_ns", nil); string(again) != string(first) {
			t.Fatalf("time.now_ns = %s, then %s within one evaluation", first, again)
		}
	}
}

func TestApplyJSONPatch(t *testing.T) {
	got, err := ApplyJSONPatch([]byte(`{"metadata":{"labels":{"a":"1"}}}`),
		[]byte(`[{"op":"add","path":"/metadata/labels/b","value":"2"},{"op":"remove","path":"/metadata/labels/a"}]`))
	if err != nil || string(got) != `{"metadata":{"labels":{"b":"2"}}}` {
		t.Errorf("ApplyJSONPatch = %s, %v", got, err)
	}
	if _, err := ApplyJSONPatch([]byte(`{}`), []byte(`[{"op":"remove","path":"/missing"}]`)); err == nil {
		t.Error("a patch that does not apply succeeded")
	}
}

var hugeExponent = regexp.MustCompile(`[0-9.][eE][+-]?[0-9]{3,}`)

// FuzzParseValue checks parseValue against OPA's parser, and that
// appendValue writes what parseValue reads.
func FuzzParseValue(f *testing.F) {
	for _, s := range []string{`null`, `true`, `-1.5e3`, `"a\"\u00e9\n"`, `[1, [2, {}]]`, `{"a": {1, "b"}, 2: set()}`,
		`{{1}: [true]}`, `set()`, `{1, 2, 1}`, `"unterminated`, `[1,]`, `{1: 2, 3}`, "\"0\xd8\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseValue(b)
		if err != nil || hugeExponent.Match(b) { // comparing 1e999999999 takes forever
			return
		}
		if want, err := ast.ParseTerm(string(b)); err == nil && want.Value.Compare(v) != 0 {
			t.Fatalf("parseValue(%q) = %v, OPA reads %v", b, v, want.Value)
		}
		text, err := appendValue(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseValue(text)
		if err != nil || again.Compare(v) != 0 {
			t.Fatalf("parseValue(appendValue(%v)) = %v, %v", v, again, err)
		}
	})
}
