//go:build wasip1

// Command echo is a waPC policy that rejects every request with, as its
// message, the validation payload it was handed, byte for byte: tests read
// what the host hands a guest ({"request":...,"settings":...}) from the
// rejection. validate_settings accepts anything.
package main

import (
	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wapc"
)

// main never runs: the policy is a c-shared reactor (see package wapc).
func main() {}

func init() {
	wapc.Register(map[string]wapc.Handler{
		"validate":          func(payload []byte) ([]byte, error) { return protocol.Reject(string(payload)), nil },
		"validate_settings": func([]byte) ([]byte, error) { return protocol.SettingsValid(), nil },
	})
}
