package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/jsontape"
	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/observability"
	"github.com/wardenhq/warden/internal/wasm"
)

// Origin says why a request is evaluated: admission (validate, with the
// protect/monitor post-processing) or audit (the policy's raw answer).
type Origin string

// Request origins, as they appear in the request_origin metric attribute.
const (
	OriginValidate Origin = "validate"
	OriginAudit    Origin = "audit"
)

// Recorder receives one record per evaluation. *observability.Metrics
// implements it.
type Recorder interface {
	RecordEvaluation(ctx context.Context, e observability.Evaluation, latency time.Duration)
	RecordInitializationError(ctx context.Context, policyName, err string)
	// RecordTimeout is told of each evaluation its policy's time limit
	// ended, besides RecordEvaluation.
	RecordTimeout(ctx context.Context, policyName string)
}

// failureReportKey is the context key of WithFailureReport's function.
type failureReportKey struct{}

// WithFailureReport returns a context under which the engine calls report
// for every evaluation that failed: the policy could not answer (it trapped,
// ran out of time or memory, answered over the cap or with garbage, or
// failed to load), and the response is the internal-error rejection of that
// failure. A rejection by the policy itself is not a failure. report may be
// called from several goroutines at once (the members of a group).
func WithFailureReport(ctx context.Context, report func(policyID, reason string)) context.Context {
	return context.WithValue(ctx, failureReportKey{}, report)
}

// failed returns the response of an evaluation of p that failed, and
// reports the failure to the context's WithFailureReport.
func failed(ctx context.Context, p *Policy, resp *admission.Response) *admission.Response {
	if report, ok := ctx.Value(failureReportKey{}).(func(string, string)); ok && resp.Status != nil {
		report(p.ID, resp.Status.Message)
	}
	return resp
}

// NotEvaluatedError is returned for a request whose context was done
// before its evaluation started: its client has gone (or gave up), and
// nobody would read the answer.
type NotEvaluatedError struct {
	PolicyID string
	err      error
}

func (e *NotEvaluatedError) Error() string {
	return fmt.Sprintf("policy %q not evaluated: the client has gone: %v", e.PolicyID, e.err)
}

// Unwrap returns the context's error.
func (e *NotEvaluatedError) Unwrap() error { return e.err }

// PolicyNotFoundError is returned for a policy id the engine does not have.
type PolicyNotFoundError struct{ ID string }

func (e *PolicyNotFoundError) Error() string { return "unknown policy: " + e.ID }

// Engine evaluates requests with a fixed set of loaded policies. It is
// immutable once loaded and safe for concurrent use.
type Engine struct {
	policies map[string]*Policy
	// names are the policy_name of the policies whose config names them
	// (PolicyConfig.Name), by id; the others are named by the id they are
	// called with.
	names                 map[string]string
	alwaysAcceptNamespace string
	recorder              Recorder
	logger                *slog.Logger

	// As a snapshot of an Environment: the entries it serves, and its
	// users (the environment while it is current, and the requests on it).
	entries []*entry
	refs    atomic.Int64
	// owner is the environment Load made for this engine alone.
	owner *Environment
}

// Policy is one loaded policy.
type Policy struct {
	ID              string
	Mode            string
	AllowedToMutate bool
	Message         string
	Metadata        *metadata.Metadata

	settings json.RawMessage
	timeout  time.Duration // zero: none
	run      runner
	host     *hostCalls
	calls    *callQueue   // bounds this policy's share of the slots
	group    *policyGroup // set for a policy group, which has no runner

	// initErr is set when the policy failed to load and the engine was
	// built with ContinueOnErrors: every request is rejected with it.
	initErr error
	// release gives back what the policy holds (its runner, or its share
	// of one); nil when it holds nothing.
	release func(ctx context.Context)
	// failureLogs bounds the rate of the log lines of its failed
	// evaluations (logFailure).
	failureLogs logLimiter
}

// Policy returns the loaded policy with that id.
func (e *Engine) Policy(id string) (*Policy, bool) {
	p, ok := e.policies[id]
	return p, ok
}

// PolicyIDs returns the ids of the loaded policies, sorted.
func (e *Engine) PolicyIDs() []string { return sortedKeys(e.policies) }

// Close releases the policies' instances of an engine that Load returned.
// A snapshot of an Environment is released by the environment.
func (e *Engine) Close(ctx context.Context) {
	if e.owner != nil {
		e.owner.Close(ctx)
	}
}

