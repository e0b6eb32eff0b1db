//go:build wasip1

// Command wasi-nowb is nowb as a WASI-mode policy, the mode of Kubewarden's
// cel-policy, built the same way (-gcflags=all="-l -B -wb=false"): validate
// runs heapcheck.Check for settings.steps steps (default 20000) and accepts
// with its summary, or rejects with "heap corrupted: ..." when the heap is
// damaged. validate-settings accepts anything.
package main

import (
	"github.com/tidwall/gjson"

	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wasi"
	"warden.test/policies/heapcheck"
)

func main() {
	wasi.Run(validate, func([]byte) ([]byte, error) { return protocol.SettingsValid(), nil })
}

func validate(payload []byte) ([]byte, error) {
	steps := 20000
	if s := gjson.GetBytes(payload, "settings.steps"); s.Exists() {
		steps = int(s.Int())
	}
	summary, err := heapcheck.Check(steps)
	if err != nil {
		return protocol.ValidationResponse{Message: "heap corrupted: " + err.Error()}.Marshal(), nil
	}
	return protocol.ValidationResponse{Accepted: true, Message: summary}.Marshal(), nil
}
