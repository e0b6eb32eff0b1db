package capabilities

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	valid := []string{"*", "oci/*", "oci/v1/*", "oci/v2/verify", "kubernetes/can_i", "kubernetes/*", "net/v1/dns_lookup_host", "crypto/v1/*"}
	for _, p := range valid {
		if err := Check(p); err != nil {
			t.Errorf("Check(%q) = %v, want valid", p, err)
		}
	}
	invalid := []struct{ pattern, want string }{
		{"", "capability must not be empty"},
		{"oci", `"oci" is not a complete capability path; use "oci/*"`},
		{"oci/v3/*", `unknown segment "v3", valid options at this level are: v1, v2`},
		{"kubernetes/can", `unknown segment "can"`},
		{"tracing/log", `unknown segment "tracing", valid options at this level are: crypto, kubernetes, net, oci`},
		{"oci/v1/verify/*", `"oci/v1/verify" is a complete capability path and cannot have further segments`},
		{"*/*", `wildcard "*" is only allowed as the last path segment`},
		{"oci/v*", `wildcard "*" is only allowed as the last path segment`},
	}
	for _, tc := range invalid {
		err := Check(tc.pattern)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%q) = %v, want an error containing %q", tc.pattern, err, tc.want)
		}
	}
}

func TestValidateNamesEachInvalidPattern(t *testing.T) {
	err := Validate([]string{"oci/*", "foo", "net/v2/*"})
	if err == nil {
		t.Fatal("Validate accepted invalid patterns")
	}
	for _, want := range []string{`invalid host capability "foo"`, `invalid host capability "net/v2/*"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), `"oci/*"`) {
		t.Errorf("Validate error %q names the valid pattern", err)
	}
}

func TestLookup(t *testing.T) {
	tests := []struct {
		namespace, operation string
		ns, op               bool
	}{
		{"oci", "v1/verify", true, true},
		{"oci", "v1", true, false},
		{"oci", "v3/verify", true, false},
		{"kubernetes", "can_i", true, true},
		{"kubernetes", "can_i/x", true, false},
		{"tracing", "log", false, false},
	}
	for _, tc := range tests {
		ns, op := Lookup(tc.namespace, tc.operation)
		if ns != tc.ns || op != tc.op {
			t.Errorf("Lookup(%q, %q) = %v, %v; want %v, %v", tc.namespace, tc.operation, ns, op, tc.ns, tc.op)
		}
	}
}

func TestMatches(t *testing.T) {
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"*", "oci/v1/verify", true},
		{"oci/*", "oci/v2/verify", true},
		{"oci/v1/*", "oci/v2/verify", false},
		{"oci/v1/verify", "oci/v1/verify", true},
		{"oci/v1/verify", "oci/v1/manifest_digest", false},
		{"kubernetes/*", "oci/v1/verify", false},
		{"oci*", "oci/v1/verify", false},
	}
	for _, tc := range tests {
		if got := Matches(tc.pattern, tc.path); got != tc.want {
			t.Errorf("Matches(%q, %q) = %v, want %v", tc.pattern, tc.path, got, tc.want)
		}
	}
}
