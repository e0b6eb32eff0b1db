package wapc

import (
	"errors"
	"unsafe"

	"warden.test/policies/guest/protocol"
)

//go:wasmimport wapc __guest_request
func guestRequest(opPtr, payloadPtr unsafe.Pointer)

//go:wasmimport wapc __guest_response
func guestResponse(ptr unsafe.Pointer, n uint32)

//go:wasmimport wapc __guest_error
func guestError(ptr unsafe.Pointer, n uint32)

// hostCall passes each string as (ptr, len), as the ABI wants.
//
//go:wasmimport wapc __host_call
func hostCall(binding, namespace, operation string, payload unsafe.Pointer, n uint32) uint32

//go:wasmimport wapc __host_response_len
func hostResponseLen() uint32

//go:wasmimport wapc __host_response
func hostResponse(ptr unsafe.Pointer)

//go:wasmimport wapc __host_error_len
func hostErrorLen() uint32

//go:wasmimport wapc __host_error
func hostError(ptr unsafe.Pointer)

//go:wasmimport wapc __console_log
func consoleLog(msg string)

// guestCall is the waPC entry point: the host holds an operation name and a
// payload of the given lengths, which guestRequest copies in. It returns 1
// after handing the host a response, 0 after handing it an error text.
//
//go:wasmexport __guest_call
func guestCall(opLen, payloadLen uint32) uint32 {
	op := make([]byte, opLen)
	payload := make([]byte, payloadLen)
	guestRequest(ptr(op), ptr(payload))

	out, err := dispatch(string(op), payload)
	if err != nil {
		msg := []byte(err.Error())
		guestError(ptr(msg), uint32(len(msg)))
		return 0
	}
	guestResponse(ptr(out), uint32(len(out)))
	return 1
}

// HostCall asks the host to run binding/namespace/operation with payload and
// returns its response, or an error carrying the host's error text.
func HostCall(binding, namespace, operation string, payload []byte) ([]byte, error) {
	if hostCall(binding, namespace, operation, ptr(payload), uint32(len(payload))) == 1 {
		resp := make([]byte, hostResponseLen())
		hostResponse(ptr(resp))
		return resp, nil
	}
	msg := make([]byte, hostErrorLen())
	hostError(ptr(msg))
	return nil, errors.New(string(msg))
}

// Log sends message at level (trace, debug, info, warning, error) through the
// kubewarden/tracing/log host call. Like Kubewarden's SDKs it ignores the
// outcome: logging never fails a policy.
func Log(level, message string) {
	_, _ = HostCall("kubewarden", "tracing", "log", protocol.LogPayload(level, message))
}

// ConsoleLog writes message through the waPC __console_log import.
func ConsoleLog(message string) { consoleLog(message) }

// ptr returns the address of b's first element (nil for a nil slice, which
// the host never reads since the length is 0).
func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
