package wasm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// This file reads and rewrites the WebAssembly binary format directly, without
// wazero: custom sections (policy metadata) and the export section (so that
// every mutable global can be snapshotted and restored through wazero's API).

var wasmMagic = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

// Section ids of the WebAssembly binary format.
const (
	sectionCustom = 0
	sectionImport = 2
	sectionGlobal = 6
	sectionExport = 7
)

// ErrNotWasm is returned for input that does not start with the WebAssembly
// magic number and version 1.
var ErrNotWasm = errors.New("not a WebAssembly module")

type section struct {
	id      byte
	name    string // custom sections only
	start   int    // offset of the section id byte
	end     int    // offset just past the section
	payload []byte // section content (for custom sections: after the name)
}

func parseSections(b []byte) ([]section, error) {
	if len(b) < len(wasmMagic) || !bytes.Equal(b[:len(wasmMagic)], wasmMagic) {
		return nil, ErrNotWasm
	}
	var out []section
	off := len(wasmMagic)
	for off < len(b) {
		start := off
		id := b[off]
		off++
		size, n, err := readU32(b, off)
		if err != nil {
			return nil, fmt.Errorf("section at offset %d: %w", start, err)
		}
		off += n
		if uint64(off)+uint64(size) > uint64(len(b)) {
			return nil, fmt.Errorf("section at offset %d: size %d overruns the module", start, size)
		}
		s := section{id: id, start: start, end: off + int(size), payload: b[off : off+int(size)]}
		if id == sectionCustom {
			name, rest, err := readName(s.payload)
			if err != nil {
				return nil, fmt.Errorf("custom section at offset %d: %w", start, err)
			}
			s.name, s.payload = name, rest
		}
		out = append(out, s)
		off = s.end
	}
	return out, nil
}

// CustomSection returns the content of the first custom section named name.
func CustomSection(module []byte, name string) (content []byte, found bool, err error) {
	sections, err := parseSections(module)
	if err != nil {
		return nil, false, err
	}
	for _, s := range sections {
		if s.id == sectionCustom && s.name == name {
			return s.payload, true, nil
		}
	}
	return nil, false, nil
}

// WithoutCustomSection returns a copy of module without the custom sections
// named name.
func WithoutCustomSection(module []byte, name string) ([]byte, error) {
	sections, err := parseSections(module)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(module))
	out = append(out, wasmMagic...)
	for _, s := range sections {
		if s.id != sectionCustom || s.name != name {
			out = append(out, module[s.start:s.end]...)
		}
	}
	return out, nil
}

// WithCustomSection returns a copy of module where every custom section named
// name is removed and one holding content is appended at the end.
func WithCustomSection(module []byte, name string, content []byte) ([]byte, error) {
	out, err := WithoutCustomSection(module, name)
	if err != nil {
		return nil, err
	}
	var body []byte
	body = appendName(body, name)
	body = append(body, content...)
	return appendSection(out, sectionCustom, body), nil
}

// globalInfo describes one global defined (not imported) by a module.
type globalInfo struct {
	index   uint32 // in the global index space (imports first)
	valType byte
	mutable bool
}

// Value types whose global value wazero exposes in full as a uint64.
const (
	valI32 = 0x7f
	valI64 = 0x7e
	valF32 = 0x7d
	valF64 = 0x7c
)

func scalarType(t byte) bool {
	return t == valI32 || t == valI64 || t == valF32 || t == valF64
}

// snapshotGlobalPrefix names the exports that exportMutableGlobals adds.
const snapshotGlobalPrefix = "__warden_global_"

