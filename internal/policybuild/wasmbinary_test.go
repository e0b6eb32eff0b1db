package policybuild

import (
	"bytes"
	"errors"
	"fmt"
)

// importsAndExports reads a wasm module's import and export sections and
// returns the distinct modules it imports from and the names it exports. It is
// just enough of the binary format to check what the test policies link.
func importsAndExports(module []byte) (imports, exports []string, err error) {
	magic := []byte("\x00asm\x01\x00\x00\x00")
	if !bytes.HasPrefix(module, magic) {
		return nil, nil, errors.New("not a wasm module")
	}
	r := &reader{b: module[len(magic):]}
	seen := map[string]bool{}
	for len(r.b) > 0 && r.err == nil {
		id := r.byte()
		s := &reader{b: r.bytes(int(r.u32()))}
		switch id {
		case 2: // imports: module name, field name, description
			for n := s.u32(); n > 0 && s.err == nil; n-- {
				mod := s.name()
				s.name()
				switch kind := s.byte(); kind {
				case 0: // function: type index
					s.u32()
				case 1: // table: reference type, limits
					s.byte()
					s.limits()
				case 2: // memory: limits
					s.limits()
				case 3: // global: value type, mutability
					s.byte()
					s.byte()
				default:
					return nil, nil, fmt.Errorf("unknown import kind %d", kind)
				}
				if !seen[mod] {
					seen[mod] = true
					imports = append(imports, mod)
				}
			}
		case 7: // exports: name, kind, index
			for n := s.u32(); n > 0 && s.err == nil; n-- {
				exports = append(exports, s.name())
				s.byte()
				s.u32()
			}
		}
		if s.err != nil {
			return nil, nil, fmt.Errorf("section %d: %w", id, s.err)
		}
	}
	return imports, exports, r.err
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		r.err = errors.New("unexpected end of data")
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) byte() byte {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return b[0]
}

// u32 reads an unsigned LEB128 number.
func (r *reader) u32() uint32 {
	var v uint32
	for shift := 0; shift < 35; shift += 7 {
		c := r.byte()
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
	r.err = errors.New("LEB128 number too long")
	return 0
}

func (r *reader) name() string { return string(r.bytes(int(r.u32()))) }

// limits reads a flag, a minimum and, when the flag says so, a maximum.
func (r *reader) limits() {
	flag := r.byte()
	r.u32()
	if flag&1 != 0 {
		r.u32()
	}
}
