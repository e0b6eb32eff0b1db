package engine

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/wasm"
)

const celPod = `{"metadata":{"name":"web","namespace":"default","labels":{"team":"a"}},"spec":{"containers":[{"name":"web","image":"nginx:latest"}]}}`

func TestCELRunner(t *testing.T) {
	const settings = `{"validations":[
		{"expression":"has(object.metadata.labels) && 'team' in object.metadata.labels","message":"the team label is required"},
		{"expression":"object.spec.containers.all(c, !c.image.endsWith(':latest'))","messageExpression":"'no latest tag in ' + object.metadata.name","reason":"Forbidden"}]}`
	tests := []struct {
		name    string
		review  *admissiontest.Review
		raw     string // a raw request, instead of review
		want    validationResponse
		wantErr string
	}{
		{
			name:   "accepted: no message, no code",
			review: admissiontest.New(admissiontest.WithObject(strings.Replace(celPod, ":latest", ":1.27", 1))),
			want:   validationResponse{Accepted: true},
		},
		{
			name:   "rejected with the message and the code of the reason",
			review: admissiontest.New(admissiontest.WithObject(celPod)),
			want:   validationResponse{Message: ptr("no latest tag in web"), Code: ptr(int32(403))},
		},
		{
			name:   "rejected with the default reason, Invalid",
			review: admissiontest.New(admissiontest.WithObject(`{"metadata":{"name":"web"},"spec":{"containers":[]}}`)),
			want:   validationResponse{Message: ptr("the team label is required"), Code: ptr(int32(400))},
		},
		{
			name: "a raw request is evaluated as an AdmissionRequest",
			raw:  `{"object":` + celPod + `}`,
			want: validationResponse{Message: ptr("no latest tag in web"), Code: ptr(int32(403))},
		},
		{
			name:    "a failed evaluation is cel-policy's error",
			review:  admissiontest.New(admissiontest.WithObject(`{"metadata":{"name":"web","labels":{"team":"a"}}}`)),
			wantErr: "failed to evaluate expression: no such key: spec",
		},
	}
	r, err := newCELRunner(json.RawMessage(settings))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := rawRequestOf(tt.raw)
			if tt.raw == "" {
				req = requestOf(t, tt.review)
			}
			got, err := r.validate(context.Background(), nil, req, json.RawMessage(settings))
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("validate = %+v, %v; want error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(*got, tt.want) {
				t.Fatalf("validate = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestCELRunnerResponse(t *testing.T) {
	r, err := newCELRunner(json.RawMessage(`{"validations":[{"expression":"false","message":"never","reason":"Unauthorized"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	vr, err := r.validate(context.Background(), nil, requestOf(t, admissiontest.New(admissiontest.WithObject(celPod))), json.RawMessage("{}"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := toAdmissionResponse("u1", json.RawMessage(celPod), vr)
	want := admission.Response{UID: "u1", Status: &admission.Status{Message: "never", Code: 401}}
	if err != nil || !reflect.DeepEqual(*got, want) {
		t.Errorf("response = %+v, %v; want %+v", got, err, want)
	}
}

func TestCELRunnerDeadline(t *testing.T) {
	r, err := newCELRunner(json.RawMessage(`{"validations":[{"expression":"true"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := r.validate(ctx, nil, requestOf(t, admissiontest.New(admissiontest.WithObject(celPod))), json.RawMessage("{}")); !errors.Is(err, wasm.ErrDeadlineExceeded) {
		t.Errorf("validate past the deadline: %v, want wasm.ErrDeadlineExceeded", err)
	}
}

func TestNewCELRunnerSettings(t *testing.T) {
	required := "The settings are invalid: 1 error occurred:\n\t* validations: Required value: validations must contain at least one item\n\n"
	tests := []struct {
		name, settings, want string
	}{
		{name: "empty", settings: ``, want: required},
		{name: "null", settings: `null`, want: required},
		{name: "no validations", settings: `{"variables":[]}`, want: required},
		{
			name:     "a bad expression",
			settings: `{"validations":[{"expression":"object.metadata.name.startsWith('x') &&"}]}`,
			want:     `validations[0].expression: Invalid value: "object.metadata.name.startsWith('x') &&": ERROR: <input>:1:40: Syntax error:`,
		},
		{name: "not cel-policy settings", settings: `{"validations":{}}`, want: "cannot unmarshal settings: json: cannot unmarshal object into Go struct field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newCELRunner(json.RawMessage(tt.settings))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("newCELRunner: %v, want %q", err, tt.want)
			}
		})
	}
}

func TestCELRunnerValidateSettings(t *testing.T) {
	settings := []byte(`{"validations":[{"expression":"true"}]}`)
	r, err := newCELRunner(settings)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		settings string
		valid    bool
	}{
		{string(settings), true},
		{`{"validations":[{"expression":"false","message":"no"}]}`, true},
		{`{"validations":[{"expression":"1"}]}`, false},
	} {
		got := r.validateSettings(context.Background(), nil, []byte(tt.settings))
		if got.Valid != tt.valid || (!tt.valid && (got.Message == nil || !strings.Contains(*got.Message, "must evaluate to bool"))) {
			t.Errorf("validateSettings(%s) = %+v, want valid %v", tt.settings, got, tt.valid)
		}
	}
}
