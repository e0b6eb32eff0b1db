//go:build wasip1

// Command counter is a waPC policy that proves evaluations are isolated: it
// counts its validate calls in a package variable and answers
// {"accepted":true,"message":"call N"}. With settings {"grow_mb": N} it also
// keeps N MiB alive, which grows its linear memory. On a host that isolates
// evaluations, N is always 1.
package main

import (
	"strconv"

	"github.com/tidwall/gjson"

	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wapc"
)

func main() {}

var (
	calls int
	kept  [][]byte
)

func init() {
	wapc.Register(map[string]wapc.Handler{
		"validate":          validate,
		"validate_settings": func([]byte) ([]byte, error) { return protocol.SettingsValid(), nil },
	})
}

func validate(payload []byte) ([]byte, error) {
	calls++
	if mb := gjson.GetBytes(payload, "settings.grow_mb").Int(); mb > 0 {
		b := make([]byte, mb<<20)
		for i := range b {
			b[i] = 1
		}
		kept = append(kept, b)
	}
	return protocol.ValidationResponse{Accepted: true, Message: "call " + strconv.Itoa(calls)}.Marshal(), nil
}
