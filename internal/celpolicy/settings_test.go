package celpolicy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// invalid is cel-policy's message for settings with these problems.
func invalid(problems ...string) string {
	if len(problems) == 1 {
		return "The settings are invalid: 1 error occurred:\n\t* " + problems[0] + "\n\n"
	}
	return "The settings are invalid: " + string(rune('0'+len(problems))) + " errors occurred:\n\t* " +
		strings.Join(problems, "\n\t* ") + "\n\n"
}

func TestCompileSettings(t *testing.T) {
	tests := []struct {
		name     string
		settings string
		opts     []Option
		want     string // the whole message
		prefix   string // or its beginning
	}{
		{
			name:     "validations are required",
			settings: `{}`,
			want:     invalid("validations: Required value: validations must contain at least one item"),
		},
		{
			name:     "an unknown reason",
			settings: `{"validations":[{"expression":"true","reason":"Conflict"}]}`,
			want:     invalid(`validations[0].reason: Unsupported value: "Conflict"`),
		},
		{
			name:     "an empty expression",
			settings: `{"validations":[{"expression":"  "}]}`,
			want:     invalid("validations[0].expression: Required value: expression is not specified"),
		},
		{
			// The error points past the end of the 24 characters.
			name:     "a syntax error names the validation and carries the position",
			settings: `{"validations":[{"expression":"object.metadata.name == "}]}`,
			prefix:   "The settings are invalid: 1 error occurred:\n\t* validations[0].expression: Invalid value: \"object.metadata.name == \": ERROR: <input>:1:25: Syntax error:",
		},
		{
			name:     "a type error is found by the checker, with its position",
			settings: `{"validations":[{"expression":"true"},{"expression":"'abc' + 1 == 'b'"}]}`,
			want: invalid("validations[1].expression: Invalid value: \"'abc' + 1 == 'b'\": ERROR: <input>:1:7: found no matching overload for '_+_' applied to '(string, int)'\n" +
				" | 'abc' + 1 == 'b'\n | ......^:"),
		},
		{
			// object is dyn: the sum type-checks as dyn, which is not bool.
			name:     "an expression that is not a boolean",
			settings: `{"validations":[{"expression":"object.metadata.name + 1"}]}`,
			want:     invalid(`validations[0].expression: Invalid value: "object.metadata.name + 1": must evaluate to bool:`),
		},
		{
			name:     "a message expression that is not a string",
			settings: `{"validations":[{"expression":"true","messageExpression":"1 + 1"}]}`,
			want:     invalid(`validations[0].messageExpression: Invalid value: "1 + 1": must evaluate to string:`),
		},
		{
			name:     "a blank message expression",
			settings: `{"validations":[{"expression":"true","messageExpression":" "}]}`,
			want:     invalid(`validations[0].messageExpression: Invalid value: " ": must be non-empty if specified:`),
		},
		{
			name:     "a blank message",
			settings: `{"validations":[{"expression":"true","message":"  "}]}`,
			want:     invalid(`validations[0].message: Invalid value: "  ": message must be non-empty if specified:`),
		},
		{
			name:     "a message on two lines",
			settings: `{"validations":[{"expression":"true","message":"one\ntwo"}]}`,
			want:     invalid("validations[0].message: Invalid value: \"one\ntwo\": message must not contain line breaks:"),
		},
		{
			name:     "an unknown failure policy",
			settings: `{"failurePolicy":"Sometimes","validations":[{"expression":"true"}]}`,
			want:     invalid("failurePolicy: Required value: failurePolicy must be either 'Ignore' or 'Fail'"),
		},
		{
			name:     "variable names",
			settings: `{"variables":[{"name":" ","expression":"1"},{"name":"in","expression":"1"},{"name":"params","expression":"1"}],"validations":[{"expression":"true"}]}`,
			want: invalid("variables[0].name: Required value: name is not specified",
				`variables[1].name: Invalid value: "in": name is not a valid CEL identifier:`,
				`variables[2].name: Invalid value: "params": 'params' name is not allowed. It conflicts with 'params' from the policy paramaters configuration:`),
		},
		{
			name:     "a variable reads only the variables before it",
			settings: `{"variables":[{"name":"a","expression":"variables.b + 1"},{"name":"b","expression":"1"}],"validations":[{"expression":"variables.b == 1"}]}`,
			want: invalid("variables[0].expression: Invalid value: \"variables.b + 1\": ERROR: <input>:1:10: undefined field 'b'\n" +
				" | variables.b + 1\n | .........^:"),
		},
		{
			name:     "an undeclared variable",
			settings: `{"variables":[{"name":"a","expression":"1"}],"validations":[{"expression":"variables.nope == 1"}]}`,
			want: invalid("validations[0].expression: Invalid value: \"variables.nope == 1\": ERROR: <input>:1:10: undefined field 'nope'\n" +
				" | variables.nope == 1\n | .........^:"),
		},
		{
			name:     "every problem is listed",
			settings: `{"variables":[{"name":"1st","expression":""}],"validations":[{"expression":"true","reason":"Nope"}]}`,
			want: invalid(`variables[0].name: Invalid value: "1st": name is not a valid CEL identifier:`,
				"variables[0].expression: Required value: expression is not specified",
				`validations[0].reason: Unsupported value: "Nope"`),
		},
		{
			name:     "paramKind without kind",
			settings: `{"paramKind":{"apiVersion":"v1"},"validations":[{"expression":"true"}]}`,
			want:     invalid("failed to validate params: paramKind: Required value: paramKind must have both APIVersion and Kind specified"),
		},
		{
			name:     "paramRef with both name and selector",
			settings: `{"paramKind":{"apiVersion":"v1","kind":"ConfigMap"},"paramRef":{"name":"p","selector":{},"parameterNotFoundAction":"Deny"},"validations":[{"expression":"true"}]}`,
			want:     invalid(`failed to validate params: paramRef: Invalid value: "p": paramRef cannot have both Name and Selector specified:`),
		},
		{
			name:     "paramRef without parameterNotFoundAction",
			settings: `{"paramKind":{"apiVersion":"v1","kind":"ConfigMap"},"paramRef":{"name":"p"},"validations":[{"expression":"true"}]}`,
			want:     invalid(`failed to validate params: paramRef: Invalid value: "nil": parameterNotFoundAction must be 'Deny' or 'Allow' if paramRef is specified:`),
		},
		{
			name:     "Kubewarden host capabilities are not supported",
			settings: `{"variables":[{"name":"img","expression":"kw.oci.image(object.spec.containers[0].image).manifestDigest()"}],"validations":[{"expression":"true"}]}`,
			want: invalid("variables[0].expression: Invalid value: \"kw.oci.image(object.spec.containers[0].image).manifestDigest()\": " +
				"ERROR: <input>:1:1: kw.oci.image: the kw.oci library calls Kubewarden host capabilities, which need context-aware host calls that Warden's native CEL runner does not support yet\n" +
				" | kw.oci.image(object.spec.containers[0].image).manifestDigest()\n | ^:"),
		},
		{
			name:     "host capabilities anywhere in an expression",
			settings: `{"validations":[{"expression":"object.metadata.name != '' && kw.k8s.apiVersion('v1').kind('Pod').list().items.size() > 0"}]}`,
			prefix:   "The settings are invalid: 1 error occurred:\n\t* validations[0].expression: Invalid value: \"object.metadata.name != '' && kw.k8s.apiVersion('v1').kind('Pod').list().items.size() > 0\": ERROR: <input>:1:31: kw.k8s.apiVersion: the kw.k8s library",
		},
		{
			// map() visits every element: 100 sums and 110 list appends
			// cannot cost less than the limit of 200. (all() could stop at
			// its first false: its least cost is small.)
			name:     "an expression over the cost limit on any input",
			settings: `{"validations":[{"expression":"[1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, a + b)).size() > 0"}]}`,
			opts:     []Option{WithCostLimit(200)},
			prefix: "The settings are invalid: 1 error occurred:\n\t* validations[0].expression: Invalid value: " +
				"\"[1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, a + b)).size() > 0\": estimated cost ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile(json.RawMessage(tt.settings), tt.opts...)
			var se *SettingsError
			if !errors.As(err, &se) {
				t.Fatalf("Compile: %v, want a *SettingsError", err)
			}
			if tt.want != "" && err.Error() != tt.want {
				t.Errorf("Compile error:\n%q\nwant\n%q", err, tt.want)
			}
			if tt.prefix != "" && !strings.HasPrefix(err.Error(), tt.prefix) {
				t.Errorf("Compile error:\n%q\nwant it to begin with\n%q", err, tt.prefix)
			}
		})
	}
}

