package celpolicy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apiserver/pkg/cel/library"

	"github.com/wardenhq/warden/internal/jsontape"
)

// ErrCostLimit is wrapped by the evaluation error of an expression that went
// over its cost limit, or of an evaluation that went over its cost budget.
var ErrCostLimit = errors.New("CEL cost limit exceeded")

// Option configures Compile. Options are values, safe to share.
type Option func(*config)

type config struct {
	costLimit  uint64
	costBudget int64
}

// WithCostLimit sets the cost limit of one expression evaluation
// (DefaultCostLimit when not set). An expression whose estimated cost is at
// least that on any input fails to compile.
func WithCostLimit(limit uint64) Option { return func(c *config) { c.costLimit = limit } }

// WithCostBudget sets the cost budget of one request's evaluation, shared by
// every variable, validation and message expression (DefaultCostBudget when
// not set).
func WithCostBudget(budget int64) Option { return func(c *config) { c.costBudget = budget } }

// Policy is a compiled cel-policy configuration. It is immutable and safe
// for concurrent use.
type Policy struct {
	settings    json.RawMessage
	variables   []program
	varIndex    map[string]int // "variables.<name>" -> index in variables
	validations []validation
	costLimit   uint64
	costBudget  int64
	activations sync.Pool // of *activation

	// paramRef, when set, has the validations evaluated once for each
	// object of paramKind it finds, bound to params.
	paramKind     *ParamKind
	paramRef      *ParamRef
	failurePolicy string
}

// program is one compiled expression.
type program struct {
	path string // settings path, e.g. validations[0].expression
	prog cel.Program
	err  error // program planning failed; cel-policy reports it on evaluation
}

type validation struct {
	expr        program
	expression  string
	message     string
	messageExpr *program
	code        int32
}

// Result is a policy's answer to one request, a plain value.
type Result struct {
	Accepted bool
	// Message and Code are set on a rejection: the validation's message and
	// the HTTP code of its reason.
	Message string
	Code    int32
}

// Compile validates cel-policy settings as cel-policy's validate-settings
// does and compiles every expression once. A *SettingsError says what is
// wrong with the settings, in cel-policy's words. Compile is safe for
// concurrent use; it keeps a copy of settings.
func Compile(settings json.RawMessage, opts ...Option) (*Policy, error) {
	cfg := config{costLimit: DefaultCostLimit, costBudget: DefaultCostBudget}
	for _, o := range opts {
		o(&cfg)
	}
	var s Settings
	if err := json.Unmarshal(settings, &s); err != nil {
		return nil, &SettingsError{msg: fmt.Sprintf("cannot unmarshal settings: %v", err), err: err}
	}
	env, err := baseEnvs()
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment: %w", err)
	}
	p := &Policy{
		settings:      bytes.Clone(settings),
		varIndex:      make(map[string]int, len(s.Variables)),
		costLimit:     cfg.costLimit,
		costBudget:    cfg.costBudget,
		paramKind:     s.ParamKind,
		paramRef:      s.ParamRef,
		failurePolicy: s.FailurePolicy,
	}
	c := compiler{cfg: cfg, env: env}
	c.checkParams(&s)
	if len(s.Validations) == 0 {
		c.required("validations", "validations must contain at least one item")
	}
	if s.FailurePolicy != failurePolicyIgnore && s.FailurePolicy != failurePolicyFail {
		c.required("failurePolicy", "failurePolicy must be either 'Ignore' or 'Fail'")
	}
	for i, v := range s.Variables {
		if err := c.variable(p, i, v); err != nil {
			return nil, err
		}
	}
	for i := range s.Validations {
		p.validations = append(p.validations, c.validation(i, &s.Validations[i]))
	}
	if err := c.problems.err(); err != nil {
		return nil, err
	}
	return p, nil
}

// compiler collects the problems of one Compile.
type compiler struct {
	problems
	cfg config
	env envs // extended with each variable compiled
}

// variable compiles a variable and declares it for the expressions after
// it. Its error ends the compilation, as in cel-policy.
func (c *compiler) variable(p *Policy, i int, v Variable) error {
	path := fmt.Sprintf("variables[%d]", i)
	name := strings.TrimSpace(v.Name)
	validName := false
	switch {
	case name == "":
		c.required(path+".name", "name is not specified")
	case !isCELIdentifier(v.Name):
		c.invalid(path+".name", v.Name, "name is not a valid CEL identifier")
	case name == varParams:
		c.invalid(path+".name", v.Name, "'params' name is not allowed. It conflicts with 'params' from the policy paramaters configuration")
	default:
		validName = true
	}
	if strings.TrimSpace(v.Expression) == "" {
		c.required(path+".expression", "expression is not specified")
		return nil
	}
	prog, ast, ok := c.compile(path+".expression", v.Expression, nil)
	if !ok || !validName {
		return nil
	}
	env, err := c.env.extend(cel.Variable(variablesPrefix+v.Name, ast.OutputType()))
	if err != nil {
		return &SettingsError{msg: fmt.Sprintf("failed to extend CEL env: %v", err), err: err}
	}
	c.env = env
	p.varIndex[variablesPrefix+v.Name] = len(p.variables)
	p.variables = append(p.variables, prog)
	return nil
}

