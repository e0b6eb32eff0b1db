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

// RunWASI runs a WASI command module (docs/compatibility.md#wasi-protocol) in a
// fresh instance with argv ["policy.wasm", command], stdin holding input, and
// host answering the guest's host.call imports (their answers are appended to
// stdin). It returns what the guest wrote when it exits with 0, and an
// *ExitError otherwise. The run is bounded by ctx's deadline. A WASIPool gives
// the same results without starting the guest from scratch every time.
func (r *Runtime) RunWASI(ctx context.Context, m *Module, host HostCaller, command string, input []byte) (WASIResult, error) {
	if !m.Exports("_start") {
		return WASIResult{}, errNotCommand
	}
	ctx, leave, err := r.enterGuest(ctx)
	if err != nil {
		return WASIResult{}, err
	}
	defer leave()
	return r.runWASI(ctx, m, host, command, input)
}

var errNotCommand = errors.New("the module does not export _start: it is not a WASI command")

// runWASI is RunWASI on a guest slot the caller holds.
func (r *Runtime) runWASI(ctx context.Context, m *Module, host HostCaller, command string, input []byte) (WASIResult, error) {
	st := r.newCallState(host)
	st.stdin = input
	sink := &stdio{call: st}
	cctx := context.WithValue(ctx, callKey{}, st)
	mod, err := r.instantiate(cctx, m, moduleConfig(m, sink, wasiProgramName, command))
	if err != nil {
		return WASIResult{}, fmt.Errorf("instantiating module: %w", err)
	}
	defer r.closeInstance(ctx, mod)
	it := &interruptible{}
	if err := it.bind(mod, m); err != nil {
		return WASIResult{}, err
	}
	done := it.guard(ctx)
	for _, name := range []string{startExport, "_start"} {
		if fn := mod.ExportedFunction(name); fn != nil {
			if _, err = fn.Call(cctx); err != nil {
				break
			}
		}
	}
	interrupted := done()
	res := WASIResult{Stdout: st.stdout.buf, Stderr: st.stderrText()}
	if tooLarge := st.outputError(); tooLarge != nil && !interrupted {
		return WASIResult{Stderr: res.Stderr}, tooLarge
	}
	if err != nil {
		var exit *exitPanic
		if errors.As(err, &exit) && exit.code == 0 && !interrupted {
			return res, nil
		}
		r.giveBack.request()
		return res, callError(ctx, err, res.Stderr, interrupted)
	}
	return res, nil
}
