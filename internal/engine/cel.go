package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/wardenhq/warden/internal/celpolicy"
	"github.com/wardenhq/warden/internal/wasm"
)

// celRunner runs Kubewarden's cel-policy natively (Warden's cel mode): its
// settings are compiled once, by newCELRunner, and every request is
// evaluated in process with cel-policy's answers. cel-policy treats a raw
// request as an AdmissionRequest, and so does celRunner.
type celRunner struct {
	policy   *celpolicy.Policy
	settings json.RawMessage
}

// newCELRunner compiles cel-policy settings (null or empty: {}). Its error is
// the verdict on invalid settings, worded as cel-policy's validate-settings
// words it: the loader reports it as the settings error.
func newCELRunner(settings json.RawMessage) (runner, error) {
	if isNull(settings) {
		settings = json.RawMessage("{}")
	}
	p, err := celpolicy.Compile(settings)
	if err != nil {
		return nil, err
	}
	return &celRunner{policy: p, settings: settings}, nil
}

// validate ignores settings: the runner was compiled with its own. A
// policy that reads params (paramRef) reads them with the kubernetes host
// calls cel-policy makes, through host, the policy's gate: it reads only the
// kinds it was granted, as the wasm cel-policy would.
func (r *celRunner) validate(ctx context.Context, host wasm.HostCaller, req request, _ json.RawMessage) (*validationResponse, error) {
	var params celpolicy.ParamSource
	if r.policy.ReadsParams() {
		params = celpolicy.KubernetesHostCall(func(ctx context.Context, operation string, payload []byte) ([]byte, error) {
			return host.HostCall(ctx, "kubewarden", kubernetesNamespace, operation, payload)
		})
	}
	var res celpolicy.Result
	var err error
	if req.tape != nil {
		res, err = r.policy.ValidateParsedWith(ctx, params, req.tape, req.node)
	} else {
		res, err = r.policy.ValidateWith(ctx, params, req.body)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			// Answered as a wasm policy's timeout is.
			return nil, wasm.ErrDeadlineExceeded
		}
		return nil, err
	}
	vr := &validationResponse{Accepted: res.Accepted}
	if !res.Accepted {
		vr.Message, vr.Code = &res.Message, &res.Code
	}
	return vr, nil
}

// validateSettings accepts the settings the runner was compiled with; other
// settings are compiled to be judged.
func (r *celRunner) validateSettings(_ context.Context, _ wasm.HostCaller, settings []byte) settingsValidationResponse {
	if !bytes.Equal(settings, r.settings) {
		if _, err := newCELRunner(settings); err != nil {
			return invalidSettings(err.Error())
		}
	}
	return settingsValidationResponse{Valid: true}
}

func (r *celRunner) close(context.Context) {}
