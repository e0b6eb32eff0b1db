package rego

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// ApplyJSONPatch applies an RFC 6902 JSON patch to doc with OPA's json.patch
// builtin, so that a patch an OPA policy returns means what it means in
// Rego. It is safe for concurrent use.
func ApplyJSONPatch(doc, patch []byte) ([]byte, error) {
	d, err := ast.ValueFromReader(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("reading the document: %w", err)
	}
	p, err := ast.ValueFromReader(bytes.NewReader(patch))
	if err != nil {
		return nil, fmt.Errorf("reading the patch: %w", err)
	}
	var out *ast.Term
	err = topdown.GetBuiltin(ast.JSONPatch.Name)(topdown.BuiltinContext{}, []*ast.Term{ast.NewTerm(d), ast.NewTerm(p)},
		func(t *ast.Term) error {
			out = t
			return nil
		})
	if err != nil {
		return nil, err
	}
	if out == nil {
		return nil, errors.New("the patch does not apply")
	}
	v, err := ast.JSON(out.Value)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}