// Validate evaluates an admission request with a policy. A rejection is a
// response; an error means the request could not be evaluated (unknown
// policy: *PolicyNotFoundError).
func (e *Engine) Validate(ctx context.Context, policyID string, req *admission.Request, origin Origin) (*admission.Response, error) {
	start := time.Now()
	p, ok := e.policies[policyID]
	if !ok {
		return nil, &PolicyNotFoundError{ID: policyID}
	}
	rec := observability.Evaluation{
		PolicyName:   e.nameOf(policyID),
		PolicyMode:   p.Mode,
		ResourceKind: req.ResourceKind(),
		Operation:    req.Operation,
		Namespace:    req.Namespace,
		Origin:       string(origin),
	}
	if e.alwaysAcceptNamespace != "" && req.Namespace == e.alwaysAcceptNamespace {
		rec.Accepted = true
		e.recorder.RecordEvaluation(ctx, rec, time.Since(start))
		return &admission.Response{UID: req.UID, Allowed: true}, nil
	}
	return e.run(ctx, p, start, rec, admissionRequest(req), origin == OriginValidate)
}

// nameOf is the policy_name of the policy called as id.
func (e *Engine) nameOf(id string) string {
	if name, ok := e.names[id]; ok {
		return name
	}
	return id
}

// ValidateRaw evaluates a raw request (docs/compatibility.md#raw-policies): any
// JSON value, handed to the policy as its request; a mutation is diffed against
// the whole request.
func (e *Engine) ValidateRaw(ctx context.Context, policyID string, req *admission.RawRequest) (*admission.Response, error) {
	start := time.Now()
	p, ok := e.policies[policyID]
	if !ok {
		return nil, &PolicyNotFoundError{ID: policyID}
	}
	rec := observability.Evaluation{PolicyName: e.nameOf(policyID), PolicyMode: p.Mode, Raw: true}
	return e.run(ctx, p, start, rec, rawRequest(req), true)
}

// request is one request to evaluate, as it goes unchanged from Validate or
// ValidateRaw through Engine.run and Engine.evaluate to the runner: what
// internal/admission decoded of it. Nothing on the way decodes the request
// again.
type request struct {
	uid string
	// body is the request as received, which the policy gets verbatim: an
	// AdmissionRequest, or any JSON value for a raw request.
	body json.RawMessage
	// tape, when set, is the parse of the review holding body, at node: a
	// runner that reads the request can use it instead of parsing it.
	tape *jsontape.Tape
	// object is what a mutation is diffed against and an OPA patch applied
	// to: the request's object (nil when it has none, or null), or the
	// whole of a raw request.
	object json.RawMessage
	node   int32
	raw    bool
}

// admissionRequest is the request of an AdmissionRequest.
func admissionRequest(req *admission.Request) request {
	object := req.Object
	if !req.HasObject() {
		object = nil
	}
	tape, node := req.Parsed()
	return request{uid: req.UID, body: req.Raw, tape: tape, node: node, object: object}
}

// rawRequest is the request of a raw request.
func rawRequest(req *admission.RawRequest) request {
	tape, node := req.Parsed()
	return request{uid: req.UID, body: req.Raw, tape: tape, node: node, object: req.Raw, raw: true}
}

// run answers a request with policy p: its load error if it failed to load,
// else its evaluation, post-processed when asked (not for audits). The
// metrics record the policy's own answer, before post-processing, as
// Kubewarden's do. A request whose context is done before its evaluation
// starts is not evaluated nor recorded: *NotEvaluatedError.
func (e *Engine) run(ctx context.Context, p *Policy, start time.Time, rec observability.Evaluation,
	req request, postProcess bool) (*admission.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, &NotEvaluatedError{PolicyID: p.ID, err: err}
	}
	if p.initErr != nil {
		e.recorder.RecordInitializationError(ctx, rec.PolicyName, p.initErr.Error())
		return failed(ctx, p, reject(req.uid, p.initErr.Error(), 500)), nil
	}
	resp, mutatedObject := e.evaluate(ctx, p, req)
	if resp == nil {
		return nil, &NotEvaluatedError{PolicyID: p.ID, err: ctx.Err()}
	}
	rec.Accepted, rec.Mutated = resp.Allowed, resp.Patch != nil
	if resp.Status != nil {
		rec.ErrorCode = resp.Status.Code
	}
	if postProcess {
		resp = e.postProcess(ctx, p, resp, mutatedObject)
	}
	e.recorder.RecordEvaluation(ctx, rec, time.Since(start))
	return resp, nil
}

