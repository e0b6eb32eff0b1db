//go:build wasip1

// Command wasi-fail is a WASI-mode policy whose validate operation writes
// "something went wrong" on stderr and exits 1, with nothing on stdout.
// validate-settings accepts anything.
package main

import (
	"errors"

	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wasi"
)

func main() {
	wasi.Run(
		func([]byte) ([]byte, error) { return nil, errors.New("something went wrong") },
		func([]byte) ([]byte, error) { return protocol.SettingsValid(), nil },
	)
}
