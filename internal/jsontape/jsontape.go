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
	"math/bits"
	"slices"
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
	p := parser{s: text, nodes: d.Nodes[:0]}
	pos, ok := p.value(skipWS(text, 0), 0)
	d.Text, d.Nodes = text, p.nodes
	return ok && skipWS(text, pos) == len(text)
}

// parser builds the nodes of s. Its methods take the position of the value
// to parse and return the position after it; positions stay in registers.
type parser struct {
	s     string
	nodes []Node
}

// skipWS returns the position of the first byte at or after pos that is not
// JSON whitespace.
func skipWS(s string, pos int) int {
	for pos < len(s) {
		if c := s[pos]; c > ' ' || (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
			return pos
		}
		pos++
	}
	return pos
}

// leaf appends the node of a value without children, s[start:end].
func (p *parser) leaf(kind byte, start, end int, plain bool) {
	n := p.add()
	n.Start, n.End, n.Next, n.Count = int32(start), int32(end), int32(len(p.nodes)), 0
	n.Kind, n.Plain, n.keys = kind, plain, keysUnchecked
}

// open appends the node of an object or array starting at pos; close ends it.
func (p *parser) open(kind byte, pos int) int {
	n := p.add()
	n.Start, n.Kind, n.Plain, n.keys = int32(pos), kind, false, keysUnchecked
	return len(p.nodes) - 1
}

// add appends a node and returns it, its fields as they were in the buffer:
// the caller sets them one by one. (A composite literal would be built on
// the stack and copied in with wide loads that stall on its narrow stores.)
func (p *parser) add() *Node {
	if len(p.nodes) == cap(p.nodes) {
		p.nodes = slices.Grow(p.nodes, 1)
	}
	p.nodes = p.nodes[:len(p.nodes)+1]
	return &p.nodes[len(p.nodes)-1]
}

func (p *parser) close(i, end int, count int32) {
	n := &p.nodes[i]
	n.End, n.Next, n.Count = int32(end), int32(len(p.nodes)), count
}

func (p *parser) value(pos, depth int) (int, bool) {
	s := p.s
	if pos >= len(s) {
		return pos, false
	}
	switch c := s[pos]; {
	case c == '"':
		if end := plainEnd(s, pos+1); end < len(s) && s[end] == '"' { // as for keys in object
			p.leaf('"', pos, end+1, true)
			return end + 1, true
		}
		return p.str(pos)
	case c == '{':
		if depth >= maxDepth {
			return pos, false
		}
		return p.object(pos, depth+1)
	case c == '[':
		if depth >= maxDepth {
			return pos, false
		}
		return p.array(pos, depth+1)
	case c == '-' || ('0' <= c && c <= '9'):
		return p.number(pos)
	case c == 't':
		return p.literal(pos, "true")
	case c == 'f':
		return p.literal(pos, "false")
	case c == 'n':
		return p.literal(pos, "null")
	}
	return pos, false
}

func (p *parser) literal(pos int, lit string) (int, bool) {
	s := p.s
	if len(s)-pos < len(lit) || s[pos:pos+len(lit)] != lit {
		return pos, false
	}
	p.leaf(lit[0], pos, pos+len(lit), false)
	return pos + len(lit), true
}

func (p *parser) object(pos, depth int) (int, bool) {
	s := p.s
	i := p.open('{', pos)
	pos = skipWS(s, pos+1)
	if pos < len(s) && s[pos] == '}' {
		p.close(i, pos+1, 0)
		return pos + 1, true
	}
	for count := int32(1); ; count++ {
		if pos >= len(s) || s[pos] != '"' {
			return pos, false
		}
		var ok bool
		// Most keys are ASCII without escapes: such a key ends at the first
		// byte the string scan stops at, which spares str's checks. Any
		// other goes through str.
		if end := plainEnd(s, pos+1); end < len(s) && s[end] == '"' {
			p.leaf('"', pos, end+1, true)
			pos = end + 1
		} else if pos, ok = p.str(pos); !ok {
			return pos, false
		}
		pos = skipWS(s, pos)
		if pos >= len(s) || s[pos] != ':' {
			return pos, false
		}
		if pos, ok = p.value(skipWS(s, pos+1), depth); !ok {
			return pos, false
		}
		pos = skipWS(s, pos)
		if pos >= len(s) {
			return pos, false
		}
		switch s[pos] {
		case ',':
			pos = skipWS(s, pos+1)
		case '}':
			p.close(i, pos+1, count)
			return pos + 1, true
		default:
			return pos, false
		}
	}
}

