package engine

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/observability"
	"github.com/wardenhq/warden/internal/rego"
	"github.com/wardenhq/warden/internal/wasm"
)

// Rego policies compiled to wasm run in two modes
// (docs/compatibility.md#opa-mode, docs/compatibility.md#gatekeeper-mode) that
// differ only in what they are given and how their result reads: opa and
// gatekeeper.

// Messages users see; they are Kubewarden's (docs/compatibility.md#opa-mode,
// docs/compatibility.md#gatekeeper-mode).
const (
	msgCannotInterpretOPA = "cannot interpret OPA policy result"
	msgGatekeeperRaw      = "Gatekeeper does not support raw validation requests"
)

// regoModule is what both Rego modes share: a pool of instances with the
// data loaded, the builtins the module leaves to the host, and, for a
// policy granted contextAwareResources, the cluster's objects that make
// each evaluation's data instead.
type regoModule struct {
	opa      *wasm.OPA
	builtins *rego.Builtins
	kube     *regoContext // nil: the data loaded serves every evaluation
}

// opaRunner runs Rego policies in opa mode (docs/compatibility.md#opa-mode).
type opaRunner struct{ *regoModule }

// gatekeeperRunner runs Rego policies in gatekeeper mode
// (docs/compatibility.md#gatekeeper-mode).
type gatekeeperRunner struct {
	*regoModule
	logger *slog.Logger
}

