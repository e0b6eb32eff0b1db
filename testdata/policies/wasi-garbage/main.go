//go:build wasip1

// Command wasi-garbage is a WASI-mode policy whose validate operation prints
// "this is not json" on stdout and exits 0. validate-settings accepts
// anything.
package main

import (
	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wasi"
)

func main() {
	wasi.Run(
		func([]byte) ([]byte, error) { return []byte("this is not json"), nil },
		func([]byte) ([]byte, error) { return protocol.SettingsValid(), nil },
	)
}
