//go:build wasip1

// Command labels is a waPC validating policy that rejects objects carrying a
// denied label. It is the policy of Warden's throughput benchmarks, so it reads
// only the fields it needs with gjson instead of decoding the request.
//
// Settings: {"denied_labels": ["a", "b"]} (absent: nothing is denied).
package main

import (
	"github.com/tidwall/gjson"

	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wapc"
)

// main never runs: the policy is a c-shared reactor (see package wapc).
func main() {}

func init() {
	wapc.Register(map[string]wapc.Handler{
		"validate":          validate,
		"validate_settings": validateSettings,
	})
}

func validateSettings(settings []byte) ([]byte, error) {
	if !gjson.ValidBytes(settings) {
		return protocol.SettingsInvalid("settings are not valid JSON"), nil
	}
	if denied := gjson.GetBytes(settings, "denied_labels"); denied.Exists() && !isStringList(denied) {
		return protocol.SettingsInvalid("denied_labels must be a list of strings"), nil
	}
	return protocol.SettingsValid(), nil
}

// validate does not check that payload is well-formed JSON (the host builds
// it): doing so would double the cost of an evaluation, which the benchmarks
// are meant to spend in the host.
func validate(payload []byte) ([]byte, error) {
	found := gjson.GetManyBytes(payload, "settings.denied_labels", "request.object.metadata.labels")
	denied, labels := found[0], found[1]
	if !denied.IsArray() || !labels.IsObject() {
		return protocol.Accept(), nil
	}
	var rejected string
	denied.ForEach(func(_, d gjson.Result) bool {
		if d.Type == gjson.String && hasKey(labels, d.Str) {
			rejected = d.Str
			return false
		}
		return true
	})
	if rejected != "" {
		return protocol.Reject("label " + rejected + " is denied"), nil
	}
	return protocol.Accept(), nil
}

func isStringList(v gjson.Result) bool {
	if !v.IsArray() {
		return false
	}
	ok := true
	v.ForEach(func(_, e gjson.Result) bool {
		ok = e.Type == gjson.String
		return ok
	})
	return ok
}

func hasKey(obj gjson.Result, key string) bool {
	found := false
	obj.ForEach(func(k, _ gjson.Result) bool {
		found = k.Str == key
		return !found
	})
	return found
}
