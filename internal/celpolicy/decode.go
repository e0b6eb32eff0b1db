package celpolicy

import (
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// The fast decoder reads a request as CEL values with the meaning cel-policy
// gets from encoding/json decoding into any: objects are maps keyed by
// strings, arrays are lists, numbers are doubles. One pass over the text
// validates it and records every value on a tape; values are then read from
// the tape when an expression reaches them, and strings are slices of the
// text. Values belong to one evaluation and are not safe for concurrent use.

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// document is a JSON text and its tape.
type document struct {
	text  string
	nodes []node
	vals  []ref.Val // the objects and arrays read so far, by node
}

// node is one value on the tape. An object's node is followed by its
// members, each a key node and the value's nodes; an array's by its
// elements' nodes.
type node struct {
	start, end int32 // the value's text; a string's includes its quotes
	next       int32 // the index of the node after this value's nodes
	count      int32 // an object's members, an array's elements
	kind       byte  // '{', '[', '"', 't', 'f', 'n', or '0' for a number
	plain      bool  // a string whose text between the quotes is its value
	keys       byte  // an object's keys: keysUnchecked, keysUnique, keysRepeated
}

// Whether an object repeats a key is checked when the object is first read.
const (
	keysUnchecked = iota
	keysUnique
	keysRepeated
)

// parse builds the tape of text. It reports false when encoding/json would
// not decode text into any without error (invalid syntax, nesting deeper
// than maxDepth, a number out of float64's range): those cases are left to
// encoding/json.
func (d *document) parse(text string) bool {
	if len(text) > math.MaxInt32 {
		return false
	}
	d.text, d.nodes, d.vals = text, d.nodes[:0], d.vals[:0]
	p := parser{d: d}
	p.ws()
	if !p.value(0) {
		return false
	}
	p.ws()
	return p.pos == len(text)
}

type parser struct {
	d   *document
	pos int
}

func (p *parser) ws() {
	s := p.d.text
	for p.pos < len(s) && (s[p.pos] == ' ' || s[p.pos] == '\t' || s[p.pos] == '\n' || s[p.pos] == '\r') {
		p.pos++
	}
}

func (p *parser) push(kind byte) int {
	p.d.nodes = append(p.d.nodes, node{start: int32(p.pos), kind: kind})
	return len(p.d.nodes) - 1
}

func (p *parser) done(i int) bool {
	n := &p.d.nodes[i]
	n.end, n.next = int32(p.pos), int32(len(p.d.nodes))
	return true
}

func (p *parser) value(depth int) bool {
	s := p.d.text
	if p.pos >= len(s) {
		return false
	}
	switch c := s[p.pos]; {
	case c == '{':
		return depth < maxDepth && p.object(depth+1)
	case c == '[':
		return depth < maxDepth && p.array(depth+1)
	case c == '"':
		return p.str()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || ('0' <= c && c <= '9'):
		return p.number()
	}
	return false
}

func (p *parser) literal(lit string) bool {
	s := p.d.text
	if len(s)-p.pos < len(lit) || s[p.pos:p.pos+len(lit)] != lit {
		return false
	}
	i := p.push(lit[0])
	p.pos += len(lit)
	return p.done(i)
}

func (p *parser) object(depth int) bool {
	s := p.d.text
	i := p.push('{')
	p.pos++
	p.ws()
	if p.pos < len(s) && s[p.pos] == '}' {
		p.pos++
		return p.done(i)
	}
	for count := int32(1); ; count++ {
		if p.pos >= len(s) || s[p.pos] != '"' || !p.str() {
			return false
		}
		p.ws()
		if p.pos >= len(s) || s[p.pos] != ':' {
			return false
		}
		p.pos++
		p.ws()
		if !p.value(depth) {
			return false
		}
		p.ws()
		if p.pos >= len(s) {
			return false
		}
		switch s[p.pos] {
		case ',':
			p.pos++
			p.ws()
		case '}':
			p.pos++
			p.d.nodes[i].count = count
			return p.done(i)
		default:
			return false
		}
	}
}

func (p *parser) array(depth int) bool {
	s := p.d.text
	i := p.push('[')
	p.pos++
	p.ws()
	if p.pos < len(s) && s[p.pos] == ']' {
		p.pos++
		return p.done(i)
	}
	for count := int32(1); ; count++ {
		if !p.value(depth) {
			return false
		}
		p.ws()
		if p.pos >= len(s) {
			return false
		}
		switch s[p.pos] {
		case ',':
			p.pos++
			p.ws()
		case ']':
			p.pos++
			p.d.nodes[i].count = count
			return p.done(i)
		default:
			return false
		}
	}
}

// special marks the bytes a string scan stops at.
var special = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	for c := utf8.RuneSelf; c < 256; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

func (p *parser) str() bool {
	s := p.d.text
	i := p.push('"')
	ascii, escaped := true, false
	for p.pos++; p.pos < len(s); p.pos++ {
		for p.pos < len(s) && !special[s[p.pos]] {
			p.pos++
		}
		if p.pos >= len(s) {
			return false
		}
		switch c := s[p.pos]; {
		case c == '"':
			start := p.d.nodes[i].start
			p.pos++
			p.d.nodes[i].plain = !escaped && (ascii || utf8.ValidString(s[start+1:p.pos-1]))
			return p.done(i)
		case c < 0x20:
			return false
		case c >= utf8.RuneSelf:
			ascii = false
		default: // backslash
			escaped = true
			p.pos++
			if p.pos >= len(s) {
				return false
			}
			switch s[p.pos] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if p.pos+4 >= len(s) {
					return false
				}
				for _, h := range []byte(s[p.pos+1 : p.pos+5]) {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return false
					}
				}
				p.pos += 4
			default:
				return false
			}
		}
	}
	return false
}