// validation compiles a validation.
func (c *compiler) validation(i int, v *Validation) validation {
	path := fmt.Sprintf("validations[%d]", i)
	val := validation{expression: v.Expression, message: v.Message, code: reasonCodes[v.Reason]}
	if strings.TrimSpace(v.Expression) == "" {
		c.required(path+".expression", "expression is not specified")
	} else {
		val.expr, _, _ = c.compile(path+".expression", v.Expression, types.BoolType)
	}
	switch {
	case v.MessageExpression != "" && strings.TrimSpace(v.MessageExpression) == "":
		c.invalid(path+".messageExpression", v.MessageExpression, "must be non-empty if specified")
	case v.MessageExpression != "":
		prog, _, _ := c.compile(path+".messageExpression", v.MessageExpression, types.StringType)
		val.messageExpr = &prog
	}
	c.checkValidationFields(i, v)
	return val
}

// compile compiles one expression; want is its required output type, nil for
// any. It records a problem and returns false when the expression is not
// valid. An expression whose least estimated cost is above the cost limit
// would fail on every request: it is not valid either.
func (c *compiler) compile(path, expr string, want *types.Type) (program, *cel.Ast, bool) {
	ast, err := compileExpr(c.env.check, expr)
	if err != nil {
		c.invalid(path, expr, err.Error())
		return program{}, nil, false
	}
	if want != nil && !ast.OutputType().IsExactType(want) {
		c.invalid(path, expr, "must evaluate to "+want.String())
		return program{}, nil, false
	}
	if est, err := c.env.check.EstimateCost(ast, &library.CostEstimator{}); err == nil && est.Min > c.cfg.costLimit {
		c.invalid(path, expr, fmt.Sprintf("estimated cost %d exceeds the cost limit %d of one expression on any input", est.Min, c.cfg.costLimit))
		return program{}, nil, false
	}
	// cel-policy plans programs when it evaluates them: a planning error
	// fails the evaluation.
	prog, err := c.env.program(ast, programOptions(c.cfg.costLimit)...)
	return program{path: path, prog: prog, err: err}, ast, true
}

// Validate evaluates the policy against an AdmissionRequest (or a raw
// request: cel-policy treats both alike), as cel-policy does: the validations
// in order, the first that is false rejects. A request that does not decode
// as cel-policy's AdmissionRequest is rejected with 400, as cel-policy does.
// An error is an evaluation that failed, with cel-policy's message; it wraps
// ErrCostLimit, or ctx's error when ctx ended the evaluation. The request is
// read in place, and the Result's strings may share its memory: it must not
// change while Validate runs or the Result is in use. Validate is safe for
// concurrent use.
//
// Validate has no ParamSource: a policy with a paramRef fails with
// ErrNoParamSource. ValidateWith reads the params from a ParamSource.
func (p *Policy) Validate(ctx context.Context, request json.RawMessage) (Result, error) {
	return p.validate(ctx, nil, request, nil, 0)
}

// ValidateParsed is Validate of the request at node of t, a parse of the
// text the request is part of (the AdmissionReview it came in), which it
// spares parsing again. t is read (and its key checks cached) during the
// call only; the Result's strings may share t's text.
func (p *Policy) ValidateParsed(ctx context.Context, t *jsontape.Tape, node int32) (Result, error) {
	return p.validate(ctx, nil, nil, t, node)
}

// ValidateWith is Validate of a policy that may read params from the
// cluster: when its settings have a paramRef, params reads them from src
// once the request is decoded, before any expression is evaluated, and the
// validations are evaluated against each in turn (params bound to it), the
// first rejection answering, as cel-policy does. Variables are evaluated
// once per request, as in cel-policy: a variable that reads params keeps the
// value it had the first time it was read. src is not used by a policy
// without a paramRef, and may then be nil.
func (p *Policy) ValidateWith(ctx context.Context, src ParamSource, request json.RawMessage) (Result, error) {
	return p.validate(ctx, src, request, nil, 0)
}

// ValidateParsedWith is ValidateWith of the request at node of t, as
// ValidateParsed is Validate's.
func (p *Policy) ValidateParsedWith(ctx context.Context, src ParamSource, t *jsontape.Tape, node int32) (Result, error) {
	return p.validate(ctx, src, nil, t, node)
}

// ReadsParams reports whether the policy reads params from the cluster (its
// settings have a paramRef): only then does ValidateWith use its
// ParamSource.
func (p *Policy) ReadsParams() bool { return p.paramRef != nil }

