//go:build wasip1

// Command wasi-nostdin is a WASI-mode policy that never reads stdin: both
// operations write their positive answer (accepted, settings valid) and exit
// 0. A host cannot take a snapshot at its first read of stdin.
package main

import (
	"os"

	"warden.test/policies/guest/protocol"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "validate-settings" {
		os.Stdout.Write(protocol.SettingsValid())
		return
	}
	os.Stdout.Write(protocol.Accept())
}
