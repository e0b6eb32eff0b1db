package wasm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// HostCaller answers the host calls of a guest. It must be safe for
// concurrent use: one HostCaller usually serves many evaluations at once.
type HostCaller interface {
	HostCall(ctx context.Context, binding, namespace, operation string, payload []byte) ([]byte, error)
}

// maxStderr bounds what a guest writes on stderr in one call; the rest is
// dropped. Its stdout is bounded by Config.MaxResponseBytes.
const maxStderr = 64 << 10

// callState is what the host functions of one guest call read and write.
// It belongs to the goroutine running the call.
type callState struct {
	host HostCaller
	// ctx, when set, is the context of the evaluation, for host calls made
	// from a guest call that outlives it (WASIPool).
	ctx context.Context
	// hostCalled records that the guest made a host call.
	hostCalled bool
	// responseTooLarge is the size of a waPC answer over the cap, which
	// was not read; 0 when there is none.
	responseTooLarge int

	// waPC
	op, payload                []byte
	guestResponse, guestError  []byte
	hasResponse, hasError      bool
	hostResponse, hostError    []byte
	hasHostResponse, hasHostEr bool

	// WASI: stdin is a pipe the host appends host-call answers to; reading
	// past its end returns EOF until more is appended.
	stdin    []byte
	stdinPos int
	stdout   boundedBuffer
	stderr   boundedBuffer
}

// callKey is the context key of the state of a call: a *callState, or the
// *stdio of an instance whose long-lived call serves one request after
// another (WASIPool).
type callKey struct{}

func stateOf(ctx context.Context) *callState {
	switch v := ctx.Value(callKey{}).(type) {
	case *callState:
		return v
	case *stdio:
		return v.call
	}
	return nil
}

// boundedBuffer collects output up to a limit, then refuses more.
type boundedBuffer struct {
	buf   []byte
	limit int
	over  bool // a write was refused
}

var errOutputTooLarge = errors.New("guest output exceeds the limit")

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if len(b.buf)+len(p) > b.limit {
		b.over = true
		return 0, errOutputTooLarge
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// stdio routes an instance's standard streams to the call running on it.
// wazero fixes the streams at instantiation; the call behind them changes.
type stdio struct {
	call *callState
}

type stdinReader struct{ s *stdio }
type stdoutWriter struct{ s *stdio }
type stderrWriter struct{ s *stdio }

func (s *stdio) stdinReader() io.Reader  { return stdinReader{s} }
func (s *stdio) stdoutWriter() io.Writer { return stdoutWriter{s} }
func (s *stdio) stderrWriter() io.Writer { return stderrWriter{s} }

func (r stdinReader) Read(p []byte) (int, error) {
	st := r.s.call
	if st == nil {
		return 0, io.EOF
	}
	return st.readStdin(p)
}

// readStdin reads what the guest has not read yet of stdin.
func (st *callState) readStdin(p []byte) (int, error) {
	if st.stdinPos >= len(st.stdin) {
		return 0, io.EOF
	}
	n := copy(p, st.stdin[st.stdinPos:])
	st.stdinPos += n
	return n, nil
}

func (w stdoutWriter) Write(p []byte) (int, error) {
	if w.s.call == nil {
		return len(p), nil
	}
	return w.s.call.stdout.Write(p)
}

func (w stderrWriter) Write(p []byte) (int, error) {
	if w.s.call == nil {
		return len(p), nil
	}
	n, err := w.s.call.stderr.Write(p)
	if err != nil { // stderr is diagnostics: drop the excess, never fail the guest
		return len(p), nil
	}
	return n, nil
}

// newCallState returns a state ready for one guest call of r.
func (r *Runtime) newCallState(host HostCaller) *callState {
	return &callState{
		host:   host,
		stdout: boundedBuffer{limit: r.maxResponse},
		stderr: boundedBuffer{limit: maxStderr},
	}
}

// outputError is the error of a WASI run whose stdout went over the cap on
// answers, nil when it did not.
func (st *callState) outputError() error {
	if !st.stdout.over {
		return nil
	}
	return &ResponseTooLargeError{Limit: st.stdout.limit}
}

func (st *callState) stderrText() string {
	return strings.TrimSpace(string(st.stderr.buf))
}

// Host module names and functions of the guest ABIs
// (docs/compatibility.md#wapc-protocol, docs/compatibility.md#wasi-protocol).
const (
	wapcModule      = "wapc"
	wasiHostModule  = "host"
	javyHostModule  = "kubewarden:javy/host"
	wasiHostCall    = "call"
	wasiPreview1    = "wasi_snapshot_preview1"
	hostCallBinding = "kubewarden"
)

var (
	i32   = api.ValueTypeI32
	i32x1 = []api.ValueType{i32}
	i32x2 = []api.ValueType{i32, i32}
	i32x8 = []api.ValueType{i32, i32, i32, i32, i32, i32, i32, i32}
)

// instantiateHostModules instantiates the host modules in rt, the
// runtime's own or its in-memory one.
func (r *Runtime) instantiateHostModules(ctx context.Context, rt wazero.Runtime) error {
	if err := r.instantiateWapc(ctx, rt); err != nil {
		return err
	}
	for _, name := range []string{wasiHostModule, javyHostModule} {
		_, err := rt.NewHostModuleBuilder(name).
			NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(r.wasiCall), i32x8, i32x1).Export(wasiHostCall).
			Instantiate(ctx)
		if err != nil {
			return err
		}
	}
	b := rt.NewHostModuleBuilder(wasiPreview1)
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(b)
	// Our proc_exit does not close the module: see exitPanic. On an
	// instance of a WASIPool it ends the request instead (wasiInstance.exit).
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			code := api.DecodeU32(stack[0])
			if in := pooledInstance(ctx); in != nil {
				in.exit(m, code) // returns only when the instance has no snapshot
			}
			panic(&exitPanic{code: code})
		}), i32x1, nil).
		WithParameterNames("rval").
		Export("proc_exit")
	// The listeners watch fd_read and fd_close for WASIPool (wasiListeners);
	// wazero's own implementations still run.
	_, err := b.Instantiate(experimental.WithFunctionListenerFactory(ctx, wasiListeners{}))
	return err
}

