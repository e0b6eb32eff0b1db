package policyserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/observability"
)

// apiError is the body of every non-200 answer: {"message": ..., "status": N}.
type apiError struct {
	Message string `json:"message"`
	Status  int    `json:"status"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"message":"Something went wrong","status":500}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, message string) {
	writeJSON(w, status, apiError{Message: message, Status: status})
}

// readJSON reads a bounded JSON body. On failure it has answered with the
// status and message axum's Json extractor uses, and returns nil. Decoding
// errors are the caller's: see decodeError.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request) []byte {
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mediaType != "application/json" && !isJSONSuffix(mediaType)) {
		writeError(w, http.StatusUnsupportedMediaType, "Expected request with `Content-Type: application/json`")
		return nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxRequestBodySize))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge,
				fmt.Sprintf("Failed to buffer the request body: length limit exceeded (the limit is %d bytes)", tooLarge.Limit))
			return nil
		}
		writeError(w, http.StatusBadRequest, "Failed to buffer the request body: "+err.Error())
		return nil
	}
	return body
}

func isJSONSuffix(mediaType string) bool {
	return len(mediaType) > 5 && mediaType[len(mediaType)-5:] == "+json"
}

// decodeError answers a body that did not decode, as axum's Json extractor
// does: 400 when it is not JSON (encoding/json checks the whole document
// before decoding any of it), 422 when it is JSON of the wrong shape.
func decodeError(w http.ResponseWriter, err error) {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Failed to parse the request body as JSON: %s at offset %d", se.Error(), se.Offset))
		return
	}
	writeError(w, http.StatusUnprocessableEntity, "Failed to deserialize the JSON body into the target type: "+err.Error())
}

// handleReview serves /validate/{id} and /audit/{id}.
func (s *Server) handleReview(origin engine.Origin) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body := s.readJSON(w, r)
		if body == nil {
			return
		}
		req, err := admission.DecodeReview(body)
		if err != nil {
			decodeError(w, err)
			return
		}
		id := r.PathValue("id")
		resp, err := s.engine.Load().Validate(r.Context(), id, req, origin)
		if err != nil {
			s.evaluationError(w, r, id, err)
			return
		}
		s.logDecision(r, id, req.UID, resp)
		writeJSON(w, http.StatusOK, admission.NewReview(resp))
	}
}

type rawReview struct {
	Request json.RawMessage `json:"request"`
}

type rawReviewResponse struct {
	Response *admission.Response `json:"response"`
}

// handleRaw serves /validate_raw/{id}: {"request": any} -> {"response": ...}.
func (s *Server) handleRaw(w http.ResponseWriter, r *http.Request) {
	body := s.readJSON(w, r)
	if body == nil {
		return
	}
	var in rawReview
	if err := json.Unmarshal(body, &in); err != nil {
		decodeError(w, err)
		return
	}
	if len(in.Request) == 0 {
		decodeError(w, errors.New("missing field `request`"))
		return
	}
	id := r.PathValue("id")
	resp, err := s.engine.Load().ValidateRaw(r.Context(), id, in.Request)
	if err != nil {
		s.evaluationError(w, r, id, err)
		return
	}
	s.logDecision(r, id, resp.UID, resp)
	writeJSON(w, http.StatusOK, rawReviewResponse{Response: resp})
}

func (s *Server) evaluationError(w http.ResponseWriter, r *http.Request, id string, err error) {
	var notFound *engine.PolicyNotFoundError
	if errors.As(err, &notFound) {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	s.logger.ErrorContext(r.Context(), "evaluation error", observability.KeyPolicyID, id, observability.KeyError, err)
	writeError(w, http.StatusInternalServerError, "Something went wrong")
}

func (s *Server) logDecision(r *http.Request, id, uid string, resp *admission.Response) {
	if !s.logger.Enabled(r.Context(), observability.LevelTrace) {
		return
	}
	attrs := []any{observability.KeyPolicyID, id, observability.KeyRequestUID, uid,
		observability.KeyAllowed, resp.Allowed, observability.KeyMutated, resp.Patch != nil}
	if resp.Status != nil {
		attrs = append(attrs, observability.KeyMessage, resp.Status.Message, observability.KeyCode, resp.Status.Code)
	}
	s.logger.Log(r.Context(), observability.LevelTrace, "policy evaluated", attrs...)
}