func (p *parser) array(pos, depth int) (int, bool) {
	s := p.s
	i := p.open('[', pos)
	pos = skipWS(s, pos+1)
	if pos < len(s) && s[pos] == ']' {
		p.close(i, pos+1, 0)
		return pos + 1, true
	}
	for count := int32(1); ; count++ {
		var ok bool
		if pos, ok = p.value(pos, depth); !ok {
			return pos, false
		}
		pos = skipWS(s, pos)
		if pos >= len(s) {
			return pos, false
		}
		switch s[pos] {
		case ',':
			pos = skipWS(s, pos+1)
		case ']':
			p.close(i, pos+1, count)
			return pos + 1, true
		default:
			return pos, false
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

// Bytes repeated in each of a word's 8 bytes, for the string scan.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// specialBytes has the high bit set in the byte of w (little endian) that
// is the first special byte, and possibly in bytes after it; 0 when none
// is special. (x-ones)&^x&highs marks a zero byte of x exactly up to the
// first one.
func specialBytes(w uint64) uint64 {
	quote, backslash := w^(ones*'"'), w^(ones*'\\')
	return ((quote-ones)&^quote | (backslash-ones)&^backslash | (w-ones*0x20)&^w | w) & highs
}

// plainEnd returns the position of the first byte at or after pos that a
// string scan stops at (special), or len(s).
func plainEnd(s string, pos int) int {
	for pos+8 <= len(s) {
		b := s[pos : pos+8]
		if m := specialBytes(uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56); m != 0 {
			return pos + bits.TrailingZeros64(m)>>3
		}
		pos += 8
	}
	for pos < len(s) && !special[s[pos]] {
		pos++
	}
	return pos
}

func (p *parser) str(pos int) (int, bool) {
	s := p.s
	start := pos
	ascii, escaped := true, false
	for pos++; ; pos++ {
		// Eight bytes at a time while none is special, then one at a time.
		for pos+8 <= len(s) {
			b := s[pos : pos+8] // one bounds check, then one 8-byte load
			w := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
				uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
			if m := specialBytes(w); m != 0 {
				pos += bits.TrailingZeros64(m) >> 3
				goto found
			}
			pos += 8
		}
		for pos < len(s) && !special[s[pos]] {
			pos++
		}
		if pos >= len(s) {
			return pos, false
		}
	found:
		switch c := s[pos]; {
		case c == '"':
			pos++
			p.leaf('"', start, pos, !escaped && (ascii || utf8.ValidString(s[start+1:pos-1])))
			return pos, true
		case c < 0x20:
			return pos, false
		case c >= utf8.RuneSelf:
			ascii = false
		default: // backslash
			escaped = true
			pos++
			if pos >= len(s) {
				return pos, false
			}
			switch s[pos] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if pos+4 >= len(s) {
					return pos, false
				}
				for _, h := range []byte(s[pos+1 : pos+5]) {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return pos, false
					}
				}
				pos += 4
			default:
				return pos, false
			}
		}
	}
}

// digits returns the position after the decimal digits at pos.
func digits(s string, pos int) int {
	for pos < len(s) && '0' <= s[pos] && s[pos] <= '9' {
		pos++
	}
	return pos
}

func (p *parser) number(pos int) (int, bool) {
	s := p.s
	start := pos
	if s[pos] == '-' {
		pos++
	}
	if pos < len(s) && s[pos] == '0' {
		pos++
	} else if n := digits(s, pos); n == pos {
		return pos, false
	} else {
		pos = n
	}
	if pos < len(s) && s[pos] == '.' {
		n := digits(s, pos+1)
		if n == pos+1 {
			return n, false
		}
		pos = n
	}
	exponent := pos < len(s) && (s[pos] == 'e' || s[pos] == 'E')
	if exponent {
		pos++
		if pos < len(s) && (s[pos] == '+' || s[pos] == '-') {
			pos++
		}
		n := digits(s, pos)
		if n == pos {
			return pos, false
		}
		pos = n
	}
	// Without an exponent, 300 characters cannot leave float64's range.
	if exponent || pos-start > 300 {
		if _, err := strconv.ParseFloat(s[start:pos], 64); err != nil {
			return pos, false
		}
	}
	p.leaf('0', start, pos, false)
	return pos, true
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
		return d.uniqueByMap(i)
	}
	// Plain keys are compared in the text, by node: the array holds no
	// pointers, so filling it needs no write barriers.
	var prev [32]int32
	count := 0
	for k := i + 1; k < n.Next; k = d.Nodes[k+1].Next {
		kn := &d.Nodes[k]
		if !kn.Plain {
			return d.uniqueByMap(i)
		}
		key := d.Text[kn.Start+1 : kn.End-1]
		for _, j := range prev[:count] {
			if jn := &d.Nodes[j]; jn.End-jn.Start == kn.End-kn.Start && d.Text[jn.Start+1:jn.End-1] == key {
				return false
			}
		}
		prev[count] = k
		count++
	}
	return true
}

// uniqueByMap is uniqueKeys for a large object, or one with an escaped key.
func (d *Tape) uniqueByMap(i int32) bool {
	n := d.Nodes[i]
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

// LastMember returns the node of the value of the last member named key in
// the object at node i, or -1: the value encoding/json keeps of a repeated
// key. It spares the caller checking Unique first.
func (d *Tape) LastMember(i int32, key string) int32 {
	if d.Nodes[i].keys == keysUnique {
		return d.Member(i, key)
	}
	found, end := int32(-1), d.Nodes[i].Next
	for k := i + 1; k < end; k = d.Nodes[k+1].Next {
		if d.KeyIs(k, key) {
			found = k + 1
		}
	}
	return found
}
