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
	b, err := admission.Marshal(v)
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
	body, err := readBody(http.MaxBytesReader(w, r.Body, s.opts.MaxRequestBodySize), r.ContentLength, s.opts.MaxRequestBodySize)
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

// readBody is io.ReadAll starting from a buffer of sizeHint bytes (the
// Content-Length, when it is within limit), where io.ReadAll would grow one
// from 512 bytes and allocate about twice the body.
func readBody(body io.Reader, sizeHint, limit int64) ([]byte, error) {
	if sizeHint <= 0 || sizeHint > limit {
		return io.ReadAll(body)
	}
	b := make([]byte, 0, sizeHint+1) // +1: reading the end needs no growth
	for {
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
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
	spanName := observability.SpanValidation
	if origin == engine.OriginAudit {
		spanName = observability.SpanAudit
	}
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
		defer req.Release()
		id := r.PathValue("id")
		// As in Kubewarden, a request whose body does not decode has no span.
		ctx, span := s.tracing.Start(r.Context(), spanName, id)
		defer span.End()
		if span.Recording() {
			span.SetRequest(spanRequest(req))
		}
		resp, err := s.env.Validate(ctx, id, req, origin)
		if err != nil {
			s.evaluationError(w, r, id, err, span)
			return
		}
		span.SetResponse(spanResponse(resp))
		s.logDecision(r, id, req.UID, resp)
		writeJSON(w, http.StatusOK, admission.NewReview(resp))
	}
}

// spanRequest is what a span records of req. The resource and subresource
// are not among the fields admission.Request decodes: they are read from the
// raw request, only for a span that records them.
func spanRequest(req *admission.Request) observability.SpanRequest {
	var extra struct {
		Resource struct {
			Group    string `json:"group"`
			Version  string `json:"version"`
			Resource string `json:"resource"`
		} `json:"resource"`
		SubResource string `json:"subResource"`
	}
	_ = json.Unmarshal(req.Raw, &extra) // it decoded once already: the fields are there or absent
	return observability.SpanRequest{
		UID:             req.UID,
		Name:            req.Name,
		Namespace:       req.Namespace,
		Operation:       req.Operation,
		SubResource:     extra.SubResource,
		KindGroup:       req.Kind.Group,
		KindVersion:     req.Kind.Version,
		Kind:            req.Kind.Kind,
		ResourceGroup:   extra.Resource.Group,
		ResourceVersion: extra.Resource.Version,
		Resource:        extra.Resource.Resource,
	}
}

// spanResponse is what a span records of the response sent.
func spanResponse(resp *admission.Response) observability.SpanResponse {
	out := observability.SpanResponse{Allowed: resp.Allowed, Mutated: resp.Patch != nil}
	if resp.Status != nil {
		out.Code, out.Message = resp.Status.Code, resp.Status.Message
	}
	return out
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
	// Kubewarden's raw span records no request attributes.
	ctx, span := s.tracing.Start(r.Context(), observability.SpanValidationRaw, id)
	defer span.End()
	resp, err := s.env.ValidateRaw(ctx, id, in.Request)
	if err != nil {
		s.evaluationError(w, r, id, err, span)
		return
	}
	span.SetResponse(spanResponse(resp))
	s.logDecision(r, id, resp.UID, resp)
	writeJSON(w, http.StatusOK, rawReviewResponse{Response: resp})
}

// evaluationError answers a request that could not be evaluated: 404 for an
// unknown policy, else 500, which also marks its span failed.
func (s *Server) evaluationError(w http.ResponseWriter, r *http.Request, id string, err error, span observability.RequestSpan) {
	var notFound *engine.PolicyNotFoundError
	if errors.As(err, &notFound) {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	span.SetError(err)
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
