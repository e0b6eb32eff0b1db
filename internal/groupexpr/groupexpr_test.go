package groupexpr

import (
	"reflect"
	"strings"
	"testing"
)

func TestEval(t *testing.T) {
	members := []string{"a", "b", "c"}
	tests := []struct {
		expr    string
		answers map[string]bool
		want    bool
		called  []string // in call order: proves laziness
	}{
		{"a()", map[string]bool{"a": true}, true, []string{"a"}},
		{"a() && b()", map[string]bool{"a": false, "b": true}, false, []string{"a"}},
		{"a() && b()", map[string]bool{"a": true, "b": false}, false, []string{"a", "b"}},
		{"a() || b()", map[string]bool{"a": true, "b": false}, true, []string{"a"}},
		{"a() || (b() && !c())", map[string]bool{"a": false, "b": true, "c": false}, true, []string{"a", "b", "c"}},
		{"a() || (b() && !c())", map[string]bool{"a": false, "b": false, "c": false}, false, []string{"a", "b"}},
		{"a() && a()", map[string]bool{"a": true}, true, []string{"a"}},
		{"!a() ? b() : c()", map[string]bool{"a": true, "b": false, "c": true}, true, []string{"a", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			e, err := Compile(tt.expr, members)
			if err != nil {
				t.Fatal(err)
			}
			var called []string
			got, err := e.Eval(func(name string) bool {
				called = append(called, name)
				return tt.answers[name]
			})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || !reflect.DeepEqual(called, tt.called) {
				t.Errorf("got %v calling %v, want %v calling %v", got, called, tt.want, tt.called)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		expr string
		want string
	}{
		{"a() && d()", "undeclared reference to 'd'"},
		{"a() &&", "Syntax error"},
		{"a(1)", "undeclared reference to 'a'"},
		{"a", "undeclared reference to 'a'"},
		{"'yes'", "must evaluate to a bool, not string"},
		{"  ", "the expression is empty"},
		{"[1, 2].all(x, a())", "undeclared reference to 'all'"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			_, err := Compile(tt.expr, []string{"a", "b"})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestCompileErrorHasPosition(t *testing.T) {
	_, err := Compile("a() &&\n  d()", []string{"a"})
	if err == nil || !strings.Contains(err.Error(), "<input>:2:4") {
		t.Fatalf("got %v, want the position of d", err)
	}
}
