//go:build wasip1

// Command wasi-counter is a WASI-mode policy that proves evaluations are
// isolated, for hosts that reuse instances. At start-up it writes
// "wasi-counter ready" on stderr. Its validate operation counts its calls in
// a package variable and accepts with the message "call N random R", where R
// is 16 hex digits from crypto/rand; on a host that isolates evaluations N is
// always 1. Settings change what validate does first:
//
//   - {"grow_mb": N} keeps N MiB alive, which grows the linear memory;
//   - {"loop": true} spins forever (only the host's deadline ends it);
//   - {"trap": true} loads past the end of memory: a wasm trap;
//   - {"fail": true} writes "failed at call N" on stderr and exits 1;
//   - {"close_stdout": true} closes file descriptor 1 (fd_close), so that
//     writing the response fails: "writing the response: ..." on stderr,
//     exit 1.
//
// validate-settings accepts anything.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"github.com/tidwall/gjson"

	"warden.test/policies/guest/protocol"
	"warden.test/policies/guest/wasi"
)

var (
	calls   int
	kept    [][]byte
	counter uint64 // written by the loop so that it has a visible effect
	sink    byte   // keeps the trapping load from being optimised away
)

func init() {
	os.Stderr.WriteString("wasi-counter ready")
}

func main() {
	wasi.Run(validate, func([]byte) ([]byte, error) { return protocol.SettingsValid(), nil })
}

func validate(payload []byte) ([]byte, error) {
	calls++
	settings := gjson.GetBytes(payload, "settings")
	if mb := settings.Get("grow_mb").Int(); mb > 0 {
		b := make([]byte, mb<<20)
		for i := range b {
			b[i] = 1
		}
		kept = append(kept, b)
	}
	if settings.Get("loop").Bool() {
		for {
			counter++
		}
	}
	if settings.Get("trap").Bool() {
		// See the trap policy: the low 32 bits address wasm memory.
		sink = *(*byte)(unsafe.Add(unsafe.Pointer(nil), uintptr(0xfffffff0)))
	}
	if settings.Get("close_stdout").Bool() {
		if err := syscall.Close(1); err != nil {
			return nil, err
		}
	}
	if settings.Get("fail").Bool() {
		return nil, errors.New("failed at call " + strconv.Itoa(calls))
	}
	var random [8]byte
	if _, err := rand.Read(random[:]); err != nil {
		return nil, err
	}
	msg := "call " + strconv.Itoa(calls) + " random " + hex.EncodeToString(random[:])
	return protocol.ValidationResponse{Accepted: true, Message: msg}.Marshal(), nil
}