// validate evaluates the request at node of t, or request when t is nil.
func (p *Policy) validate(ctx context.Context, src ParamSource, request json.RawMessage, t *jsontape.Tape, node int32) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	a, _ := p.activations.Get().(*activation)
	if a == nil {
		a = &activation{p: p, vars: make([]ref.Val, len(p.variables))}
	}
	defer p.release(a)
	a.ctx, a.budget = ctx, p.costBudget
	var rej *Result
	var err error
	if t != nil {
		rej, err = a.in.decodeParsed(&a.doc, t, node, p.settings)
	} else {
		rej, err = a.in.decode(&a.doc, request, p.settings)
	}
	if rej != nil || err != nil {
		if rej != nil {
			return *rej, nil
		}
		return Result{}, err
	}
	if p.paramRef == nil {
		return a.validations()
	}
	params, rej, err := p.params(ctx, src, a.in.request)
	if rej != nil || err != nil {
		if rej != nil {
			return *rej, nil
		}
		return Result{}, err
	}
	for _, param := range params {
		a.params = param
		if res, err := a.validations(); err != nil || !res.Accepted {
			return res, err
		}
	}
	return Result{Accepted: true}, nil
}

// validations evaluates the validations in order: the first that is false
// rejects.
func (a *activation) validations() (Result, error) {
	p := a.p
	for i := range p.validations {
		v := &p.validations[i]
		out, err := a.eval(&v.expr)
		if err != nil {
			return Result{}, fmt.Errorf("failed to evaluate expression: %w", err)
		}
		if out != types.False {
			continue
		}
		res := Result{Code: v.code}
		switch {
		case v.messageExpr != nil:
			out, err := a.eval(v.messageExpr)
			if err != nil {
				return Result{}, fmt.Errorf("failed to evaluate message expression: %w", err)
			}
			msg, ok := out.Value().(string)
			if !ok {
				return Result{}, errors.New("failed to evaluate message expression: message expression must evaluate to string")
			}
			res.Message = msg
		case v.message != "":
			res.Message = v.message
		default:
			res.Message = "failed expression: " + strings.TrimSpace(v.expression)
		}
		return res, nil
	}
	return Result{Accepted: true}, nil
}

// maxPooledNodes bounds the tape an activation keeps for the next request
// (requests of up to a few hundred kilobytes).
const maxPooledNodes = 1 << 15

// release drops what the evaluation read and pools the activation.
func (p *Policy) release(a *activation) {
	a.ctx, a.in, a.budgetErr, a.params = nil, input{}, nil, nil
	a.doc.release(maxPooledNodes)
	clear(a.vars)
	p.activations.Put(a)
}

// activation is one evaluation's variables. Declared variables are evaluated
// on first use and memoized. It is used by one goroutine at a time.
type activation struct {
	p         *Policy
	ctx       context.Context
	doc       document // the request's tape, its buffer reused
	in        input
	vars      []ref.Val
	params    ref.Val // nil: params is not bound
	budget    int64
	budgetErr error
}

// ResolveName implements interpreter.Activation.
func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case varObject:
		return a.in.object, true
	case varOldObject:
		return a.in.oldObject, true
	case varRequest:
		return a.in.request, true
	case varNamespaceObject:
		return a.in.namespaceObject(), true
	case varParams:
		return a.params, a.params != nil
	}
	i, ok := a.p.varIndex[name]
	if !ok {
		return nil, false
	}
	if a.vars[i] == nil {
		out, err := a.eval(&a.p.variables[i])
		if err != nil {
			out = types.WrapErr(err)
		}
		a.vars[i] = out
	}
	return a.vars[i], true
}

// Parent implements interpreter.Activation.
func (a *activation) Parent() interpreter.Activation { return nil }

// eval runs one program and charges its cost to the evaluation's budget.
func (a *activation) eval(pr *program) (ref.Val, error) {
	if pr.err != nil {
		return nil, pr.err
	}
	out, det, err := pr.prog.ContextEval(a.ctx, a)
	if cost := det.ActualCost(); cost != nil && a.budgetErr == nil {
		if *cost > uint64(a.budget) {
			a.budgetErr = fmt.Errorf("%s: %w: the evaluation went over its cost budget of %d, no further expressions are evaluated",
				pr.path, ErrCostLimit, a.p.costBudget)
		}
		a.budget -= int64(min(*cost, uint64(a.budget)))
	}
	switch {
	case err != nil && overCostLimit(err):
		return nil, fmt.Errorf("%s: %w: the expression went over its cost limit of %d (%v)", pr.path, ErrCostLimit, a.p.costLimit, err)
	case err != nil && a.ctx.Err() != nil:
		return nil, fmt.Errorf("%s: %w", pr.path, a.ctx.Err())
	case a.budgetErr != nil:
		return nil, a.budgetErr
	case err != nil:
		return nil, err
	}
	return out, nil
}

// overCostLimit reports whether err is cel-go's cancellation of an
// expression that went over its cost limit. (Its own function so that an
// evaluation without error does not allocate the target of errors.As.)
func overCostLimit(err error) bool {
	var cancelled interpreter.EvalCancelledError
	return errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded
}
