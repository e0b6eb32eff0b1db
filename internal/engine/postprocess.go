package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/observability"
)

// Post-processing: what the engine does to a policy's answer to an admission
// request (OriginValidate) before it goes back, in Kubewarden's order
// (docs/compatibility.md#post-processing): monitor mode, then the mutation gate
// (allowedToMutate), then the custom rejection message. Audit requests and raw
// validation get the policy's answer as it is.

// Messages of post-processing; the rejection is Kubewarden's wording.
const (
	fmtNotAllowedMut = "Request rejected by policy %s. The policy attempted to mutate the request, but it is currently configured to not allow mutations."
	msgMonitorLog    = "policy evaluation (monitor mode)"
)

// postProcess applies monitor mode, the mutation gate and the custom
// rejection message, in Kubewarden's order
// (docs/compatibility.md#post-processing).
func (e *Engine) postProcess(ctx context.Context, p *Policy, resp *admission.Response, mutatedObject json.RawMessage) *admission.Response {
	if p.Mode == ModeMonitor {
		attrs := []any{
			observability.KeyPolicyID, p.ID,
			observability.KeyRequestUID, resp.UID,
			observability.KeyAllowed, resp.Allowed,
			observability.KeyMutated, resp.Patch != nil,
			"allowed_to_mutate", p.AllowedToMutate,
		}
		if resp.Status != nil {
			attrs = append(attrs, observability.KeyMessage, resp.Status.Message, observability.KeyCode, resp.Status.Code)
		}
		if resp.Patch != nil {
			attrs = append(attrs, "patch", string(resp.Patch), "mutated_object", string(mutatedObject))
		}
		e.logger.InfoContext(ctx, msgMonitorLog, attrs...)
		out := *resp
		out.Allowed, out.Patch, out.PatchType, out.Status = true, nil, "", nil
		return &out
	}
	if !p.AllowedToMutate && resp.Patch != nil {
		out := *resp
		out.Allowed, out.Patch, out.PatchType = false, nil, ""
		out.Status = &admission.Status{Message: fmt.Sprintf(fmtNotAllowedMut, p.ID)}
		resp = &out
	}
	if !resp.Allowed && p.Message != "" {
		out := *resp
		status := admission.Status{}
		if resp.Status != nil {
			status = *resp.Status
		}
		details := admission.StatusDetails{}
		if status.Details != nil {
			details = *status.Details
		}
		details.Causes = append(append([]admission.Cause(nil), details.Causes...), admission.Cause{Message: status.Message})
		status.Message, status.Details = p.Message, &details
		out.Status = &status
		resp = &out
	}
	return resp
}
