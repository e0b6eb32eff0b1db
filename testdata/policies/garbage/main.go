//go:build wasip1

// Command garbage is a waPC policy whose validate operation succeeds (returns
// 1 through __guest_response) with the bytes "this is not json".
// validate_settings accepts anything.
package main

import (
	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wapc"
)

// main never runs: the policy is a c-shared reactor (see package wapc).
func main() {}

func init() {
	wapc.Register(map[string]wapc.Handler{
		"validate":          func([]byte) ([]byte, error) { return []byte("this is not json"), nil },
		"validate_settings": func([]byte) ([]byte, error) { return protocol.SettingsValid(), nil },
	})
}
