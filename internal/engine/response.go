package engine

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/wI2L/jsondiff"

	"github.com/wardenhq/warden/internal/admission"
)

// validationResponse is what a policy answers to validate
// (docs/compatibility.md#validation-requests-and-responses).
type validationResponse struct {
	Accepted         bool              `json:"accepted"`
	Message          *string           `json:"message"`
	Code             *int32            `json:"code"`
	MutatedObject    json.RawMessage   `json:"mutated_object"`
	AuditAnnotations map[string]string `json:"audit_annotations"`
	Warnings         []string          `json:"warnings"`
}

// settingsValidationResponse is what a policy answers to validate_settings.
type settingsValidationResponse struct {
	Valid   bool    `json:"valid"`
	Message *string `json:"message"`
}

// Messages users see; they are Kubewarden's
// (docs/compatibility.md#validation-requests-and-responses,
// docs/compatibility.md#post-processing).
const (
	msgDeleteMutation = "Incoming object is null, which happens only with DELETE operations, but the policy is attempting a mutation. This is not allowed"
	msgTimeout        = "Policy execution interrupted because it exceeded the allowed execution time"
)

// internalError is the response for a failed evaluation.
func internalError(uid, message string) *admission.Response {
	return reject(uid, "internal server error: "+message, 500)
}

func reject(uid, message string, code int32) *admission.Response {
	return &admission.Response{UID: uid, Allowed: false, Status: &admission.Status{Message: message, Code: code}}
}

// toAdmissionResponse converts a policy's answer. base is what a mutation is
// diffed against: the request's object, or the whole request for raw
// policies; nil when there is none (DELETE).
func toAdmissionResponse(uid string, base json.RawMessage, vr *validationResponse) (*admission.Response, error) {
	mutated := len(vr.MutatedObject) > 0 && !bytes.Equal(vr.MutatedObject, []byte("null"))
	if mutated && isNull(base) {
		return &admission.Response{UID: uid, Status: &admission.Status{Message: msgDeleteMutation}}, nil
	}
	resp := &admission.Response{
		UID:              uid,
		Allowed:          vr.Accepted,
		AuditAnnotations: vr.AuditAnnotations,
		Warnings:         vr.Warnings,
	}
	if vr.Message != nil || vr.Code != nil {
		resp.Status = &admission.Status{}
		if vr.Message != nil {
			resp.Status.Message = *vr.Message
		}
		if vr.Code != nil {
			resp.Status.Code = *vr.Code
		}
	}
	if mutated {
		patch, err := jsondiff.CompareJSON(base, vr.MutatedObject)
		if err != nil {
			return nil, fmt.Errorf("computing the patch of the mutated object: %w", err)
		}
		if len(patch) > 0 {
			b, err := json.Marshal(patch)
			if err != nil {
				return nil, err
			}
			resp.Patch, resp.PatchType = b, admission.PatchTypeJSONPatch
		}
	}
	return resp, nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}
