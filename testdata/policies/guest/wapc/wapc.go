// Package wapc is the guest side of the waPC protocol
// (docs/compatibility.md#wapc-protocol) for policies built with the standard Go
// toolchain as WASI reactors:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared
//
// On wasip1 it exports __guest_call and imports the nine functions of wasm
// module "wapc" (abi_wasip1.go). A policy calls Register from an init function:
// in c-shared mode the module's _initialize export runs package initialisation
// but never main.main. The protocol_version operation is built in and answers
// "v1".
//
// It must be linked only into waPC policies: its imports of module "wapc" make
// instantiation fail on a host that does not provide them (a WASI-mode host).
// It must not import guest/wasi.
//
// A wasm module runs one call at a time, so nothing here is synchronised.
// Register must not be called while an operation runs.
package wapc

// Handler answers one waPC operation: it gets the payload the host sent and
// returns the response, or an error whose text the host reports.
type Handler func(payload []byte) ([]byte, error)

// ProtocolVersion is the answer to the protocol_version operation.
const ProtocolVersion = `"v1"`

var handlers = map[string]Handler{
	"protocol_version": func([]byte) ([]byte, error) { return []byte(ProtocolVersion), nil },
}

// Register adds handlers by operation name (validate, validate_settings),
// replacing earlier ones of the same name.
func Register(ops map[string]Handler) {
	for name, h := range ops {
		handlers[name] = h
	}
}

// unknownOperationError is the error of a call to an unregistered operation,
// worded as wapc-guest-tinygo words it.
type unknownOperationError string

func (e unknownOperationError) Error() string { return "Could not find function " + string(e) }

// dispatch runs the handler registered for op.
func dispatch(op string, payload []byte) ([]byte, error) {
	h, ok := handlers[op]
	if !ok {
		return nil, unknownOperationError(op)
	}
	return h(payload)
}
