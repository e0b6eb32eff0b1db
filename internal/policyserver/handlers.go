package policyserver

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"sync"
	"time"

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

// readJSON reads a bounded JSON body, holding its bytes against the
// server's budget of bodies in memory. On failure it has answered with the
// status and message axum's Json extractor uses (or 429 when the budget is
// spent, 408 when the body is too slow), and returns nil. Otherwise the
// caller calls release once done with the body. Decoding errors are the
// caller's: see decodeError.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request) (body []byte, release func()) {
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mediaType != "application/json" && !isJSONSuffix(mediaType)) {
		writeError(w, http.StatusUnsupportedMediaType, "Expected request with `Content-Type: application/json`")
		return nil, nil
	}
	limit := s.opts.MaxRequestBodySize
	if r.ContentLength > limit { // refused unread
		s.metrics.RecordRefused(r.Context(), observability.RefusedBodyTooLarge)
		writeError(w, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("Failed to buffer the request body: length limit exceeded (the limit is %d bytes)", limit))
		return nil, nil
	}
	hold := &bodyHold{budget: s.bodies}
	body, err = readBody(r.Context(), http.MaxBytesReader(w, r.Body, limit), r.ContentLength, limit, hold)
	if err == nil {
		return body, hold.release
	}
	hold.release()
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		s.metrics.RecordRefused(r.Context(), observability.RefusedBodyTooLarge)
		writeError(w, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("Failed to buffer the request body: length limit exceeded (the limit is %d bytes)", tooLarge.Limit))
	case errors.Is(err, errBodyBudget):
		s.metrics.RecordRefused(r.Context(), observability.RefusedMemoryBudget)
		s.logger.DebugContext(r.Context(), msgBodyBudgetSpent, observability.KeyPolicyID, r.PathValue("id"))
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf(
			"Failed to buffer the request body: the server is at its request-memory budget (--max-in-flight-request-body-bytes=%d bytes of request bodies held at once); retry later",
			s.bodies.size))
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.metrics.RecordRefused(r.Context(), observability.RefusedSlowBody)
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestTimeout, fmt.Sprintf(
			"Failed to buffer the request body: the request was not received within %s (--request-read-timeout)", s.opts.RequestReadTimeout))
	default:
		writeError(w, http.StatusBadRequest, "Failed to buffer the request body: "+err.Error())
	}
	return nil, nil
}

// msgBodyBudgetSpent is logged when a request is refused for want of budget.
const msgBodyBudgetSpent = "request refused: request-body memory budget spent"

// firstBodyChunk is the buffer a body of unknown length starts from; it
// doubles as the body grows.
const firstBodyChunk = 32 << 10

// readBody reads body whole, holding its bytes against hold first: a body
// of known length (sizeHint, at most limit) all at once, one of unknown
// length as its buffer grows. It starts from a buffer of sizeHint+1 bytes
// where io.ReadAll would grow one from 512 bytes and allocate about twice the
// body. It fails with errBodyBudget when hold cannot grow.
func readBody(ctx context.Context, body io.Reader, sizeHint, limit int64, hold *bodyHold) ([]byte, error) {
	size := sizeHint + 1 // +1: reading the end needs no growth
	if sizeHint < 0 || sizeHint > limit {
		size = min(firstBodyChunk, limit+1)
	}
	if err := hold.growTo(ctx, min(size, limit)); err != nil {
		return nil, err
	}
	b := make([]byte, 0, size)
	for {
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) < cap(b) {
			continue
		}
		grown := min(2*int64(cap(b)), limit+1)
		if grown <= int64(cap(b)) {
			return b, &http.MaxBytesError{Limit: limit}
		}
		if err := hold.growTo(ctx, min(grown, limit)); err != nil {
			return b, err
		}
		b = append(make([]byte, 0, grown), b...)
	}
}

// bodyBudgetWait is how long a request waits for its body's bytes when the
// budget is spent, before it is answered 429.
const bodyBudgetWait = time.Second

// errBodyBudget is the error of a body whose bytes the budget could not hold.
var errBodyBudget = errors.New("request-body memory budget spent")

// bodyBudget bounds the bytes of request bodies held in memory at once,
// across all connections (--max-in-flight-request-body-bytes). Waiters get
// their bytes in the order they asked for them, so a large body is not
// starved by small ones. Its methods are safe for concurrent use.
type bodyBudget struct {
	size int64

	mu      sync.Mutex
	held    int64
	waiters list.List // of *bodyWaiter, in order of arrival
}

type bodyWaiter struct {
	n     int64
	ready chan struct{} // closed once the waiter holds n
}

func newBodyBudget(size int64) *bodyBudget { return &bodyBudget{size: size} }