func (r *Runtime) instantiateWapc(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(wapcModule)
	export := func(name string, params, results []api.ValueType, fn api.GoModuleFunc) {
		b.NewFunctionBuilder().WithGoModuleFunction(fn, params, results).Export(name)
	}
	export("__guest_request", i32x2, nil, func(ctx context.Context, m api.Module, stack []uint64) {
		st := stateOf(ctx)
		writeGuest(m, stack[0], st.op)
		writeGuest(m, stack[1], st.payload)
	})
	// An answer over the cap is not read: the call fails with
	// ResponseTooLargeError (Wapc.Call).
	export("__guest_response", i32x2, nil, func(ctx context.Context, m api.Module, stack []uint64) {
		st := stateOf(ctx)
		if n := int(api.DecodeU32(stack[1])); n > r.maxResponse {
			st.responseTooLarge = n
			return
		}
		st.guestResponse = readGuest(m, stack[0], stack[1])
		st.hasResponse = true
	})
	export("__guest_error", i32x2, nil, func(ctx context.Context, m api.Module, stack []uint64) {
		st := stateOf(ctx)
		if n := int(api.DecodeU32(stack[1])); n > r.maxResponse {
			st.responseTooLarge = n
			return
		}
		st.guestError = readGuest(m, stack[0], stack[1])
		st.hasError = true
	})
	export("__host_call", i32x8, i32x1, func(ctx context.Context, m api.Module, stack []uint64) {
		st := stateOf(ctx)
		st.hostResponse, st.hostError = nil, nil
		st.hasHostResponse, st.hasHostEr = false, false
		resp, err := r.hostCall(ctx, st, m, stack)
		if err != nil {
			st.hostError, st.hasHostEr = []byte(err.Error()), true
			stack[0] = 0
			return
		}
		st.hostResponse, st.hasHostResponse = resp, true
		stack[0] = 1
	})
	export("__host_response_len", nil, i32x1, func(ctx context.Context, _ api.Module, stack []uint64) {
		stack[0] = uint64(len(stateOf(ctx).hostResponse))
	})
	export("__host_response", i32x1, nil, func(ctx context.Context, m api.Module, stack []uint64) {
		writeGuest(m, stack[0], stateOf(ctx).hostResponse)
	})
	export("__host_error_len", nil, i32x1, func(ctx context.Context, _ api.Module, stack []uint64) {
		stack[0] = uint64(len(stateOf(ctx).hostError))
	})
	export("__host_error", i32x1, nil, func(ctx context.Context, m api.Module, stack []uint64) {
		writeGuest(m, stack[0], stateOf(ctx).hostError)
	})
	// A message over the cap on host-call payloads is cut there.
	export("__console_log", i32x2, nil, func(ctx context.Context, m api.Module, stack []uint64) {
		n := api.DecodeU32(stack[1])
		if int(n) <= r.maxHostCall {
			r.logger.InfoContext(ctx, "policy console output", "message", string(readGuest(m, stack[0], stack[1])))
			return
		}
		r.logger.InfoContext(ctx, "policy console output", "message", string(readGuest(m, stack[0], uint64(r.maxHostCall))),
			"truncated_bytes", int(n)-r.maxHostCall)
	})
	_, err := b.Instantiate(ctx)
	return err
}

// wasiCall implements host.call (docs/compatibility.md#wasi-protocol): the same
// arguments as waPC's __host_call, 0 on success and 1 on failure, the answer
// appended to stdin.
func (r *Runtime) wasiCall(ctx context.Context, m api.Module, stack []uint64) {
	st := stateOf(ctx)
	resp, err := r.hostCall(ctx, st, m, stack)
	if st == nil {
		stack[0] = 1
		return
	}
	if err != nil {
		st.stdin = append(st.stdin, err.Error()...)
		stack[0] = 1
		return
	}
	st.stdin = append(st.stdin, resp...)
	stack[0] = 0
}