func TestCompileSettingsShape(t *testing.T) {
	for _, settings := range []string{`{"validations":"x"}`, `{"validations":[{"expression":true}]}`, `[]`, `{"variables":{}}`} {
		t.Run(settings, func(t *testing.T) {
			_, err := Compile(json.RawMessage(settings))
			var se *SettingsError
			var te *json.UnmarshalTypeError
			if !errors.As(err, &se) || !errors.As(err, &te) || !strings.HasPrefix(err.Error(), "cannot unmarshal settings: json: cannot unmarshal ") {
				t.Fatalf("Compile: %v, want cel-policy's decoding error", err)
			}
		})
	}
}

func TestCompileValid(t *testing.T) {
	for _, settings := range []string{
		`{"validations":[{"expression":"true"}]}`,
		`{"failurePolicy":"Ignore","paramKind":{"apiVersion":"v1","kind":"ConfigMap"},"variables":[{"name":"replicas","expression":"object.spec.replicas"}],` +
			`"validations":[{"expression":"variables.replicas <= 5","message":"at most 5 replicas","reason":"Forbidden"}]}`,
		`{"paramKind":{"apiVersion":"v1","kind":"ConfigMap"},"paramRef":{"name":"p","parameterNotFoundAction":"Deny"},"validations":[{"expression":"params.data.x == '1'"}]}`,
		`{"paramKind":{"apiVersion":"v1","kind":"ConfigMap"},"paramRef":{"selector":{"matchLabels":{"a":"b"}},"namespace":"n","parameterNotFoundAction":"Allow"},"validations":[{"expression":"true"}]}`,
		// Accepted by cel-policy, which then fails every evaluation.
		`{"paramRef":{"name":"p","parameterNotFoundAction":"Deny"},"validations":[{"expression":"true"}]}`,
		`{"validations":[{"expression":"object.spec.containers.all(c, c.image.endsWith(':latest') == false)","messageExpression":"'image ' + string(object.spec.containers.size())"}]}`,
	} {
		if _, err := Compile(json.RawMessage(settings)); err != nil {
			t.Errorf("Compile(%s): %v", settings, err)
		}
	}
}