// exportMutableGlobals returns a copy of module that also exports every
// mutable global it defines, under snapshotGlobalPrefix+index, and the names
// of those exports. ok is false when the module has a mutable global whose
// value cannot be read and written as a scalar (v128 or a reference), or
// imports a mutable global: such a module cannot be snapshotted.
func exportMutableGlobals(module []byte) (out []byte, names []string, ok bool, err error) {
	sections, err := parseSections(module)
	if err != nil {
		return nil, nil, false, err
	}
	var importedGlobals uint32
	var globals []globalInfo
	for _, s := range sections {
		switch s.id {
		case sectionImport:
			n, mutableImport, err := countGlobalImports(s.payload)
			if err != nil {
				return nil, nil, false, fmt.Errorf("import section: %w", err)
			}
			if mutableImport {
				return module, nil, false, nil
			}
			importedGlobals = n
		case sectionGlobal:
			globals, err = parseGlobals(s.payload)
			if err != nil {
				return nil, nil, false, fmt.Errorf("global section: %w", err)
			}
		}
	}
	var entries []byte
	var count uint32
	for i, g := range globals {
		if !g.mutable {
			continue
		}
		if !scalarType(g.valType) {
			return module, nil, false, nil
		}
		index := importedGlobals + uint32(i)
		name := snapshotGlobalPrefix + strconv.Itoa(int(index))
		names = append(names, name)
		entries = appendExportEntry(entries, name, exportKindGlobal, binary.AppendUvarint(nil, uint64(index)))
		count++
	}
	if count == 0 {
		return module, nil, true, nil
	}
	out, err = addExports(module, count, entries)
	if err != nil {
		return nil, nil, false, fmt.Errorf("export section: %w", err)
	}
	return out, names, true, nil
}

// Export kinds of the export section.
const (
	exportKindFunc   = 0x00
	exportKindGlobal = 0x03
)

// appendExportEntry appends one export entry: name, kind and the encoded
// index.
func appendExportEntry(b []byte, name string, kind byte, index []byte) []byte {
	b = appendName(b, name)
	b = append(b, kind)
	return append(b, index...)
}

// addExports returns a copy of module with count more export entries
// (encoded by appendExportEntry): appended to its export section, or in a new
// one where the order of sections wants it.
func addExports(module []byte, count uint32, entries []byte) ([]byte, error) {
	sections, err := parseSections(module)
	if err != nil {
		return nil, err
	}
	for _, s := range sections {
		if s.id != sectionExport {
			continue
		}
		n, k, err := readU32(s.payload, 0)
		if err != nil {
			return nil, err
		}
		body := binary.AppendUvarint(nil, uint64(n+count))
		body = append(append(body, s.payload[k:]...), entries...)
		out := make([]byte, 0, len(module)+len(entries)+8)
		out = append(out, module[:s.start]...)
		out = appendSection(out, sectionExport, body)
		return append(out, module[s.end:]...), nil
	}
	return insertSection(module, sectionExport, append(binary.AppendUvarint(nil, uint64(count)), entries...))
}

// appendSection appends a section with the given id and body.
func appendSection(b []byte, id byte, body []byte) []byte {
	b = append(b, id)
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...)
}

func countGlobalImports(p []byte) (count uint32, mutable bool, err error) {
	n, off, err := readU32(p, 0)
	if err != nil {
		return 0, false, err
	}
	for i := uint32(0); i < n; i++ {
		for j := 0; j < 2; j++ { // module and field names
			l, k, err := readU32(p, off)
			if err != nil {
				return 0, false, err
			}
			off += k + int(l)
		}
		if off >= len(p) {
			return 0, false, errTruncated
		}
		kind := p[off]
		off++
		switch kind {
		case 0x00: // func: type index
			_, k, err := readU32(p, off)
			if err != nil {
				return 0, false, err
			}
			off += k
		case 0x01: // table: reftype + limits
			if off, err = skipRefType(p, off); err != nil {
				return 0, false, err
			}
			if off, err = skipLimits(p, off); err != nil {
				return 0, false, err
			}
		case 0x02: // memory: limits
			if off, err = skipLimits(p, off); err != nil {
				return 0, false, err
			}
		case 0x03: // global: valtype + mut
			if off, err = skipRefType(p, off); err != nil {
				return 0, false, err
			}
			if off >= len(p) {
				return 0, false, errTruncated
			}
			if p[off] == 1 {
				mutable = true
			}
			off++
			count++
		case 0x04: // tag: attribute + type index
			off++
			_, k, err := readU32(p, off)
			if err != nil {
				return 0, false, err
			}
			off += k
		default:
			return 0, false, fmt.Errorf("unknown import kind 0x%x", kind)
		}
	}
	return count, mutable, nil
}

