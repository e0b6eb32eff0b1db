// Package groupexpr compiles and evaluates the expressions of policy groups
// (docs/compatibility.md#policy-groups): CEL over zero-argument functions, one
// per group member, such as `a() || (b() && !c())`. The controller validates
// group expressions with Compile and the policy server evaluates them with
// Eval, so both agree on what is valid.
//
// Each member call is expanded at parse time into a variable that Eval
// resolves on first use, so members are evaluated lazily: `a() && b()` never
// evaluates b when a is false.
//
// This package must not import the wasm runtime or the engine.
package groupexpr

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/interpreter"
	"github.com/google/cel-go/parser"
)

// memberPrefix starts the variable a member call expands into. CEL source
// cannot spell it, so members can only be reached by calling them.
const memberPrefix = "@member:"

// Expression is a compiled group expression. It is immutable and safe for
// concurrent use.
type Expression struct {
	source  string
	program cel.Program
}

// Compile checks a group expression against the names of the group's
// members: it must parse, call only members (with no arguments), and be a
// bool. Errors carry CEL's position of the mistake.
func Compile(expression string, members []string) (*Expression, error) {
	if strings.TrimSpace(expression) == "" {
		return nil, errors.New("the expression is empty")
	}
	opts := []cel.EnvOption{cel.ClearMacros()}
	for _, name := range members {
		varName := memberPrefix + name
		opts = append(opts,
			cel.Variable(varName, cel.BoolType),
			cel.Macros(cel.GlobalMacro(name, 0, func(eh parser.ExprHelper, _ ast.Expr, _ []ast.Expr) (ast.Expr, *common.Error) {
				return eh.NewIdent(varName), nil
			})))
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment: %w", err)
	}
	checked, iss := env.Compile(expression)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if !checked.OutputType().IsExactType(types.BoolType) {
		return nil, fmt.Errorf("the expression must evaluate to a bool, not %s", checked.OutputType())
	}
	// Without macros there are no comprehensions, so the cost of an
	// evaluation is bounded by the expression's size: no cost limit needed.
	prg, err := env.Program(checked)
	if err != nil {
		return nil, fmt.Errorf("planning the expression: %w", err)
	}
	return &Expression{source: expression, program: prg}, nil
}

// String returns the expression's source.
func (e *Expression) String() string { return e.source }

// Eval evaluates the expression, calling member for each member the
// expression reaches, at most once each, in the order CEL's short-circuit
// evaluation reaches them. member is called on the caller's goroutine.
func (e *Expression) Eval(member func(name string) bool) (bool, error) {
	out, _, err := e.program.Eval(&lazyMembers{member: member})
	if err != nil {
		return false, err
	}
	allowed, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("the expression evaluated to %v, not a bool", out)
	}
	return allowed, nil
}

// lazyMembers is the activation of one evaluation: it resolves a member's
// variable by evaluating the member, once.
type lazyMembers struct {
	member func(name string) bool
	seen   map[string]bool
}

func (a *lazyMembers) ResolveName(name string) (any, bool) {
	member, ok := strings.CutPrefix(name, memberPrefix)
	if !ok {
		return nil, false
	}
	if v, ok := a.seen[member]; ok {
		return v, true
	}
	if a.seen == nil {
		a.seen = map[string]bool{}
	}
	v := a.member(member)
	a.seen[member] = v
	return v, true
}

func (a *lazyMembers) Parent() interpreter.Activation { return nil }
