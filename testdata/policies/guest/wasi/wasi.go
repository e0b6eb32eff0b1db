// Package wasi is the guest side of Kubewarden's WASI execution mode (compat
// 2.4) for policies built with the standard Go toolchain as WASI commands:
//
//	GOOS=wasip1 GOARCH=wasm go build
//
// The host runs the command with argv ["policy.wasm", "validate"] or
// ["policy.wasm", "validate-settings"] and the request on stdin, and reads the
// response from stdout. On wasip1, host calls go through the import
// "host"."call" (host_wasip1.go).
//
// It must be linked only into WASI policies (a waPC host does not provide
// "host"."call") and must not import guest/wapc.
package wasi

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Handler answers one WASI operation: it gets stdin (the ValidationRequest
// or the settings) and returns the JSON to write on stdout.
type Handler func(input []byte) ([]byte, error)

// Run serves the operation named by os.Args[1] and exits the process: 0 after
// writing the handler's response on stdout; 1 after writing the error (an
// unknown operation, a failed read, or the handler's error) on stderr.
func Run(validate, validateSettings Handler) {
	os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr, validate, validateSettings))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer, validate, validateSettings Handler) int {
	out, err := serve(args, stdin, validate, validateSettings)
	if err != nil {
		fmt.Fprint(stderr, err)
		return 1
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "writing the response: %v", err)
		return 1
	}
	return 0
}

func serve(args []string, stdin io.Reader, validate, validateSettings Handler) ([]byte, error) {
	if len(args) < 2 {
		return nil, errors.New("missing operation argument: validate or validate-settings")
	}
	var h Handler
	switch args[1] {
	case "validate":
		h = validate
	case "validate-settings":
		h = validateSettings
	default:
		return nil, fmt.Errorf("unknown operation %q", args[1])
	}
	in, err := io.ReadAll(stdin)
	if err != nil {
		return nil, fmt.Errorf("reading stdin: %w", err)
	}
	return h(in)
}
