package rego

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
)

// parseValue reads a Rego value in OPA's text form, as a module's
// opa_value_dump writes it: JSON, plus sets ({1, 2} and set()) and object
// keys of any type. It is what ast.ParseTerm reads for such input, without
// the cost of the Rego parser.
func parseValue(b []byte) (ast.Value, error) {
	p := valueParser{b: b}
	v, err := p.value(0)
	if err == nil {
		if p.skipSpace(); p.i < len(p.b) {
			err = p.errorf("unexpected %q after the value", p.b[p.i])
		}
	}
	return v, err
}

// maxValueDepth bounds the nesting of a value, as OPA's parser does.
const maxValueDepth = ast.DefaultMaxParsingRecursionDepth

type valueParser struct {
	b []byte
	i int
}

func (p *valueParser) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: "+format, append([]any{p.i}, args...)...)
}

func (p *valueParser) skipSpace() {
	for p.i < len(p.b) && strings.IndexByte(" \t\r\n", p.b[p.i]) >= 0 {
		p.i++
	}
}

// consume skips spaces and c, reporting whether c was there.
func (p *valueParser) consume(c byte) bool {
	if p.skipSpace(); p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

var errEnd = errors.New("unexpected end of value")

func (p *valueParser) value(depth int) (ast.Value, error) {
	if depth > maxValueDepth {
		return nil, p.errorf("value nested too deeply")
	}
	if p.skipSpace(); p.i >= len(p.b) {
		return nil, errEnd
	}
	switch c := p.b[p.i]; {
	case c == '"':
		return p.string()
	case c == '-' || c >= '0' && c <= '9':
		start := p.i
		for p.i < len(p.b) && strings.IndexByte("+-.eE0123456789", p.b[p.i]) >= 0 {
			p.i++
		}
		if !json.Valid(p.b[start:p.i]) {
			return nil, p.errorf("invalid number %s", p.b[start:p.i])
		}
		return ast.Number(p.b[start:p.i]), nil
	case c == '[':
		p.i++
		arr := []*ast.Term{}
		err := p.elements(']', depth, func(v ast.Value) error {
			arr = append(arr, ast.NewTerm(v))
			return nil
		})
		return ast.NewArray(arr...), err
	case c == '{':
		return p.objectOrSet(depth)
	}
	for _, lit := range []struct {
		text string
		v    ast.Value
	}{{"true", ast.Boolean(true)}, {"false", ast.Boolean(false)}, {"null", ast.Null{}}, {"set()", ast.NewSet()}} {
		if bytes.HasPrefix(p.b[p.i:], []byte(lit.text)) {
			p.i += len(lit.text)
			return lit.v, nil
		}
	}
	return nil, p.errorf("unexpected %q", p.b[p.i])
}

func (p *valueParser) string() (ast.Value, error) {
	start := p.i
	escaped := false
	for p.i++; p.i < len(p.b); p.i++ {
		switch p.b[p.i] {
		case '\\':
			escaped = true
			p.i++
		case '"':
			p.i++
			raw := p.b[start:p.i]
			if !escaped && utf8.Valid(raw) {
				return ast.String(raw[1 : len(raw)-1]), nil
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, p.errorf("invalid string: %w", err)
			}
			return ast.String(s), nil
		}
	}
	return nil, errEnd
}

// elements reads values separated by commas up to end, which it consumes.
func (p *valueParser) elements(end byte, depth int, add func(ast.Value) error) error {
	if p.consume(end) {
		return nil
	}
	for {
		v, err := p.value(depth + 1)
		if err != nil {
			return err
		}
		if err := add(v); err != nil {
			return err
		}
		if p.consume(end) {
			return nil
		}
		if !p.consume(',') {
			return p.errorf("want ',' or %q", end)
		}
	}
}

func (p *valueParser) objectOrSet(depth int) (ast.Value, error) {
	p.i++
	if p.consume('}') {
		return ast.NewObject(), nil
	}
	first, err := p.value(depth + 1)
	if err != nil {
		return nil, err
	}
	if !p.consume(':') { // a set
		set := ast.NewSet(ast.NewTerm(first))
		if p.consume('}') {
			return set, nil
		}
		if !p.consume(',') {
			return nil, p.errorf("want ',' or '}'")
		}
		err := p.elements('}', depth, func(v ast.Value) error {
			set.Add(ast.NewTerm(v))
			return nil
		})
		return set, err
	}
	obj := ast.NewObject()
	key := first
	for {
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		obj.Insert(ast.NewTerm(key), ast.NewTerm(v))
		if p.consume('}') {
			return obj, nil
		}
		if !p.consume(',') {
			return nil, p.errorf("want ',' or '}'")
		}
		if key, err = p.value(depth + 1); err != nil {
			return nil, err
		}
		if !p.consume(':') {
			return nil, p.errorf("want ':'")
		}
	}
}