// acquire holds n more bytes, waiting for them up to wait or until ctx is
// done; it reports whether it holds them.
func (b *bodyBudget) acquire(ctx context.Context, n int64, wait time.Duration) bool {
	b.mu.Lock()
	if b.waiters.Len() == 0 && b.size-b.held >= n {
		b.held += n
		b.mu.Unlock()
		return true
	}
	if n > b.size {
		b.mu.Unlock()
		return false
	}
	w := &bodyWaiter{n: n, ready: make(chan struct{})}
	elem := b.waiters.PushBack(w)
	b.mu.Unlock()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-w.ready:
		return true
	case <-ctx.Done():
	case <-timer.C:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready: // granted meanwhile: hand the bytes back
		b.held -= n
	default:
		b.waiters.Remove(elem)
	}
	b.wake() // the waiters behind this one may fit now
	return false
}

// release hands back n bytes.
func (b *bodyBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.held -= n
	b.wake()
	b.mu.Unlock()
}

// wake grants their bytes to the waiters at the front that fit. b.mu is held.
func (b *bodyBudget) wake() {
	for e := b.waiters.Front(); e != nil; e = b.waiters.Front() {
		w := e.Value.(*bodyWaiter)
		if b.size-b.held < w.n {
			return
		}
		b.held += w.n
		b.waiters.Remove(e)
		close(w.ready)
	}
}

// bodyHold is what one request's body holds of a budget. It is used by one
// goroutine.
type bodyHold struct {
	budget *bodyBudget
	n      int64
}

// growTo holds n bytes in all (n is never more than the budget's size),
// waiting up to bodyBudgetWait for the extra bytes; it fails with
// errBodyBudget.
func (h *bodyHold) growTo(ctx context.Context, n int64) error {
	if n <= h.n {
		return nil
	}
	if !h.budget.acquire(ctx, n-h.n, bodyBudgetWait) {
		return errBodyBudget
	}
	h.n = n
	return nil
}

// release hands back every byte held.
func (h *bodyHold) release() {
	h.budget.release(h.n)
	h.n = 0
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
		body, release := s.readJSON(w, r)
		if body == nil {
			return
		}
		defer release()
		req, err := admission.DecodeReview(body)
		if err != nil {
			decodeError(w, err)
			return
		}
		defer req.Release()
		id := r.PathValue("id")
		ctx, stop := watchClient(r) // gone.go
		defer stop()
		// As in Kubewarden, a request whose body does not decode has no span.
		ctx, span := s.tracing.Start(ctx, spanName, id)
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

// spanRequest is what a span records of req.
func spanRequest(req *admission.Request) observability.SpanRequest {
	resource, subResource := req.Resource()
	return observability.SpanRequest{
		UID:             req.UID,
		Name:            req.Name,
		Namespace:       req.Namespace,
		Operation:       req.Operation,
		SubResource:     subResource,
		KindGroup:       req.Kind.Group,
		KindVersion:     req.Kind.Version,
		Kind:            req.Kind.Kind,
		ResourceGroup:   resource.Group,
		ResourceVersion: resource.Version,
		Resource:        resource.Resource,
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

type rawReviewResponse struct {
	Response *admission.Response `json:"response"`
}

// handleRaw serves /validate_raw/{id}: {"request": any} -> {"response": ...}.
func (s *Server) handleRaw(w http.ResponseWriter, r *http.Request) {
	body, release := s.readJSON(w, r)
	if body == nil {
		return
	}
	defer release()
	req, err := admission.DecodeRawReview(body)
	if err != nil {
		decodeError(w, err)
		return
	}
	defer req.Release()
	id := r.PathValue("id")
	ctx, stop := watchClient(r) // gone.go
	defer stop()
	// Kubewarden's raw span records no request attributes.
	ctx, span := s.tracing.Start(ctx, observability.SpanValidationRaw, id)
	defer span.End()
	resp, err := s.env.ValidateRaw(ctx, id, req)
	if err != nil {
		s.evaluationError(w, r, id, err, span)
		return
	}
	span.SetResponse(spanResponse(resp))
	s.logDecision(r, id, resp.UID, resp)
	writeJSON(w, http.StatusOK, rawReviewResponse{Response: resp})
}

// evaluationError answers a request that could not be evaluated: 404 for an
// unknown policy, 503 for a request whose client has gone before its
// evaluation started, else 500, which also marks its span failed.
func (s *Server) evaluationError(w http.ResponseWriter, r *http.Request, id string, err error, span observability.RequestSpan) {
	var notFound *engine.PolicyNotFoundError
	if errors.As(err, &notFound) {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	var notEvaluated *engine.NotEvaluatedError
	if errors.As(err, &notEvaluated) { // nobody reads this answer
		s.logger.DebugContext(r.Context(), "evaluation not started: the client has gone", observability.KeyPolicyID, id)
		writeError(w, http.StatusServiceUnavailable, err.Error())
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
