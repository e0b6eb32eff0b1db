package wasi

import (
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	"warden.test/policies/guest/protocol"
)

// hostCall passes each string as (ptr, len), as the ABI wants.
//
//go:wasmimport host call
func hostCall(binding, namespace, operation string, payload unsafe.Pointer, n uint32) uint32

// HostCall asks the host to run binding/namespace/operation with payload.
// The host answers 0 on success and 1 on failure, and appends the response
// (or the error text) to stdin, which HostCall reads to its current end, as
// Kubewarden's Go SDK does. It must run after the request has been read from
// stdin, which Run does before calling a handler.
func HostCall(binding, namespace, operation string, payload []byte) ([]byte, error) {
	status := hostCall(binding, namespace, operation, unsafe.Pointer(unsafe.SliceData(payload)), uint32(len(payload)))
	resp, err := io.ReadAll(os.Stdin)
	if err != nil {
		return nil, fmt.Errorf("reading the host response from stdin: %w", err)
	}
	if status != 0 {
		return nil, errors.New(string(resp))
	}
	return resp, nil
}

// Log sends message at level (trace, debug, info, warning, error) through the
// kubewarden/tracing/log host call. Like Kubewarden's SDKs it ignores the
// outcome: logging never fails a policy.
func Log(level, message string) {
	_, _ = HostCall("kubewarden", "tracing", "log", protocol.LogPayload(level, message))
}
