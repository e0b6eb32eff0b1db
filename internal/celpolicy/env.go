package celpolicy

import (
	"errors"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apiserver/pkg/cel/library"
)

// Names of the variables an expression sees, as cel-policy declares them.
const (
	varObject          = "object"
	varOldObject       = "oldObject"
	varRequest         = "request"
	varNamespaceObject = "namespaceObject"
	varParams          = "params"
	varVariables       = "variables"
	variablesPrefix    = varVariables + "."
)

// variablesTypeName is the type of the bare `variables` identifier: an
// object with no fields, so that `variables.x` for an undeclared x fails to
// type-check with "undefined field 'x'" (each declared variable is its own
// qualified identifier, `variables.x`). cel-policy names it so.
const variablesTypeName = "cel.variables"

// Defaults of the cost limits, ValidatingAdmissionPolicy's
// (k8s.io/apiserver/pkg/apis/cel): the limit of one expression and the budget
// of one evaluation, shared by every variable, validation and message.
const (
	DefaultCostLimit  uint64 = 1_000_000
	DefaultCostBudget int64  = 10_000_000
)

// interruptCheckFrequency is how many comprehension iterations run between
// two checks of the context, VAP's value.
const interruptCheckFrequency = 100

// envs are the environments of a policy. Expressions are checked in check;
// programs are planned in the leanest of run that has every function they
// call. Each library left out of an environment is one whose cost trackers
// every evaluation would otherwise pay for, whether or not it calls the
// library: the cel-go lists extension (lists.range, sort, distinct...),
// which cel-policy does not have (measured: about 2 µs per expression), and
// the sets extension (a map of three trackers built per evaluation).
// Leaving them out changes no cost: a tracker counts only its functions.
type envs struct {
	check *cel.Env
	run   []*cel.Env        // leanest first, each with the functions of those before
	added []map[string]bool // the overload ids run[i] has that run[i-1] has not
}

func (e envs) extend(opts ...cel.EnvOption) (envs, error) {
	check, err := e.check.Extend(opts...)
	if err != nil {
		return envs{}, err
	}
	out := envs{check: check, run: make([]*cel.Env, len(e.run)), added: e.added}
	for i, env := range e.run {
		if out.run[i], err = env.Extend(opts...); err != nil {
			return envs{}, err
		}
	}
	return out, nil
}

// program plans a checked expression in the leanest environment that has
// every function it calls.
func (e envs) program(ast *cel.Ast, opts ...cel.ProgramOption) (cel.Program, error) {
	return e.run[e.tier(ast)].Program(ast, opts...)
}

// tier is the index in run of the leanest environment that has every
// function ast calls.
func (e envs) tier(ast *cel.Ast) int {
	tier := 0
	for _, ref := range ast.NativeRep().ReferenceMap() {
		for _, id := range ref.OverloadIDs {
			for i := len(e.added) - 1; i > tier; i-- {
				if e.added[i][id] {
					tier = i
					break
				}
			}
		}
	}
	return tier
}

// addedOverloads returns the overload ids env has that prev has not.
func addedOverloads(env, prev *cel.Env) map[string]bool {
	added := map[string]bool{}
	for name, fn := range env.Functions() {
		if prev.HasFunction(name) {
			continue
		}
		for _, o := range fn.OverloadDecls() {
			added[o.ID()] = true
		}
	}
	return added
}

// baseEnvs are the environments every policy extends: cel-policy's options,
// libraries and variables, plus the libraries ValidatingAdmissionPolicy has
// gained since (ip, cidr, format, semver, two-variable comprehensions, the
// lists extension), which only make more expressions valid.
var baseEnvs = sync.OnceValues(func() (envs, error) {
	lean, err := cel.NewEnv(
		cel.HomogeneousAggregateLiterals(),
		cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		cel.ASTValidators(
			cel.ValidateDurationLiterals(),
			cel.ValidateTimestampLiterals(),
			cel.ValidateRegexLiterals(),
			cel.ValidateHomogeneousAggregateLiterals(),
		),
		cel.CostEstimatorOptions(checker.PresenceTestHasCost(false)),

		ext.Strings(ext.StringsVersion(2)),
		ext.Encoders(),
		ext.TwoVarComprehensions(),
		library.URLs(),
		library.Regex(),
		library.Lists(),
		library.Quantity(),
		library.IP(),
		library.CIDR(),
		library.Format(),
		library.SemverLib(library.SemverVersion(1)),

		cel.Variable(varObject, cel.DynType),
		cel.Variable(varOldObject, cel.DynType),
		cel.Variable(varRequest, cel.DynType),
		cel.Variable(varNamespaceObject, cel.DynType),
		cel.Variable(varParams, cel.DynType),
	)
	if err != nil {
		return envs{}, err
	}
	if lean, err = lean.Extend(
		cel.CustomTypeProvider(variablesProvider{lean.CELTypeProvider()}),
		cel.Variable(varVariables, cel.ObjectType(variablesTypeName)),
	); err != nil {
		return envs{}, err
	}
	sets, err := lean.Extend(ext.Sets())
	if err != nil {
		return envs{}, err
	}
	check, err := sets.Extend(ext.Lists(ext.ListsVersion(3)))
	if err != nil {
		return envs{}, err
	}
	return envs{
		check: check,
		run:   []*cel.Env{lean, sets, check},
		added: []map[string]bool{{}, addedOverloads(sets, lean), addedOverloads(check, sets)},
	}, nil
})

