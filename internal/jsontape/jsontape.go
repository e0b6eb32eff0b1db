// Package jsontape parses JSON text in one pass into a tape: a flat slice of
// nodes, one per value, that records where each value's text is and where
// the next value starts. Readers walk the tape instead of decoding into Go
// values, so a caller pays only for the values it reads, and strings are
// slices of the text.
//
// Parse accepts exactly the texts encoding/json decodes into any without
// error: the same syntax, nesting limit and number range. What a value
// means (escapes, repeated keys) is encoding/json's: Str decodes escapes as
// encoding/json does, and a caller that needs the last of a repeated key
// checks Unique first.
//
// It imports nothing from Warden. A Tape is not safe for concurrent use.
package jsontape

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// Tape is a JSON text and its nodes. Node 0 is the top-level value.
type Tape struct {
	Text  string
	Nodes []Node
}

// Node is one value on the tape. An object's node is followed by its
// members, each a key node and the value's nodes; an array's by its
// elements' nodes. So the members of the object at node i are walked with
// k := i + 1; k < Nodes[i].Next; k = Nodes[k+1].Next (key k, value k+1),
// and the elements of an array with e := i + 1; e < Nodes[i].Next;
// e = Nodes[e].Next.
type Node struct {
	Start, End int32 // the value's text; a string's includes its quotes
	Next       int32 // the index of the node after this value's nodes
	Count      int32 // an object's members, an array's elements
	Kind       byte  // '{', '[', '"', 't', 'f', 'n', or '0' for a number
	Plain      bool  // a string whose text between the quotes is its value
	keys       byte  // an object's keys: keysUnchecked, keysUnique, keysRepeated
}

// Whether an object repeats a key is checked when first asked.
const (
	keysUnchecked = iota
	keysUnique
	keysRepeated
)

// Raw returns the text of the value at node i.
func (d *Tape) Raw(i int32) string {
	n := &d.Nodes[i]
	return d.Text[n.Start:n.End]
}

// Number returns the value of the number at node i.
func (d *Tape) Number(i int32) float64 {
	return parseNumber(d.Raw(i))
}

// Parse builds the tape of text, reusing d's buffer. It reports false when encoding/json would
// not decode text into any without error (invalid syntax, nesting deeper
// than maxDepth, a number out of float64's range): those cases are left to
// encoding/json.
func (d *Tape) Parse(text string) bool {
	if len(text) > math.MaxInt32 {
		return false
	}
	d.Text, d.Nodes = text, d.Nodes[:0]
	p := parser{d: d}
	p.ws()
	if !p.value(0) {
		return false
	}
	p.ws()
	return p.pos == len(text)
}

type parser struct {
	d   *Tape
	pos int
}

func (p *parser) ws() {
	s := p.d.Text
	for p.pos < len(s) && (s[p.pos] == ' ' || s[p.pos] == '\t' || s[p.pos] == '\n' || s[p.pos] == '\r') {
		p.pos++
	}
}

func (p *parser) push(kind byte) int {
	p.d.Nodes = append(p.d.Nodes, Node{Start: int32(p.pos), Kind: kind})
	return len(p.d.Nodes) - 1
}

func (p *parser) done(i int) bool {
	n := &p.d.Nodes[i]
	n.End, n.Next = int32(p.pos), int32(len(p.d.Nodes))
	return true
}

func (p *parser) value(depth int) bool {
	s := p.d.Text
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
	s := p.d.Text
	if len(s)-p.pos < len(lit) || s[p.pos:p.pos+len(lit)] != lit {
		return false
	}
	i := p.push(lit[0])
	p.pos += len(lit)
	return p.done(i)
}

func (p *parser) object(depth int) bool {
	s := p.d.Text
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
			p.d.Nodes[i].Count = count
			return p.done(i)
		default:
			return false
		}
	}
}

func (p *parser) array(depth int) bool {
	s := p.d.Text
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
			p.d.Nodes[i].Count = count
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
	s := p.d.Text
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
			start := p.d.Nodes[i].Start
			p.pos++
			p.d.Nodes[i].Plain = !escaped && (ascii || utf8.ValidString(s[start+1:p.pos-1]))
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
	s := p.d.Text
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

// Unique reports whether the object at node i has no repeated key.
func (d *Tape) Unique(i int32) bool {
	switch d.Nodes[i].keys {
	case keysUnique:
		return true
	case keysRepeated:
		return false
	}
	u := d.uniqueKeys(i)
	d.Nodes[i].keys = keysRepeated
	if u {
		d.Nodes[i].keys = keysUnique
	}
	return u
}

func (d *Tape) uniqueKeys(i int32) bool {
	n := d.Nodes[i]
	if n.Count < 2 {
		return true
	}
	if n.Count > 32 {
		seen := make(map[string]struct{}, n.Count)
		for k := i + 1; k < n.Next; k = d.Nodes[k+1].Next {
			key := d.Str(k)
			if _, dup := seen[key]; dup {
				return false
			}
			seen[key] = struct{}{}
		}
		return true
	}
	var buf [32]string
	keys := buf[:0]
	for k := i + 1; k < n.Next; k = d.Nodes[k+1].Next {
		key := d.Str(k)
		for _, prev := range keys {
			if key == prev {
				return false
			}
		}
		keys = append(keys, key)
	}
	return true
}

// Str returns the value of the string at node i.
func (d *Tape) Str(i int32) string {
	n := &d.Nodes[i]
	body := d.Text[n.Start+1 : n.End-1]
	if n.Plain {
		return body
	}
	return unescape(body)
}

// KeyIs reports whether the string at node i is key.
func (d *Tape) KeyIs(i int32, key string) bool {
	n := &d.Nodes[i]
	if n.Plain {
		return d.Text[n.Start+1:n.End-1] == key
	}
	return unescape(d.Text[n.Start+1:n.End-1]) == key
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

// Member returns the node of the value of key in the object at node i, or -1.
func (d *Tape) Member(i int32, key string) int32 {
	end := d.Nodes[i].Next
	for k := i + 1; k < end; k = d.Nodes[k+1].Next {
		if d.KeyIs(k, key) {
			return k + 1
		}
	}
	return -1
}
