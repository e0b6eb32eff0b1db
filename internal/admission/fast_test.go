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
		gotResource, gotSub := got.Resource()
		wantResource, wantSub := want.Resource()
		if gotResource != wantResource || gotSub != wantSub {
			t.Errorf("resource %+v, subresource %q; want %+v, %q", gotResource, gotSub, wantResource, wantSub)
		}
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
			"resource":{"group":"apps","version":"v1","resource":"deployments"},"subResource":"scale",
			"requestKind":{"group":"apps","version":"v1","kind":"Deployment"},"name":"n","namespace":"ns",
			"operation":"UPDATE","object":{"a":1},"oldObject":{"a":0},"userInfo":{"username":"x"}}}`, true},
		{"nulls", `{"request":{"uid":null,"kind":null,"requestKind":null,"name":null,"object":null,"oldObject":null,
			"resource":null,"subResource":null}}`, true},
		{"null members of the resource", `{"request":{"resource":{"group":null,"version":"v1","resource":null}}}`, true},
		// The span's fields never fail a decode.
		{"resource not an object", `{"request":{"uid":"u","resource":"pods"}}`, false},
		{"resource member not a string", `{"request":{"uid":"u","resource":{"group":1,"version":"v1","resource":"pods"}}}`, false},
		{"subResource not a string", `{"request":{"uid":"u","subResource":["status"]}}`, false},
		{"resource key in another case", `{"request":{"uid":"u","Resource":{"resource":"pods"}}}`, false},
		{"repeated resource", `{"request":{"resource":{"group":"a"},"resource":{"version":"v1"}}}`, false},
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

// TestDecodeReviewSpanFields checks the fields read for the request's span:
// read when they have their type, empty when not, never an error.
func TestDecodeReviewSpanFields(t *testing.T) {
	tests := []struct {
		name, body  string
		resource    GroupVersionResource
		subResource string
	}{
		{"read", `{"request":{"resource":{"group":"apps","version":"v1","resource":"deployments"},"subResource":"scale"}}`,
			GroupVersionResource{"apps", "v1", "deployments"}, "scale"},
		{"absent", `{"request":{"uid":"u"}}`, GroupVersionResource{}, ""},
		{"resource of the wrong type", `{"request":{"resource":"pods","subResource":"status"}}`, GroupVersionResource{}, "status"},
		{"a member of the wrong type", `{"request":{"resource":{"group":5,"version":"v1","resource":"pods"}}}`,
			GroupVersionResource{"", "v1", "pods"}, ""},
		{"key in another case", `{"request":{"RESOURCE":{"resource":"pods"},"subresource":"status"}}`,
			GroupVersionResource{"", "", "pods"}, "status"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := DecodeReview([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Release()
			if resource, sub := r.Resource(); resource != tc.resource || sub != tc.subResource {
				t.Errorf("resource %+v, subresource %q; want %+v, %q", resource, sub, tc.resource, tc.subResource)
			}
		})
	}
}

func FuzzDecodeReview(f *testing.F) {
	f.Add([]byte(`{"request":{"uid":"u","kind":{"kind":"Pod"},"object":{"metadata":{}},"oldObject":null}}`))
	f.Add([]byte(`{"request":{"uid":"\ud800","namespace":"x","requestKind":{"group":""}}}`))
	f.Add([]byte(`{"request":{"Uid":"u"}}`))
	f.Add([]byte(`{"request":{"resource":{"group":"","version":"v1","resource":"pods"},"subResource":"status"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		sameDecoding(t, body)
	})
}

// sameRawDecoding fails t unless DecodeRawReview gives what encoding/json
// gives.
func sameRawDecoding(t *testing.T, body []byte) {
	t.Helper()
	got, gotErr := DecodeRawReview(body)
	want, wantErr := decodeRawReviewSlow(body)
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("error: got %v, want %v", gotErr, wantErr)
	}
	if got != nil {
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

func TestDecodeRawReviewMatchesEncodingJSON(t *testing.T) {
	tests := []struct {
		name string
		body string
		uid  string
		fast bool // whether the fast decoder takes it
	}{
		{"object with a uid", `{"request":{"uid":"r1","user":"alice","action":"eat"}}`, "r1", true},
		{"object without a uid", `{"request":{"user":"alice"}}`, "", true},
		{"null uid", `{"request":{"uid":null}}`, "", true},
		{"not an object", `{"request":[1,"uid"]}`, "", true},
		{"a string", `{"request":"uid"}`, "", true},
		{"null", `{"request":null}`, "", true},
		{"uid not a string", `{"request":{"uid":5}}`, "", false},
		{"uid in another case", `{"request":{"UID":"r1"}}`, "r1", false},
		{"repeated uid", `{"request":{"uid":"a","uid":"b"}}`, "b", false},
		{"request in another case", `{"Request":{"uid":"r1"}}`, "r1", false},
		{"no request", `{}`, "", false},
		{"not an object body", `[1]`, "", false},
		{"malformed", `{"request": {"uid": }`, "", false},
		{"empty body", ``, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := decodeRawReviewFast([]byte(tc.body))
			if ok != tc.fast {
				t.Errorf("fast decoder took it: %v, want %v", ok, tc.fast)
			}
			if ok {
				r.Release()
			}
			sameRawDecoding(t, []byte(tc.body))
			if r, err := DecodeRawReview([]byte(tc.body)); err == nil && r.UID != tc.uid {
				t.Errorf("uid %q, want %q", r.UID, tc.uid)
			}
		})
	}
	if _, err := DecodeRawReview([]byte(`{}`)); err != ErrNoRawRequest {
		t.Errorf("error for a review without a request: %v, want ErrNoRawRequest", err)
	}
}

func FuzzDecodeRawReview(f *testing.F) {
	f.Add([]byte(`{"request":{"uid":"r1","user":"alice"}}`))
	f.Add([]byte(`{"request":[{"uid":"x"}]}`))
	f.Add([]byte(`{"request":{"Uid":"u","uid":"v"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		sameRawDecoding(t, body)
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
