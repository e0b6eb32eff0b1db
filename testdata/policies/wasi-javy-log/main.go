//go:build wasip1

// Command wasi-javy-log is a WASI policy that makes its host call through the
// import JavaScript policies built with Javy use, kubewarden:javy/host.call
// (same arguments and return convention as host.call). It logs
// "wasi-javy-log called the host" and accepts when the host answered 0.
package main

import (
	"io"
	"os"
	"unsafe"

	"warden.test/policies/guest/protocol"
)

//go:wasmimport kubewarden:javy/host call
func hostCall(binding, namespace, operation string, payload unsafe.Pointer, n uint32) uint32

func main() {
	if _, err := io.ReadAll(os.Stdin); err != nil {
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[1] == "validate-settings" {
		os.Stdout.Write(protocol.SettingsValid())
		return
	}
	payload := protocol.LogPayload("info", "wasi-javy-log called the host")
	status := hostCall("kubewarden", "tracing", "log", unsafe.Pointer(unsafe.SliceData(payload)), uint32(len(payload)))
	io.ReadAll(os.Stdin) // the host's (empty) answer
	if status != 0 {
		os.Stdout.Write(protocol.Reject("the host call failed"))
		return
	}
	os.Stdout.Write(protocol.Accept())
}
