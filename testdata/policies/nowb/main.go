//go:build wasip1

// Command nowb is a waPC policy built as Kubewarden's cel-policy is, without
// write barriers (-gcflags=all="-l -B -wb=false"): its validate operation
// runs heapcheck.Check for settings.steps steps (default 20000), which makes
// Go's collector run during the call, and accepts with Check's summary, or
// rejects with "heap corrupted: ..." when Check finds the heap damaged.
// validate-settings accepts anything.
package main

import (
	"github.com/tidwall/gjson"

	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wapc"
	"warden.test/policies/heapcheck"
)

func main() {}

func init() {
	wapc.Register(map[string]wapc.Handler{
		"validate":          validate,
		"validate_settings": func([]byte) ([]byte, error) { return protocol.SettingsValid(), nil },
	})
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
