package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/wardenhq/warden/internal/wasm"
)

// runner runs one policy module in its execution mode and speaks its
// protocol. Implementations are safe for concurrent use.
type runner interface {
	// validate returns the policy's ValidationResponse to req with
	// settings, or the message of an internal-server-error rejection.
	validate(ctx context.Context, host wasm.HostCaller, req request, settings json.RawMessage) (*validationResponse, error)
	// validateSettings returns the policy's verdict on settings.
	validateSettings(ctx context.Context, host wasm.HostCaller, settings []byte) settingsValidationResponse
	close(ctx context.Context)
}

// validationRequest is the ValidationRequest handed to waPC and WASI
// policies: {"request": <request as received>, "settings": <settings>}.
func validationRequest(req request, settings json.RawMessage) []byte {
	size := len(`{"request":,"settings":}`) + len(req.body) + len(settings)
	return appendValidationRequest(make([]byte, 0, size), req, settings)
}

func appendValidationRequest(b []byte, req request, settings json.RawMessage) []byte {
	b = append(b, `{"request":`...)
	b = append(b, req.body...)
	b = append(b, `,"settings":`...)
	b = append(b, settings...)
	return append(b, '}')
}

// requestBuffers holds ValidationRequest buffers for waPC calls, which copy
// the payload into the guest and keep nothing of it.
var requestBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledRequest is the largest buffer requestBuffers keeps: a rare large
// request should not pin its buffer.
const maxPooledRequest = 64 << 10

// wapcRunner runs kubewarden-wapc modules
// (docs/compatibility.md#wapc-protocol).
type wapcRunner struct{ w *wasm.Wapc }

func (r wapcRunner) validate(ctx context.Context, host wasm.HostCaller, req request, settings json.RawMessage) (*validationResponse, error) {
	buf := requestBuffers.Get().(*[]byte)
	*buf = appendValidationRequest((*buf)[:0], req, settings)
	out, err := r.w.Call(ctx, host, "validate", *buf)
	if cap(*buf) <= maxPooledRequest {
		requestBuffers.Put(buf)
	}
	if err != nil {
		return nil, err
	}
	var vr validationResponse
	if err := json.Unmarshal(out, &vr); err != nil {
		return nil, fmt.Errorf("invalid response from policy: %w", err)
	}
	return &vr, nil
}

func (r wapcRunner) validateSettings(ctx context.Context, host wasm.HostCaller, settings []byte) settingsValidationResponse {
	out, err := r.w.Call(ctx, host, "validate_settings", settings)
	if err != nil {
		// Kubewarden prints the wapc-rs error with Rust's Debug format.
		msg := err.Error()
		var gce *wasm.GuestCallError
		if errors.As(err, &gce) {
			msg = fmt.Sprintf("GuestCallFailure(%q)", gce.Msg)
		}
		return invalidSettings("Error invoking settings validation callback: " + msg)
	}
	var svr settingsValidationResponse
	if err := json.Unmarshal(out, &svr); err != nil {
		return invalidSettings(fmt.Sprintf("error: InvalidResponseWithError(%v)", err))
	}
	return svr
}

func (r wapcRunner) close(ctx context.Context) { r.w.Close(ctx) }

// wasiRunner runs WASI command modules (docs/compatibility.md#wasi-protocol):
// validate on a pool of instances restored to their state at the first read of
// stdin (shared by the policies of the module), validate-settings, which runs
// at load only, in a fresh instance per call.
type wasiRunner struct {
	rt     *wasm.Runtime
	mod    *wasm.Module
	pool   *wasm.WASIPool // of the "validate" command
	onWarn func(ctx context.Context, op, stderr string)
}

func (r wasiRunner) validate(ctx context.Context, host wasm.HostCaller, req request, settings json.RawMessage) (*validationResponse, error) {
	res, err := r.pool.Run(ctx, host, validationRequest(req, settings))
	if err != nil {
		var exit *wasm.ExitError
		if errors.As(err, &exit) {
			// Kubewarden's error for a failed run is the guest's stderr.
			return nil, &guestStderrError{msg: exit.Message(), err: err}
		}
		return nil, err
	}
	if res.Stderr != "" {
		r.onWarn(ctx, "validate", res.Stderr)
	}
	var vr validationResponse
	if err := json.Unmarshal(res.Stdout, &vr); err != nil {
		//lint:ignore ST1005 Kubewarden's wording, which users and policies see
		return nil, fmt.Errorf("Cannot deserialize policy validation response: %w", err)
	}
	return &vr, nil
}

func (r wasiRunner) validateSettings(ctx context.Context, host wasm.HostCaller, settings []byte) settingsValidationResponse {
	res, err := r.rt.RunWASI(ctx, r.mod, host, "validate-settings", settings)
	if err != nil {
		var exit *wasm.ExitError
		if errors.As(err, &exit) {
			return invalidSettings(exit.Stderr)
		}
		return invalidSettings(err.Error())
	}
	if res.Stderr != "" {
		r.onWarn(ctx, "validate-settings", res.Stderr)
	}
	var svr settingsValidationResponse
	if err := json.Unmarshal(res.Stdout, &svr); err != nil {
		return invalidSettings(fmt.Sprintf("Cannot deserialize settings validation response: %v", err))
	}
	return svr
}

func (r wasiRunner) close(ctx context.Context) { r.pool.Close(ctx) }

func invalidSettings(msg string) settingsValidationResponse {
	return settingsValidationResponse{Valid: false, Message: &msg}
}

// guestStderrError is a failed WASI run answered, as Kubewarden answers it,
// with the guest's stderr; it keeps the whole failure for the debug log.
type guestStderrError struct {
	msg string
	err error
}

func (e *guestStderrError) Error() string { return e.msg }
func (e *guestStderrError) Unwrap() error { return e.err }