func parseGlobals(p []byte) ([]globalInfo, error) {
	n, off, err := readU32(p, 0)
	if err != nil {
		return nil, err
	}
	out := make([]globalInfo, 0, n)
	for i := uint32(0); i < n; i++ {
		if off >= len(p) {
			return nil, errTruncated
		}
		t := p[off]
		if off, err = skipRefType(p, off); err != nil {
			return nil, err
		}
		if off >= len(p) {
			return nil, errTruncated
		}
		g := globalInfo{index: i, valType: t, mutable: p[off] == 1}
		off++
		if off, err = skipConstExpr(p, off); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

var errTruncated = errors.New("truncated")

// skipRefType skips a value type, including the (ref null? ht) forms of the
// function-references proposal.
func skipRefType(p []byte, off int) (int, error) {
	if off >= len(p) {
		return 0, errTruncated
	}
	t := p[off]
	off++
	if t == 0x63 || t == 0x64 { // (ref null ht) / (ref ht)
		_, n, err := readS64(p, off)
		if err != nil {
			return 0, err
		}
		off += n
	}
	return off, nil
}

func skipLimits(p []byte, off int) (int, error) {
	if off >= len(p) {
		return 0, errTruncated
	}
	flags := p[off]
	off++
	_, n, err := readU64(p, off)
	if err != nil {
		return 0, err
	}
	off += n
	if flags&1 != 0 {
		_, n, err := readU64(p, off)
		if err != nil {
			return 0, err
		}
		off += n
	}
	return off, nil
}

// skipConstExpr skips a constant expression up to and including its end opcode.
func skipConstExpr(p []byte, off int) (int, error) {
	for {
		if off >= len(p) {
			return 0, errTruncated
		}
		op := p[off]
		off++
		var n int
		var err error
		switch op {
		case 0x0b: // end
			return off, nil
		case 0x41, 0x23, 0xd2: // i32.const, global.get, ref.func
			_, n, err = readS64(p, off)
		case 0x42: // i64.const
			_, n, err = readS64(p, off)
		case 0x43: // f32.const
			n = 4
		case 0x44: // f64.const
			n = 8
		case 0xd0: // ref.null heaptype
			_, n, err = readS64(p, off)
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended-const arithmetic
		case 0xfd: // v128.const: sub-opcode then 16 bytes
			_, n, err = readU32(p, off)
			n += 16
		default:
			return 0, fmt.Errorf("unsupported opcode 0x%x in constant expression", op)
		}
		if err != nil {
			return 0, err
		}
		off += n
	}
}

func readU32(p []byte, off int) (uint32, int, error) {
	v, n, err := readU64(p, off)
	if err != nil {
		return 0, 0, err
	}
	if v > 0xffffffff {
		return 0, 0, errors.New("integer overflows u32")
	}
	return uint32(v), n, nil
}

func readU64(p []byte, off int) (uint64, int, error) {
	if off > len(p) {
		return 0, 0, errTruncated
	}
	v, n := binary.Uvarint(p[off:])
	if n <= 0 {
		return 0, 0, errTruncated
	}
	return v, n, nil
}

func readS64(p []byte, off int) (int64, int, error) {
	var result int64
	var shift uint
	for i := 0; ; i++ {
		if off+i >= len(p) || i >= 10 {
			return 0, 0, errTruncated
		}
		b := p[off+i]
		result |= int64(b&0x7f) << shift
		shift += 7
		if b&0x80 == 0 {
			if shift < 64 && b&0x40 != 0 {
				result |= -1 << shift
			}
			return result, i + 1, nil
		}
	}
}

func readName(p []byte) (string, []byte, error) {
	l, n, err := readU32(p, 0)
	if err != nil {
		return "", nil, err
	}
	if uint64(n)+uint64(l) > uint64(len(p)) {
		return "", nil, errTruncated
	}
	return string(p[n : n+int(l)]), p[n+int(l):], nil
}

func appendName(b []byte, name string) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	return append(b, name...)
}

// Import kinds of the import section.
const importKindMemory = 0x02

// defineImportedMemory returns a copy of module where the memory it imports
// as module.name becomes a memory it defines: the import is removed and a
// memory section declares the same memory, with a minimum of at least
// minPages and a maximum of at most maxPages. The memory keeps index 0, so
// nothing else in the module changes. found is false when the module imports
// no such memory.
func defineImportedMemory(module []byte, modName, name string, minPages, maxPages uint32) (out []byte, found bool, err error) {
	sections, err := parseSections(module)
	if err != nil {
		return nil, false, err
	}
	for _, s := range sections {
		if s.id != sectionImport {
			continue
		}
		entries, err := importEntries(s.payload)
		if err != nil {
			return nil, false, fmt.Errorf("import section: %w", err)
		}
		for i, e := range entries {
			if e.kind != importKindMemory || e.module != modName || e.name != name {
				continue
			}
			for _, other := range sections {
				if other.id == sectionMemory {
					return nil, false, errors.New("the module both imports and defines a memory")
				}
			}
			limits := s.payload[e.desc:e.end]
			flags := limits[0]
			if flags&^1 != 0 {
				return nil, false, fmt.Errorf("memory %s.%s: shared or 64-bit memories are not supported", modName, name)
			}
			lo, k, err := readU32(limits, 1)
			if err != nil {
				return nil, false, fmt.Errorf("memory %s.%s: %w", modName, name, err)
			}
			hi := maxPages
			if flags&1 != 0 {
				v, _, err := readU32(limits, 1+k)
				if err != nil {
					return nil, false, fmt.Errorf("memory %s.%s: %w", modName, name, err)
				}
				hi = min(v, maxPages)
			}
			lo = max(lo, minPages)
			if lo > hi {
				return nil, false, fmt.Errorf("memory %s.%s needs %d pages, more than the limit of %d", modName, name, lo, hi)
			}
			imports := binary.AppendUvarint(nil, uint64(len(entries)-1))
			for j, other := range entries {
				if j != i {
					imports = append(imports, s.payload[other.start:other.end]...)
				}
			}
			mem := binary.AppendUvarint([]byte{1, 1}, uint64(lo)) // one memory, flags: has maximum
			mem = binary.AppendUvarint(mem, uint64(hi))
			out = make([]byte, 0, len(module)+len(mem)+8)
			out = append(out, module[:s.start]...)
			out = appendSection(out, sectionImport, imports)
			out = append(out, module[s.end:]...)
			out, err = insertSection(out, sectionMemory, mem)
			return out, err == nil, err
		}
	}
	return module, false, nil
}

// importEntry locates one entry of an import section in its payload.
type importEntry struct {
	module, name string
	kind         byte
	start, end   int // the whole entry
	desc         int // the import description, after the kind
}

func importEntries(p []byte) ([]importEntry, error) {
	n, off, err := readU32(p, 0)
	if err != nil {
		return nil, err
	}
	out := make([]importEntry, 0, n)
	for i := uint32(0); i < n; i++ {
		e := importEntry{start: off}
		var rest []byte
		if e.module, rest, err = readName(p[off:]); err != nil {
			return nil, err
		}
		if e.name, rest, err = readName(rest); err != nil {
			return nil, err
		}
		off = len(p) - len(rest)
		if off >= len(p) {
			return nil, errTruncated
		}
		e.kind = p[off]
		e.desc = off + 1
		if e.end, err = skipImportDesc(p, e.desc, e.kind); err != nil {
			return nil, err
		}
		off = e.end
		out = append(out, e)
	}
	return out, nil
}

// skipImportDesc skips the description of an import of the given kind.
func skipImportDesc(p []byte, off int, kind byte) (int, error) {
	var err error
	switch kind {
	case 0x00: // func: type index
		var k int
		_, k, err = readU32(p, off)
		off += k
	case 0x01: // table: reftype + limits
		if off, err = skipRefType(p, off); err == nil {
			off, err = skipLimits(p, off)
		}
	case importKindMemory:
		off, err = skipLimits(p, off)
	case 0x03: // global: valtype + mut
		if off, err = skipRefType(p, off); err == nil {
			off++
		}
	case 0x04: // tag: attribute + type index
		var k int
		_, k, err = readU32(p, off+1)
		off += 1 + k
	default:
		return 0, fmt.Errorf("unknown import kind 0x%x", kind)
	}
	if err == nil && off > len(p) {
		err = errTruncated
	}
	return off, err
}