// variablesProvider adds the empty object type of `variables` to a type
// provider.
type variablesProvider struct{ types.Provider }

func (p variablesProvider) FindStructType(name string) (*types.Type, bool) {
	if name == variablesTypeName {
		return types.NewTypeTypeWithParam(types.NewObjectType(variablesTypeName)), true
	}
	return p.Provider.FindStructType(name)
}

func (p variablesProvider) FindStructFieldNames(name string) ([]string, bool) {
	if name == variablesTypeName {
		return nil, true
	}
	return p.Provider.FindStructFieldNames(name)
}

func (p variablesProvider) FindStructFieldType(name, field string) (*types.FieldType, bool) {
	if name == variablesTypeName {
		return nil, false
	}
	return p.Provider.FindStructFieldType(name, field)
}

// programOptions are VAP's: optimised, cost tracked with the Kubernetes
// libraries' costs, limited per expression, interruptible.
func programOptions(costLimit uint64) []cel.ProgramOption {
	return []cel.ProgramOption{
		cel.EvalOptions(cel.OptOptimize, cel.OptTrackCost),
		cel.CostLimit(costLimit),
		cel.CostTrackerOptions(interpreter.PresenceTestHasCost(false)),
		cel.CostTracking(&library.CostEstimator{}),
		cel.InterruptCheckFrequency(interruptCheckFrequency),
	}
}

// hostCapabilityFuncs are the entry points of cel-policy's kw.* libraries.
// Every other kw.* function is a method on a value only these return.
var hostCapabilityFuncs = map[string]string{
	"kw.k8s.apiVersion":     "kw.k8s",
	"kw.oci.image":          "kw.oci",
	"kw.sigstore.image":     "kw.sigstore",
	"kw.crypto.certificate": "kw.crypto",
	"kw.net.lookupHost":     "kw.net",
}

// compileExpr parses and type-checks one expression. Calls into cel-policy's
// kw.* host-capability libraries fail here, with the position of the call:
// they need context-aware host calls that Warden does not make yet.
func compileExpr(env *cel.Env, expr string) (*cel.Ast, error) {
	parsed, iss := env.Parse(expr)
	if err := iss.Err(); err != nil {
		return nil, err
	}
	if err := checkHostCapabilities(parsed, expr); err != nil {
		return nil, err
	}
	checked, iss := env.Check(parsed)
	if err := iss.Err(); err != nil {
		return nil, err
	}
	return checked, nil
}

// checkHostCapabilities reports each call of a kw.* entry point as a CEL
// error, so it reads like any other compile error: position and snippet.
func checkHostCapabilities(parsed *cel.Ast, expr string) error {
	src := common.NewTextSource(expr)
	errs := common.NewErrors(src)
	info := parsed.NativeRep().SourceInfo()
	ast.PreOrderVisit(parsed.NativeRep().Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() != ast.CallKind || !e.AsCall().IsMemberFunction() {
			return
		}
		call := e.AsCall()
		name, root, ok := qualifiedName(call.Target())
		if !ok {
			return
		}
		name += "." + call.FunctionName()
		lib, known := hostCapabilityFuncs[name]
		if !known {
			return
		}
		errs.ReportErrorAtID(root.ID(), info.GetStartLocation(root.ID()),
			"%s: the %s library calls Kubewarden host capabilities, which need context-aware host calls that Warden's native CEL runner does not support yet",
			name, lib)
	}))
	if len(errs.GetErrors()) == 0 {
		return nil
	}
	return errors.New(cel.NewIssues(errs).String())
}

// qualifiedName returns the dotted name of a chain of field selections on an
// identifier (kw.oci), and the identifier.
func qualifiedName(e ast.Expr) (string, ast.Expr, bool) {
	var parts []string
	for e.Kind() == ast.SelectKind {
		sel := e.AsSelect()
		if sel.IsTestOnly() {
			return "", nil, false
		}
		parts = append(parts, sel.FieldName())
		e = sel.Operand()
	}
	if e.Kind() != ast.IdentKind {
		return "", nil, false
	}
	parts = append(parts, e.AsIdent())
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, "."), e, true
}

// isCELIdentifier reports whether name is a CEL identifier and not a
// reserved word, the rule cel-policy applies to variable names.
func isCELIdentifier(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	switch name {
	case "true", "false", "null", "in", "as", "break", "const", "continue", "else",
		"for", "function", "if", "import", "let", "loop", "package", "namespace",
		"return", "var", "void", "while":
		return false
	}
	return true
}
