//go:build wasip1

// Command loop is a waPC policy whose validate operation spins forever: no
// allocation, no host call, nothing for the guest's runtime to interrupt, so
// only the host's deadline ends it. validate_settings accepts anything.
package main

import (
	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wapc"
)

// main never runs: the policy is a c-shared reactor (see package wapc).
func main() {}

func init() {
	wapc.Register(map[string]wapc.Handler{
		"validate":          validate,
		"validate_settings": func([]byte) ([]byte, error) { return protocol.SettingsValid(), nil },
	})
}

// counter is written by the loop so that it has a visible effect.
var counter uint64

func validate([]byte) ([]byte, error) {
	for {
		counter++
	}
}
