//go:build wasip1

// Command labels is a waPC validating policy that rejects objects carrying a
// denied label. It is the policy of Warden's throughput benchmarks, so it reads
// only the fields it needs in one pass with jsonscan instead of decoding the
// request (gjson costs ~90 µs per evaluation in a Go guest; jsonscan a few).
//
// Settings: {"denied_labels": ["a", "b"]} (absent: nothing is denied).
package main

import (
	"warden.test/policies/guest/jsonscan"
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
	if denied := jsonscan.Get(settings, "denied_labels"); denied != nil && !jsonscan.Strings(denied, func([]byte) {}) {
		return protocol.SettingsInvalid("denied_labels must be a list of strings"), nil
	}
	return protocol.SettingsValid(), nil
}

func validate(payload []byte) ([]byte, error) {
	labels := jsonscan.Get(payload, "request", "object", "metadata", "labels")
	denied := jsonscan.Get(payload, "settings", "denied_labels")
	if labels == nil || denied == nil {
		return protocol.Accept(), nil
	}
	var rejected []byte
	jsonscan.Strings(denied, func(d []byte) {
		if rejected != nil {
			return
		}
		jsonscan.Keys(labels, func(k []byte) bool {
			if string(k) == string(d) {
				rejected = d
			}
			return rejected == nil
		})
	})
	if rejected != nil {
		return protocol.Reject("label " + string(rejected) + " is denied"), nil
	}
	return protocol.Accept(), nil
}
