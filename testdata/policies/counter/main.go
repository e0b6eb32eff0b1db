//go:build wasip1

// Command counter is a waPC policy that proves evaluations are isolated: it
// counts its validate calls in a package variable and answers
// {"accepted":true,"message":"call N"}. With settings {"grow_mb": N} it also
// keeps N MiB alive, which grows its linear memory. With {"fail": "trap"}
// it then hits an out-of-bounds load, with {"fail": "loop"} it loops until
// the host interrupts it: either way after counting. On a host that
// isolates evaluations, N is always 1.
package main

import (
	"strconv"
	"unsafe"

	"github.com/tidwall/gjson"

	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wapc"
)

func main() {}

var (
	calls int
	kept  [][]byte
	sink  byte // keeps the failing load and loop from being optimised away
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
	switch gjson.GetBytes(payload, "settings.fail").String() {
	case "trap":
		// An address the host never lets the module have (see package trap).
		sink = *(*byte)(unsafe.Add(unsafe.Pointer(nil), uintptr(0xfffffff0)))
	case "loop":
		for {
			sink++
		}
	}
	return protocol.ValidationResponse{Accepted: true, Message: "call " + strconv.Itoa(calls)}.Marshal(), nil
}
