package rego

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/builtins"
	"github.com/open-policy-agent/opa/v1/version"
)

// refused are the builtins OPA has that Warden will not run inside an
// admission webhook, and why. The rule: a builtin may compute anything from
// its arguments, the request and the clock, but may not reach outside the
// process. So the network builtins are refused, and so are the JSON schema
// ones, whose `$ref`s can fetch URLs and read local files, and opa.runtime,
// which would expose the server's environment.
//
// Builtins that are only non-deterministic stay: time.now_ns (one reading
// per evaluation, as in OPA), rand.intn and uuid.rfc4122 (cached within an
// evaluation, as in OPA), and the JWT and certificate builtins that check
// validity against the clock.
var refused = map[string]string{
	"http.send":          "it makes network requests",
	"net.lookup_ip_addr": "it makes network requests",
	"json.match_schema":  "schema references can reach the network and the file system",
	"json.verify_schema": "schema references can reach the network and the file system",
	"opa.runtime":        "it exposes the server's environment",
}

// capabilities deny network access to the builtins that consult them.
var capabilities = &ast.Capabilities{AllowNet: []string{}}

// Builtins runs the builtins one module leaves to its host. It is immutable
// and safe for concurrent use.
type Builtins struct {
	funcs map[string]topdown.BuiltinFunc
}

// NewBuiltins returns the implementations of the builtins named, or an
// error naming every one that Warden refuses or OPA does not know.
func NewBuiltins(names []string) (*Builtins, error) {
	b := &Builtins{funcs: make(map[string]topdown.BuiltinFunc, len(names))}
	var bad []string
	for _, name := range names {
		if why, ok := refused[name]; ok {
			bad = append(bad, fmt.Sprintf("%s (refused: %s)", name, why))
			continue
		}
		f := topdown.GetBuiltin(name)
		if f == nil {
			bad = append(bad, fmt.Sprintf("%s (unknown to OPA %s)", name, version.Version))
			continue
		}
		b.funcs[name] = f
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return nil, fmt.Errorf("unsupported Rego builtins: %s", strings.Join(bad, ", "))
	}
	return b, nil
}

// Eval is the builtin state of one evaluation: the clock reading every
// time.now_ns call returns, and the cache OPA's builtins keep per query. It
// is used by the goroutine running the evaluation only.
type Eval struct {
	b    *Builtins
	bctx topdown.BuiltinContext
}

// NewEval starts an evaluation; its builtins see ctx, and the long-running
// ones stop when ctx is done.
func (b *Builtins) NewEval(ctx context.Context) *Eval {
	return &Eval{b: b, bctx: topdown.BuiltinContext{
		Context:      ctx,
		Metrics:      metrics.NoOp(),
		Seed:         rand.Reader,
		Time:         ast.NumberTerm(json.Number(strconv.FormatInt(time.Now().UnixNano(), 10))),
		Cancel:       ctxCancel{ctx},
		Cache:        builtins.Cache{},
		Capabilities: capabilities,
	}}
}

// Call runs the builtin name on args, Rego values in OPA's text form, and
// returns its result in the same form, nil when it is undefined. As in OPA's
// default (non-strict) evaluation, a builtin error makes the call undefined,
// unless the builtin halts evaluation (cancellation, for instance): that
// error is returned.
func (e *Eval) Call(name string, args [][]byte) ([]byte, error) {
	f, ok := e.b.funcs[name]
	if !ok {
		return nil, fmt.Errorf("builtin %s was not loaded", name)
	}
	terms := make([]*ast.Term, len(args))
	for i, arg := range args {
		v, err := parseValue(arg)
		if err != nil {
			return nil, fmt.Errorf("reading argument %d: %w", i+1, err)
		}
		terms[i] = ast.NewTerm(v)
	}
	var out *ast.Term
	err := f(e.bctx, terms, func(t *ast.Term) error {
		out = t
		return nil
	})
	if err != nil {
		if _, halt := errors.AsType[topdown.Halt](err); halt {
			return nil, err
		}
		return nil, nil
	}
	if out == nil {
		return nil, nil
	}
	return appendValue(nil, out.Value)
}

// appendValue appends v in OPA's text form. Unlike ast's String methods,
// strings are JSON-escaped, which the module's parser reads.
func appendValue(b []byte, v ast.Value) ([]byte, error) {
	var err error
	switch v := v.(type) {
	case ast.Null, ast.Boolean, ast.Number:
		return append(b, v.String()...), nil
	case ast.String:
		s, err := json.Marshal(string(v))
		return append(b, s...), err
	case *ast.Array:
		b = append(b, '[')
		for i := 0; i < v.Len() && err == nil; i++ {
			if i > 0 {
				b = append(b, ',')
			}
			b, err = appendValue(b, v.Elem(i).Value)
		}
		return append(b, ']'), err
	case ast.Object:
		b = append(b, '{')
		for i, k := range v.Keys() {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendValue(b, k.Value); err != nil {
				return nil, err
			}
			b = append(b, ':')
			if b, err = appendValue(b, v.Get(k).Value); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case ast.Set:
		if v.Len() == 0 {
			return append(b, "set()"...), nil
		}
		b = append(b, '{')
		for i, t := range v.Slice() {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendValue(b, t.Value); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	default:
		return nil, fmt.Errorf("a builtin returned %s, which is not a value", ast.ValueName(v))
	}
}

// ctxCancel tells OPA's long-running builtins to stop once ctx is done.
type ctxCancel struct{ ctx context.Context }

func (c ctxCancel) Cancel()         {}
func (c ctxCancel) Cancelled() bool { return c.ctx.Err() != nil }