// unknownBindingError is the error a guest gets for a binding other than
// "kubewarden"; the text is Kubewarden's.
type unknownBindingError struct{ binding string }

func (e unknownBindingError) Error() string { return "unknown binding: " + e.binding }

// hostCall reads a host call's arguments out of guest memory and asks the
// call's HostCaller. A payload over the cap is refused unread
// (HostCallTooLargeError). The host call is bounded by the deadline of the
// guest call it belongs to: when that passes first, the guest call ends
// there (the guest is not resumed, and the call returns
// ErrDeadlineExceeded), and the host's answer, when it comes, is dropped.
func (r *Runtime) hostCall(ctx context.Context, st *callState, m api.Module, stack []uint64) ([]byte, error) {
	if st != nil {
		st.hostCalled = true
	}
	size := uint64(api.DecodeU32(stack[1])) + uint64(api.DecodeU32(stack[3])) +
		uint64(api.DecodeU32(stack[5])) + uint64(api.DecodeU32(stack[7]))
	if size > uint64(r.maxHostCall) {
		return nil, &HostCallTooLargeError{Size: size, Limit: r.maxHostCall}
	}
	binding := string(readGuest(m, stack[0], stack[1]))
	namespace := string(readGuest(m, stack[2], stack[3]))
	operation := string(readGuest(m, stack[4], stack[5]))
	payload := readGuest(m, stack[6], stack[7])
	if binding != hostCallBinding {
		return nil, unknownBindingError{binding}
	}
	if st == nil || st.host == nil {
		return nil, errors.New("host calls are not available here")
	}
	// The host may wait (on the API server, a registry): meanwhile the
	// call runs no guest code, so another may have its slot.
	sl, callCtx := slotOf(ctx)
	sl.pause()
	defer sl.resume(callCtx)
	if st.ctx != nil {
		ctx = st.ctx
	}
	return boundedHostCall(ctx, st.host, binding, namespace, operation, payload)
}

// boundedHostCall runs one host call within ctx, even when the host does not
// honour ctx: past ctx's end it panics with errHostCallAbandoned, which ends
// the guest call (its guard has set the interrupt flag: the caller reports
// the deadline), and leaves the host call to finish on its own.
func boundedHostCall(ctx context.Context, host HostCaller, binding, namespace, operation string, payload []byte) ([]byte, error) {
	if ctx.Done() == nil {
		return host.HostCall(ctx, binding, namespace, operation, payload)
	}
	if ctx.Err() != nil {
		panic(errHostCallAbandoned)
	}
	type answer struct {
		b   []byte
		err error
	}
	done := make(chan answer, 1) // the host never waits on it
	go func() {
		b, err := host.HostCall(ctx, binding, namespace, operation, payload)
		done <- answer{b, err}
	}()
	select {
	case a := <-done:
		if ctx.Err() != nil {
			panic(errHostCallAbandoned) // the deadline passed meanwhile
		}
		return a.b, a.err
	case <-ctx.Done():
		panic(errHostCallAbandoned)
	}
}

// errHostCallAbandoned ends a guest call whose host call outlived it.
var errHostCallAbandoned = errors.New("host call abandoned: the guest call's deadline passed")

// HostCallTooLargeError is the error a guest gets for a host call whose
// arguments are over the cap (Config.MaxHostCallBytes).
type HostCallTooLargeError struct {
	Size  uint64
	Limit int
}

func (e *HostCallTooLargeError) Error() string {
	return fmt.Sprintf("the host call's payload of %d bytes is over the limit of %d bytes per host call (--max-host-call-payload-bytes)", e.Size, e.Limit)
}

// readGuest copies len bytes at ptr out of guest memory; out-of-range reads
// trap the guest.
func readGuest(m api.Module, ptr, length uint64) []byte {
	b, ok := m.Memory().Read(api.DecodeU32(ptr), api.DecodeU32(length))
	if !ok {
		panic(errGuestOutOfBounds)
	}
	return append([]byte(nil), b...)
}

// writeGuest copies b into guest memory at ptr; out-of-range writes trap the
// guest.
func writeGuest(m api.Module, ptr uint64, b []byte) {
	if !m.Memory().Write(api.DecodeU32(ptr), b) {
		panic(errGuestOutOfBounds)
	}
}

var errGuestOutOfBounds = errors.New("guest passed a buffer outside its memory")

// ResponseTooLargeError is a guest call whose answer was over the cap on
// answers (Config.MaxResponseBytes); the answer was not read.
type ResponseTooLargeError struct {
	Size  int // bytes of the answer; 0 when unknown (WASI stdout stops at the cap)
	Limit int
}

func (e *ResponseTooLargeError) Error() string {
	if e.Size > 0 {
		return fmt.Sprintf("the policy's response is %d bytes, over the limit of %d bytes per response (--max-policy-response-bytes)", e.Size, e.Limit)
	}
	return fmt.Sprintf("the policy's response is over the limit of %d bytes per response (--max-policy-response-bytes)", e.Limit)
}