func (p *parser) number() bool {
	s := p.d.text
	i := p.push('0')
	start := p.pos
	digits := func() int {
		n := p.pos
		for p.pos < len(s) && '0' <= s[p.pos] && s[p.pos] <= '9' {
			p.pos++
		}
		return p.pos - n
	}
	if s[p.pos] == '-' {
		p.pos++
	}
	if p.pos < len(s) && s[p.pos] == '0' {
		p.pos++
	} else if digits() == 0 {
		return false
	}
	if p.pos < len(s) && s[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return false
		}
	}
	exponent := p.pos < len(s) && (s[p.pos] == 'e' || s[p.pos] == 'E')
	if exponent {
		p.pos++
		if p.pos < len(s) && (s[p.pos] == '+' || s[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return false
		}
	}
	// Without an exponent, 300 characters cannot leave float64's range.
	if exponent || p.pos-start > 300 {
		if _, err := strconv.ParseFloat(s[start:p.pos], 64); err != nil {
			return false
		}
	}
	return p.done(i)
}

// unique reports whether the object at node i has no repeated key.
func (d *document) unique(i int32) bool {
	switch d.nodes[i].keys {
	case keysUnique:
		return true
	case keysRepeated:
		return false
	}
	u := d.uniqueKeys(i)
	d.nodes[i].keys = keysRepeated
	if u {
		d.nodes[i].keys = keysUnique
	}
	return u
}

func (d *document) uniqueKeys(i int32) bool {
	n := d.nodes[i]
	if n.count < 2 {
		return true
	}
	if n.count > 32 {
		seen := make(map[string]struct{}, n.count)
		for k := i + 1; k < n.next; k = d.nodes[k+1].next {
			key := d.str(k)
			if _, dup := seen[key]; dup {
				return false
			}
			seen[key] = struct{}{}
		}
		return true
	}
	var buf [32]string
	keys := buf[:0]
	for k := i + 1; k < n.next; k = d.nodes[k+1].next {
		key := d.str(k)
		for _, prev := range keys {
			if key == prev {
				return false
			}
		}
		keys = append(keys, key)
	}
	return true
}

// str returns the value of the string at node i.
func (d *document) str(i int32) string {
	n := &d.nodes[i]
	body := d.text[n.start+1 : n.end-1]
	if n.plain {
		return body
	}
	return unescape(body)
}

// keyIs reports whether the string at node i is key.
func (d *document) keyIs(i int32, key string) bool {
	n := &d.nodes[i]
	if n.plain {
		return d.text[n.start+1:n.end-1] == key
	}
	return unescape(d.text[n.start+1:n.end-1]) == key
}