// newRegoRunner prepares a module compiled with wasm.Runtime.CompileOPA for
// mode (metadata.ModeOPA or metadata.ModeGatekeeper): it checks the builtins
// the module needs and loads its data (opa: the settings; gatekeeper: {}).
// An opa runner therefore serves policies with these settings only; a
// gatekeeper runner reads its parameters from each evaluation's settings.
// kube, when not nil, gives each evaluation's data from the cluster; it
// must have been made for the same mode and settings, and the runner closes
// it (at once when newRegoRunner fails). workers bounds the idle instances
// kept. logger receives the warning about a Gatekeeper result that cannot
// be read; nil discards it.
func newRegoRunner(ctx context.Context, rt *wasm.Runtime, mod *wasm.Module, mode string, settings json.RawMessage,
	kube *regoContext, workers int, logger *slog.Logger) (_ runner, err error) {
	if kube != nil {
		defer func() {
			if err != nil {
				kube.close()
			}
		}()
	}
	if mode != metadata.ModeOPA && mode != metadata.ModeGatekeeper {
		return nil, fmt.Errorf("execution mode %s is not a Rego mode", mode)
	}
	o, err := rt.NewOPA(ctx, mod, regoData(mode, settings), workers)
	if err != nil {
		return nil, err
	}
	b, err := rego.NewBuiltins(o.Builtins())
	if err != nil {
		o.Close(ctx)
		return nil, err
	}
	m := &regoModule{opa: o, builtins: b, kube: kube}
	if mode == metadata.ModeOPA {
		return opaRunner{m}, nil
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return gatekeeperRunner{regoModule: m, logger: logger}, nil
}

// regoData is the data document of a module's evaluations without a
// context: the settings in opa mode, {} in gatekeeper mode. With one, the
// regoContext gives the data, in versions that the instances load once each
// (wasm.OPAData).
func regoData(mode string, settings json.RawMessage) []byte {
	if mode == metadata.ModeOPA && !isNull(settings) {
		return settings
	}
	return []byte("{}")
}

// eval evaluates the module's entrypoint with input.
func (m *regoModule) eval(ctx context.Context, input []byte) ([]byte, error) {
	var data wasm.OPAData // zero: the data NewOPA loaded
	if m.kube != nil {
		var err error
		if data, err = m.kube.data(ctx); err != nil {
			return nil, err
		}
	}
	out, err := m.opa.EvalWithData(ctx, input, data, m.builtins.NewEval(ctx).Call)
	if errors.Is(err, wasm.ErrDeadlineExceeded) {
		// Kubewarden answers a Rego timeout as any other Rego failure, with
		// an internal server error, not with its timeout message.
		return nil, errors.New(err.Error())
	}
	return out, err
}

// validateSettings accepts any settings: Rego policies have no generic way
// to validate them (docs/compatibility.md#opa-mode).
func (m *regoModule) validateSettings(context.Context, wasm.HostCaller, []byte) settingsValidationResponse {
	return settingsValidationResponse{Valid: true}
}

func (m *regoModule) close(ctx context.Context) {
	m.opa.Close(ctx)
	if m.kube != nil {
		m.kube.close()
	}
}

// validate ignores settings: they are the data the runner loaded.
func (r opaRunner) validate(ctx context.Context, _ wasm.HostCaller, req request, _ json.RawMessage) (*validationResponse, error) {
	out, err := r.eval(ctx, slices.Concat([]byte(`{"request":`), req.body, []byte(`}`)))
	if err != nil {
		return nil, err
	}
	return opaResponse(out, req)
}

// validate gives settings to the policy as its parameters.
func (r gatekeeperRunner) validate(ctx context.Context, _ wasm.HostCaller, req request, settings json.RawMessage) (*validationResponse, error) {
	if req.raw {
		//lint:ignore ST1005 Kubewarden's wording, which users and policies see
		return nil, errors.New(msgGatekeeperRaw)
	}
	out, err := r.eval(ctx, slices.Concat([]byte(`{"parameters":`), settings, []byte(`,"review":`), req.body, []byte(`}`)))
	if err != nil {
		return nil, err
	}
	return r.response(ctx, out), nil
}

// opaResponse reads result[0].result.response, an AdmissionResponse, as a
// ValidationResponse. A patch it carries is applied to the request's object
// (raw requests: the whole request), which the engine diffs again.
func opaResponse(out []byte, req request) (*validationResponse, error) {
	var set []struct {
		Result json.RawMessage `json:"result"`
	}
	var result map[string]json.RawMessage
	if json.Unmarshal(out, &set) != nil || len(set) == 0 || json.Unmarshal(set[0].Result, &result) != nil {
		return nil, errors.New(msgCannotInterpretOPA)
	}
	raw, ok := result["response"]
	if !ok {
		return nil, errors.New(msgCannotInterpretOPA)
	}
	var resp struct {
		UID     *string `json:"uid"`
		Allowed *bool   `json:"allowed"`
		Status  *struct {
			Message *string `json:"message"`
			Code    *int32  `json:"code"`
		} `json:"status"`
		PatchType        *string           `json:"patchType"`
		Patch            *string           `json:"patch"`
		AuditAnnotations map[string]string `json:"auditAnnotations"`
		Warnings         []string          `json:"warnings"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, err
	}
	// Kubewarden reads the response into its AdmissionResponse, where both
	// are required; the uid is then replaced by the request's.
	switch {
	case resp.UID == nil:
		return nil, errors.New("missing field `uid`")
	case resp.Allowed == nil:
		return nil, errors.New("missing field `allowed`")
	}
	vr := &validationResponse{Accepted: *resp.Allowed, AuditAnnotations: resp.AuditAnnotations, Warnings: resp.Warnings}
	if resp.Status != nil {
		vr.Message, vr.Code = resp.Status.Message, resp.Status.Code
	}
	if resp.Patch != nil {
		if resp.PatchType != nil && *resp.PatchType != admission.PatchTypeJSONPatch {
			return nil, fmt.Errorf("unknown patch type %q", *resp.PatchType)
		}
		mutated, err := applyOPAPatch(*resp.Patch, req.object)
		if err != nil {
			return nil, fmt.Errorf("applying the policy's patch: %w", err)
		}
		vr.MutatedObject = mutated
	}
	return vr, nil
}

// applyOPAPatch applies a base64 JSON Patch to base, the request's object.
func applyOPAPatch(patch string, base json.RawMessage) (json.RawMessage, error) {
	ops, err := base64.StdEncoding.DecodeString(patch)
	if err != nil {
		return nil, err
	}
	if isNull(base) {
		// Nothing to patch (DELETE): any mutated object makes the engine
		// answer with Kubewarden's message for that case.
		return ops, nil
	}
	return rego.ApplyJSONPatch(base, ops)
}

// response reads result[0] as {"result": [{"msg": ...}, ...]}.
// A result that does not read so is no violation, as in Kubewarden.
func (r gatekeeperRunner) response(ctx context.Context, out []byte) *validationResponse {
	var set []struct {
		Result *[]struct {
			Msg *string `json:"msg"`
		} `json:"result"`
	}
	err := json.Unmarshal(out, &set)
	if err == nil && (len(set) == 0 || set[0].Result == nil) {
		err = errors.New("no list of violations in the result")
	}
	if err != nil {
		r.logger.WarnContext(ctx, "cannot read the Gatekeeper policy's result; accepting the request as Kubewarden does",
			observability.KeyError, err, "result", string(out))
		return &validationResponse{Accepted: true}
	}
	violations := *set[0].Result
	if len(violations) == 0 {
		return &validationResponse{Accepted: true}
	}
	msgs := make([]string, 0, len(violations))
	for _, v := range violations {
		if v.Msg != nil {
			msgs = append(msgs, *v.Msg)
		}
	}
	msg := strings.Join(msgs, ", ")
	return &validationResponse{Accepted: false, Message: &msg}
}
