package protocol

import (
	"encoding/json"
	"testing"
)

func TestMarshal(t *testing.T) {
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"accept", Accept(), `{"accepted":true}`},
		{"reject", Reject(`label "a" is denied`), `{"accepted":false,"message":"label \"a\" is denied"}`},
		{"reject with code", ValidationResponse{Message: "no", Code: 403}.Marshal(), `{"accepted":false,"message":"no","code":403}`},
		{"mutate", Mutate([]byte(`{"a":1}`)), `{"accepted":true,"mutated_object":{"a":1}}`},
		{"settings valid", SettingsValid(), `{"valid":true}`},
		{"settings invalid", SettingsInvalid("bad\n"), `{"valid":false,"message":"bad\n"}`},
		{"log", LogPayload("info", "a\tb"), `{"level":"info","message":"a\tb"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if string(tt.got) != tt.want {
				t.Errorf("got %s, want %s", tt.got, tt.want)
			}
		})
	}
}

// FuzzAppendString checks that every string encodes to a JSON string that
// encoding/json decodes back to the same text as an encoding/json round trip
// (which also replaces each invalid UTF-8 byte with U+FFFD).
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", `"quoted"\`, "\x00\x1f\x7f", "é\u2028", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc := AppendString(nil, s)
		var dec string
		if err := json.Unmarshal(enc, &dec); err != nil {
			t.Fatalf("AppendString(%q) = %s: not JSON: %v", s, enc, err)
		}
		refEnc, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var ref string
		if err := json.Unmarshal(refEnc, &ref); err != nil {
			t.Fatal(err)
		}
		if dec != ref {
			t.Fatalf("AppendString(%q) decodes to %q, encoding/json round trip gives %q", s, dec, ref)
		}
	})
}