// unescape decodes the text of a valid JSON string as encoding/json does:
// escapes decoded, an unpaired surrogate or an invalid UTF-8 byte replaced by
// U+FFFD.
func unescape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			i++
			switch e := s[i]; e {
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r := hex4(s[i+1:])
				i += 5
				if utf16.IsSurrogate(r) {
					r2 := utf8.RuneError
					if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
						r2 = utf16.DecodeRune(r, hex4(s[i+2:]))
					}
					if r = r2; r != utf8.RuneError {
						i += 6
					}
				}
				b.WriteRune(r)
				continue
			default: // " \ /
				b.WriteByte(e)
			}
			i++
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b.WriteRune(utf8.RuneError)
			} else {
				b.WriteString(s[i : i+size])
			}
			i += size
		}
	}
	return b.String()
}

func hex4(s string) rune {
	var r rune
	for _, c := range []byte(s[:4]) {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// parseNumber parses a JSON number known to fit a float64.
func parseNumber(s string) float64 {
	if len(s) <= 15 && s != "-0" { // at most 15 digits: exact as an integer
		n, digits := 0, s
		if s[0] == '-' {
			digits = s[1:]
		}
		for i := 0; i < len(digits); i++ {
			c := digits[i]
			if c < '0' || c > '9' {
				f, _ := strconv.ParseFloat(s, 64)
				return f
			}
			n = n*10 + int(c-'0')
		}
		if s[0] == '-' {
			n = -n
		}
		return float64(n)
	}
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// value returns the value at node i. An object or array is made once, so
// that what it has decoded is kept.
func (d *document) value(i int32) ref.Val {
	n := &d.nodes[i]
	switch n.kind {
	case '{', '[':
		if len(d.vals) == 0 {
			d.vals = slices.Grow(d.vals, len(d.nodes))[:len(d.nodes)]
			clear(d.vals)
		}
		if d.vals[i] == nil {
			if n.kind == '{' {
				d.vals[i] = &jsonObject{d: d, i: i}
			} else {
				d.vals[i] = &jsonArray{d: d, i: i}
			}
		}
		return d.vals[i]
	case '"':
		return types.String(d.str(i))
	case 't':
		return types.True
	case 'f':
		return types.False
	case 'n':
		return types.NullValue
	}
	return types.Double(parseNumber(d.text[n.start:n.end]))
}

// member returns the node of the value of key in the object at node i, or -1.
func (d *document) member(i int32, key string) int32 {
	end := d.nodes[i].next
	for k := i + 1; k < end; k = d.nodes[k+1].next {
		if d.keyIs(k, key) {
			return k + 1
		}
	}
	return -1
}

// jsonObject is a JSON object as a CEL map with string keys. Lookups, size
// and folds read the tape; the rest of the map behaviour comes from a cel-go
// map built on first need, so that it is cel-go's own. An object that
// repeats a key (the last one wins, as in encoding/json) is served by that
// map alone.
type jsonObject struct {
	d    *document
	i    int32
	base traits.Mapper
}

func (o *jsonObject) mapper() traits.Mapper {
	if o.base == nil {
		n := o.d.nodes[o.i]
		m := make(map[ref.Val]ref.Val, n.count)
		for k := o.i + 1; k < n.next; k = o.d.nodes[k+1].next {
			m[types.String(o.d.str(k))] = o.d.value(k + 1) // the last of a repeated key wins
		}
		o.base = types.NewRefValMap(types.DefaultTypeAdapter, m)
	}
	return o.base
}

// Find implements traits.Mapper.
func (o *jsonObject) Find(key ref.Val) (ref.Val, bool) {
	if !o.d.unique(o.i) {
		return o.mapper().Find(key)
	}
	k, ok := key.(types.String)
	if !ok {
		return nil, false
	}
	if v := o.d.member(o.i, string(k)); v >= 0 {
		return o.d.value(v), true
	}
	return nil, false
}

// Get implements traits.Indexer.
func (o *jsonObject) Get(key ref.Val) ref.Val {
	v, found := o.Find(key)
	if !found {
		return types.ValOrErr(v, "no such key: %v", key)
	}
	return v
}

// Contains implements traits.Container.
func (o *jsonObject) Contains(key ref.Val) ref.Val {
	_, found := o.Find(key)
	return types.Bool(found)
}

// Size implements traits.Sizer.
func (o *jsonObject) Size() ref.Val {
	if !o.d.unique(o.i) {
		return o.mapper().Size()
	}
	return types.Int(o.d.nodes[o.i].count)
}

// Iterator implements traits.Iterable.
func (o *jsonObject) Iterator() traits.Iterator {
	if !o.d.unique(o.i) {
		return o.mapper().Iterator()
	}
	n := o.d.nodes[o.i]
	keys := make([]string, 0, n.count)
	for k := o.i + 1; k < n.next; k = o.d.nodes[k+1].next {
		keys = append(keys, o.d.str(k))
	}
	return types.NewStringList(types.DefaultTypeAdapter, keys).Iterator()
}

// Fold implements traits.Foldable.
func (o *jsonObject) Fold(f traits.Folder) {
	if !o.d.unique(o.i) {
		types.ToFoldableMap(o.mapper()).Fold(f)
		return
	}
	end := o.d.nodes[o.i].next
	for k := o.i + 1; k < end; k = o.d.nodes[k+1].next {
		if !f.FoldEntry(types.String(o.d.str(k)), o.d.value(k+1)) {
			return
		}
	}
}

// ConvertToNative implements ref.Val.
func (o *jsonObject) ConvertToNative(t reflect.Type) (any, error) {
	return o.mapper().ConvertToNative(t)
}

// ConvertToType implements ref.Val.
func (o *jsonObject) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return o
	case types.TypeType:
		return types.MapType
	}
	return o.mapper().ConvertToType(t)
}

// Equal implements ref.Val.
func (o *jsonObject) Equal(other ref.Val) ref.Val { return o.mapper().Equal(other) }

// Type implements ref.Val.
func (o *jsonObject) Type() ref.Type { return types.MapType }

// Value implements ref.Val.
func (o *jsonObject) Value() any { return o.mapper().Value() }

// jsonArray is a JSON array as a CEL list: a cel-go list of its elements,
// built on first use.
type jsonArray struct {
	d    *document
	i    int32
	list traits.Lister
}

func (a *jsonArray) lister() traits.Lister {
	if a.list == nil {
		n := a.d.nodes[a.i]
		elems := make([]ref.Val, 0, n.count)
		for e := a.i + 1; e < n.next; e = a.d.nodes[e].next {
			elems = append(elems, a.d.value(e))
		}
		a.list = types.NewRefValList(types.DefaultTypeAdapter, elems)
	}
	return a.list
}

// Add implements traits.Adder.
func (a *jsonArray) Add(other ref.Val) ref.Val { return a.lister().Add(other) }

// Contains implements traits.Container.
func (a *jsonArray) Contains(v ref.Val) ref.Val { return a.lister().Contains(v) }

// Get implements traits.Indexer.
func (a *jsonArray) Get(i ref.Val) ref.Val { return a.lister().Get(i) }

// Iterator implements traits.Iterable.
func (a *jsonArray) Iterator() traits.Iterator { return a.lister().Iterator() }

// Size implements traits.Sizer.
func (a *jsonArray) Size() ref.Val { return types.Int(a.d.nodes[a.i].count) }

// Fold implements traits.Foldable.
func (a *jsonArray) Fold(f traits.Folder) { types.ToFoldableList(a.lister()).Fold(f) }

// ConvertToNative implements ref.Val.
func (a *jsonArray) ConvertToNative(t reflect.Type) (any, error) {
	return a.lister().ConvertToNative(t)
}

// ConvertToType implements ref.Val.
func (a *jsonArray) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.ListType:
		return a
	case types.TypeType:
		return types.ListType
	}
	return a.lister().ConvertToType(t)
}

// Equal implements ref.Val.
func (a *jsonArray) Equal(other ref.Val) ref.Val { return a.lister().Equal(other) }

// Type implements ref.Val.
func (a *jsonArray) Type() ref.Type { return types.ListType }

// Value implements ref.Val.
func (a *jsonArray) Value() any { return a.lister().Value() }
