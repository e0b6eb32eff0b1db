package admission

import (
	"os"
	"reflect"
	"testing"
)

// sameDecoding fails t unless DecodeReview gives what encoding/json gives.
func sameDecoding(t *testing.T, body []byte) {
	t.Helper()
	got, gotErr := DecodeReview(body)
	want, wantErr := decodeReviewSlow(body)
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("error: got %v, want %v", gotErr, wantErr)
	}
	if got != nil {
		// The parse the fast decoder keeps must hold the request.
		if tape, node := got.Parsed(); tape != nil && tape.Raw(node) != string(got.Raw) {
			t.Errorf("the parse's request node holds %q, want the raw request", tape.Raw(node))
		}
		got.Release()
		got.node = 0
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestDecodeReviewMatchesEncodingJSON(t *testing.T) {
	pod, err := os.ReadFile("../../hack/loadtest/testdata/pod-review.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		body string
		fast bool // whether the fast decoder takes it
	}{
		{"pod review", string(pod), true},
		{"every field", `{"request":{"uid":"u","kind":{"group":"apps","version":"v1","kind":"Deployment"},
			"requestKind":{"group":"apps","version":"v1","kind":"Deployment"},"name":"n","namespace":"ns",
			"operation":"UPDATE","object":{"a":1},"oldObject":{"a":0},"userInfo":{"username":"x"}}}`, true},
		{"nulls", `{"request":{"uid":null,"kind":null,"requestKind":null,"name":null,"object":null,"oldObject":null}}`, true},
		{"escaped strings", `{"request":{"uid":"\u00e9\n","name":"a\"b","kind":{"kind":"P\u006fd"}}}`, true},
		{"no request", `{"kind":"AdmissionReview"}`, false},
		{"null request", `{"request":null}`, false},
		{"request not an object", `{"request":[1]}`, false},
		{"uid not a string", `{"request":{"uid":5}}`, false},
		{"kind not an object", `{"request":{"kind":"Pod"}}`, false},
		{"gvk field not a string", `{"request":{"kind":{"kind":1}}}`, false},
		{"key in another case", `{"request":{"UID":"u"}}`, false},
		{"request key in another case", `{"Request":{"uid":"u"}}`, false},
		{"repeated key", `{"request":{"uid":"a","uid":"b"}}`, false},
		{"repeated request", `{"request":{"uid":"a"},"request":{"uid":"b"}}`, false},
		{"truncated", `{"request":{"uid":"a"`, false},
		{"empty body", ``, false},
		{"not an object", `[]`, false},
		{"trailing garbage", `{"request":{}} x`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := decodeReviewFast([]byte(tc.body)); ok != tc.fast {
				t.Errorf("fast decoder took it: %v, want %v", ok, tc.fast)
			}
			sameDecoding(t, []byte(tc.body))
		})
	}
}

func FuzzDecodeReview(f *testing.F) {
	f.Add([]byte(`{"request":{"uid":"u","kind":{"kind":"Pod"},"object":{"metadata":{}},"oldObject":null}}`))
	f.Add([]byte(`{"request":{"uid":"\ud800","namespace":"x","requestKind":{"group":""}}}`))
	f.Add([]byte(`{"request":{"Uid":"u"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		sameDecoding(t, body)
	})
}

func TestMarshalKeepsHTMLCharacters(t *testing.T) {
	resp := NewReview(&Response{UID: "u", Status: &Status{Message: "host <a.example.com> & more"}})
	b, err := Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":false,"status":{"message":"host <a.example.com> & more"}}}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}
