package wasm

import (
	"context"
	"errors"
	"fmt"
)

// WASIResult is what a WASI command wrote.
type WASIResult struct {
	Stdout []byte
	Stderr string // trimmed
}

// wasiProgramName is argv[0] of WASI policies, as Kubewarden passes it.
const wasiProgramName = "policy.wasm"

// RunWASI runs a WASI command module (compat 2.4) in a fresh instance with
// argv ["policy.wasm", command], stdin holding input, and host answering the
// guest's host.call imports (their answers are appended to stdin). It returns
// what the guest wrote when it exits with 0, and an *ExitError otherwise. The
// run is bounded by ctx's deadline.
func (r *Runtime) RunWASI(ctx context.Context, m *Module, host HostCaller, command string, input []byte) (WASIResult, error) {
	if !m.Exports("_start") {
		return WASIResult{}, errors.New("the module does not export _start: it is not a WASI command")
	}
	st := newCallState(host)
	st.stdin = input
	sink := &stdio{call: st}
	cfg := moduleConfig(sink, wasiProgramName, command).WithStartFunctions("_start")
	mod, err := r.rt.InstantiateModule(context.WithValue(ctx, callKey{}, st), m.compiled, cfg)
	if mod != nil {
		defer mod.Close(ctx)
	}
	res := WASIResult{Stdout: st.stdout.buf, Stderr: st.stderrText()}
	if err != nil {
		var exit *exitPanic
		if errors.As(err, &exit) && exit.code == 0 {
			return res, nil
		}
		return res, callError(ctx, err, res.Stderr)
	}
	if mod == nil {
		return res, fmt.Errorf("instantiating module: no instance")
	}
	return res, nil
}