// evaluate runs the policy and converts its answer; failures become
// rejections with code 500, as in Kubewarden. It also returns the mutated
// object, for the monitor-mode log. The response is nil when ctx was done
// before the evaluation started (the client has gone).
func (e *Engine) evaluate(ctx context.Context, p *Policy, req request) (*admission.Response, json.RawMessage) {
	if p.group != nil {
		return e.evaluateGroup(ctx, p, req), nil
	}
	uid := req.uid
	// The policy's time limit covers the wait for its turn too: a request
	// never waits longer than the policy may run.
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if p.timeout > 0 {
		cctx, cancel = context.WithTimeout(ctx, p.timeout)
	}
	defer cancel()
	release, err := p.calls.acquire(cctx)
	if err != nil {
		if errors.Is(err, errQueueFull) || ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			e.logFailure(ctx, p, slog.LevelWarn, "policy evaluation not run: the policy's earlier requests hold its turns",
				observability.KeyRequestUID, uid, observability.KeyError, err)
			e.recorder.RecordTimeout(ctx, e.nameOf(p.ID))
			return failed(ctx, p, reject(uid, msgTimeout, 500)), nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		return failed(ctx, p, internalError(uid, err.Error())), nil
	}
	if ctx.Err() != nil { // the client left while the request waited
		release()
		return nil, nil
	}
	vr, err := p.run.validate(cctx, p.host, req, p.settings)
	release()
	if err != nil && leftBeforeTheGuestRan(ctx, err) {
		return nil, nil
	}
	if err != nil {
		if errors.Is(err, wasm.ErrDeadlineExceeded) {
			e.logFailure(ctx, p, slog.LevelError, "policy evaluation exceeded its time limit",
				observability.KeyRequestUID, uid)
			e.recorder.RecordTimeout(ctx, e.nameOf(p.ID))
			return failed(ctx, p, reject(uid, msgTimeout, 500)), nil
		}
		if ce, ok := asContextError(err); ok {
			return failed(ctx, p, reject(uid, ce.msg, 500)), nil
		}
		logged := e.logFailure(ctx, p, slog.LevelError, "policy evaluation failed",
			observability.KeyRequestUID, uid, observability.KeyError, err)
		if stderr := wasm.Stderr(err); logged && strings.Contains(stderr, "\n") {
			e.logger.DebugContext(ctx, "guest stderr of the failed evaluation",
				observability.KeyPolicyID, p.ID, observability.KeyRequestUID, uid, "stderr", stderr)
		}
		return failed(ctx, p, internalError(uid, err.Error())), nil
	}
	resp, err := toAdmissionResponse(uid, req.object, vr)
	if err != nil {
		return failed(ctx, p, internalError(uid, err.Error())), nil
	}
	return resp, vr.MutatedObject
}

// logFailure logs a line about a failed evaluation of p, unless p's
// failures are over the rate its own log lines have (logRate, after a
// burst of logBurst): a policy that fails every request under load would
// otherwise log thousands of lines a second. The lines over the rate are
// counted in a warning, at most one a second; the metrics count every
// failure. It reports whether the line was logged.
func (e *Engine) logFailure(ctx context.Context, p *Policy, level slog.Level, msg string, attrs ...any) bool {
	ok, dropped := p.failureLogs.take()
	if dropped > 0 {
		e.logger.WarnContext(ctx, "log lines of failed evaluations dropped: over the rate limit",
			observability.KeyPolicyID, p.ID, "dropped", dropped, "lines_per_second", logRate)
	}
	if ok {
		e.logger.Log(ctx, level, msg, append([]any{observability.KeyPolicyID, p.ID}, attrs...)...)
	}
	return ok
}

// leftBeforeTheGuestRan reports whether err, a runner's, ends a call whose
// context (ctx, the request's) was done while it waited for a guest slot:
// the runtime's wait ends with the context's own error, while a guest it
// interrupted fails with the context's cause. A context cancelled without
// a cause (net/http's, when the client has gone) cannot tell the two
// apart; nobody reads either answer.
func leftBeforeTheGuestRan(ctx context.Context, err error) bool {
	if ctx.Err() == nil || !errors.Is(err, context.Canceled) {
		return false
	}
	cause := context.Cause(ctx)
	return cause == context.Canceled || !errors.Is(err, cause)
}

// callQueue bounds one policy's guest calls: workers run at once, so that
// a policy that loops cannot take every guest slot, and at most limit more
// wait; a call beyond those is refused at once (errQueueFull) rather than
// held while the policy's earlier calls run out their time.
type callQueue struct {
	run     chan struct{}
	waiting atomic.Int32
	limit   int32
}

// queuedPerWorker is how many calls of a policy may wait per worker.
const queuedPerWorker = 16

// errQueueFull refuses a call that would wait behind too many others.
var errQueueFull = errors.New("too many evaluations of the policy are waiting")

func newCallQueue(workers int) *callQueue {
	return &callQueue{run: make(chan struct{}, workers), limit: int32(queuedPerWorker * workers)}
}

// acquire takes a turn, waiting until ctx is done; release gives it back.
func (q *callQueue) acquire(ctx context.Context) (release func(), err error) {
	select {
	case q.run <- struct{}{}:
		return q.release, nil
	default:
	}
	if q.waiting.Add(1) > q.limit {
		q.waiting.Add(-1)
		return nil, errQueueFull
	}
	defer q.waiting.Add(-1)
	select {
	case q.run <- struct{}{}:
		return q.release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (q *callQueue) release() { <-q.run }
