package wasm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// Interrupting guests.
//
// wazero can stop a guest when a context is done (WithCloseOnContextDone),
// but it does so by calling out to Go at every loop header, which makes loop
// heavy guest code about nine times slower. Warden instead rewrites each
// module the way wasmtime's epoch interruption compiles it: a new mutable i32
// global, the interrupt flag, is checked at the entry of every function and at
// the head of every loop:
//
//	global.get $interrupt
//	if
//	  unreachable
//	end
//
// That is a load and a branch. When a deadline passes, the host sets the flag
// and the guest traps at its next check. A start section is removed and its
// function exported instead, so that it too runs under a deadline.

// Section ids used here besides those in binary.go.
const (
	sectionType     = 1
	sectionFunction = 3
	sectionTable    = 4
	sectionMemory   = 5
	sectionStart    = 8
	sectionElement  = 9
	sectionCode     = 10
	sectionTag      = 13
)

// Exports added by instrument.
const (
	interruptExportPrefix = snapshotGlobalPrefix // the flag is exported with the other mutable globals
	startExport           = "__warden_start"
)

// instrumented is a module rewritten by instrument.
type instrumented struct {
	module    []byte
	interrupt string // export name of the interrupt flag
	start     bool   // the former start function is exported as startExport
}

// errUninstrumentable is returned for modules using instructions instrument
// does not know (the GC proposal's, for instance): Warden refuses to run a
// guest it could not stop.
var errUninstrumentable = errors.New("module uses instructions Warden cannot instrument")

// instrument adds the interrupt flag and its checks to module.
func instrument(module []byte) (*instrumented, error) {
	sections, err := parseSections(module)
	if err != nil {
		return nil, err
	}
	var importedGlobals uint32
	var globalsAt, codeAt, startAt = -1, -1, -1
	for i, s := range sections {
		switch s.id {
		case sectionImport:
			importedGlobals, _, err = countGlobalImports(s.payload)
			if err != nil {
				return nil, fmt.Errorf("import section: %w", err)
			}
		case sectionGlobal:
			globalsAt = i
		case sectionCode:
			codeAt = i
		case sectionStart:
			startAt = i
		}
	}
	// The flag goes last in the global index space so no index moves.
	var definedGlobals uint32
	var globalBody []byte
	if globalsAt >= 0 {
		p := sections[globalsAt].payload
		n, k, err := readU32(p, 0)
		if err != nil {
			return nil, fmt.Errorf("global section: %w", err)
		}
		definedGlobals, globalBody = n, p[k:]
	}
	flag := importedGlobals + definedGlobals
	newGlobals := binary.AppendUvarint(nil, uint64(definedGlobals+1))
	newGlobals = append(newGlobals, globalBody...)
	newGlobals = append(newGlobals, valI32, 1, 0x41, 0x00, 0x0b) // mutable i32 = 0

	check := []byte{0x23}
	check = binary.AppendUvarint(check, uint64(flag))
	check = append(check, 0x04, 0x40, 0x00, 0x0b) // if (empty) unreachable end

	var newCode []byte
	if codeAt >= 0 {
		newCode, err = instrumentCode(sections[codeAt].payload, check)
		if err != nil {
			return nil, err
		}
	}

	var startFunc []byte
	if startAt >= 0 {
		startFunc = sections[startAt].payload
	}

	out := make([]byte, 0, len(module)+len(module)/8+64)
	out = append(out, wasmMagic...)
	globalsWritten := false
	for i, s := range sections {
		switch {
		case i == globalsAt:
			out = appendSection(out, sectionGlobal, newGlobals)
			globalsWritten = true
			continue
		case i == codeAt:
			out = appendSection(out, sectionCode, newCode)
			continue
		case i == startAt:
			continue
		case !globalsWritten && globalsAt < 0 && s.id != sectionCustom && sectionOrder(s.id) > sectionOrder(sectionGlobal):
			out = appendSection(out, sectionGlobal, newGlobals)
			globalsWritten = true
		}
		out = append(out, module[s.start:s.end]...)
	}
	if !globalsWritten {
		out = appendSection(out, sectionGlobal, newGlobals)
	}
	if startFunc != nil { // the start function becomes an export
		out, err = addExports(out, 1, appendExportEntry(nil, startExport, exportKindFunc, startFunc))
		if err != nil {
			return nil, fmt.Errorf("export section: %w", err)
		}
	}
	return &instrumented{
		module:    out,
		interrupt: interruptExportPrefix + strconv.Itoa(int(flag)),
		start:     startAt >= 0,
	}, nil
}

// sectionOrder is the position of a known section in a module: the data
// count (12) and tag (13) sections do not follow their ids.
func sectionOrder(id byte) int {
	switch id {
	case sectionTag:
		return 55 // between memory (5) and global (6)
	case 12: // data count: between element (9) and code (10)
		return 95
	default:
		return int(id) * 10
	}
}

// insertSection inserts a section where the order of sections wants it.
func insertSection(module []byte, id byte, body []byte) ([]byte, error) {
	sections, err := parseSections(module)
	if err != nil {
		return nil, err
	}
	sec := appendSection(nil, id, body)
	out := append([]byte(nil), wasmMagic...)
	done := false
	for _, s := range sections {
		if !done && s.id != sectionCustom && sectionOrder(s.id) > sectionOrder(id) {
			out = append(out, sec...)
			done = true
		}
		out = append(out, module[s.start:s.end]...)
	}
	if !done {
		out = append(out, sec...)
	}
	return out, nil
}

// instrumentCode rewrites the code section: check at the entry of every
// function body and after every loop's block type.
func instrumentCode(p []byte, check []byte) ([]byte, error) {
	n, off, err := readU32(p, 0)
	if err != nil {
		return nil, fmt.Errorf("code section: %w", err)
	}
	out := make([]byte, 0, len(p)+len(p)/8)
	out = binary.AppendUvarint(out, uint64(n))
	var body []byte
	for i := uint32(0); i < n; i++ {
		size, k, err := readU32(p, off)
		if err != nil {
			return nil, fmt.Errorf("code section: function %d: %w", i, err)
		}
		off += k
		if uint64(off)+uint64(size) > uint64(len(p)) {
			return nil, fmt.Errorf("code section: function %d: %w", i, errTruncated)
		}
		body, err = instrumentBody(p[off:off+int(size)], check, body[:0])
		if err != nil {
			return nil, fmt.Errorf("code section: function %d: %w", i, err)
		}
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
		off += int(size)
	}
	return out, nil
}

func instrumentBody(b, check, out []byte) ([]byte, error) {
	// Locals: vec of (count, valtype).
	n, off, err := readU32(b, 0)
	if err != nil {
		return nil, err
	}
	for i := uint32(0); i < n; i++ {
		_, k, err := readU32(b, off)
		if err != nil {
			return nil, err
		}
		if off, err = skipRefType(b, off+k); err != nil {
			return nil, err
		}
	}
	out = append(out, b[:off]...)
	out = append(out, check...)
	for off < len(b) {
		op := b[off]
		next, err := instructionEnd(b, off)
		if err != nil {
			return nil, err
		}
		out = append(out, b[off:next]...)
		if op == 0x03 { // loop: check at every iteration
			out = append(out, check...)
		}
		off = next
	}
	return out, nil
}

// instructionEnd returns the offset just past the instruction at off.
func instructionEnd(b []byte, off int) (int, error) {
	op := b[off]
	i := off + 1
	var err error
	u32 := func() {
		if err == nil {
			var k int
			_, k, err = readU32(b, i)
			i += k
		}
	}
	s64 := func() {
		if err == nil {
			var k int
			_, k, err = readS64(b, i)
			i += k
		}
	}
	memarg := func() {
		if err != nil {
			return
		}
		var align uint32
		var k int
		align, k, err = readU32(b, i)
		i += k
		if align&0x40 != 0 { // multi-memory: memory index follows
			u32()
		}
		if err == nil {
			_, k, err = readU64(b, i)
			i += k
		}
	}
	switch {
	case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0a || op == 0x0b || op == 0x0f || op == 0x19 ||
		op == 0x1a || op == 0x1b || op == 0xd1 || op == 0xd3 || op == 0xd6 || (op >= 0x45 && op <= 0xc4):
		// no immediate
	case op == 0x02 || op == 0x03 || op == 0x04 || op == 0x06: // block, loop, if, try: block type
		i, err = skipBlockType(b, i)
	case op == 0x07 || op == 0x08 || op == 0x09 || op == 0x18 || op == 0x0c || op == 0x0d ||
		op == 0x10 || op == 0x12 || op == 0x14 || op == 0x15 || (op >= 0x20 && op <= 0x26) ||
		op == 0x3f || op == 0x40 || op == 0xd2 || op == 0xd4 || op == 0xd5:
		u32()
	case op == 0x0e: // br_table
		var count uint32
		var k int
		count, k, err = readU32(b, i)
		i += k
		for j := uint32(0); j <= count && err == nil; j++ {
			u32()
		}
	case op == 0x11 || op == 0x13: // call_indirect: type, table
		u32()
		u32()
	case op == 0x1c: // select t*
		var count uint32
		var k int
		count, k, err = readU32(b, i)
		i += k
		for j := uint32(0); j < count && err == nil; j++ {
			i, err = skipRefType(b, i)
		}
	case op == 0x1f: // try_table: block type, catch clauses
		if i, err = skipBlockType(b, i); err != nil {
			break
		}
		var count uint32
		var k int
		count, k, err = readU32(b, i)
		i += k
		for j := uint32(0); j < count && err == nil; j++ {
			if i >= len(b) {
				err = errTruncated
				break
			}
			kind := b[i]
			i++
			if kind <= 0x01 {
				u32() // tag
			}
			u32() // label
		}
	case op >= 0x28 && op <= 0x3e:
		memarg()
	case op == 0x41 || op == 0x42 || op == 0xd0:
		s64()
	case op == 0x43:
		i += 4
	case op == 0x44:
		i += 8
	case op == 0xfc:
		var sub uint32
		var k int
		sub, k, err = readU32(b, i)
		i += k
		switch {
		case sub <= 7:
		case sub == 8 || sub == 10 || sub == 12 || sub == 14:
			u32()
			u32()
		case sub == 9 || sub == 11 || sub == 13 || (sub >= 15 && sub <= 17):
			u32()
		default:
			return 0, fmt.Errorf("%w: 0xfc %d", errUninstrumentable, sub)
		}
	case op == 0xfd:
		var sub uint32
		var k int
		sub, k, err = readU32(b, i)
		i += k
		switch {
		case sub <= 11 || sub == 92 || sub == 93:
			memarg()
		case sub == 12 || sub == 13:
			i += 16
		case sub >= 21 && sub <= 34:
			i++
		case sub >= 84 && sub <= 91:
			memarg()
			i++
		case sub <= 0x113: // every other SIMD instruction has no immediate
		default:
			return 0, fmt.Errorf("%w: 0xfd %d", errUninstrumentable, sub)
		}
	case op == 0xfe:
		var sub uint32
		var k int
		sub, k, err = readU32(b, i)
		i += k
		if sub == 3 {
			i++ // atomic.fence
		} else if sub <= 0x4e {
			memarg()
		} else {
			return 0, fmt.Errorf("%w: 0xfe %d", errUninstrumentable, sub)
		}
	default:
		return 0, fmt.Errorf("%w: opcode 0x%x", errUninstrumentable, op)
	}
	if err != nil {
		return 0, err
	}
	if i > len(b) {
		return 0, errTruncated
	}
	return i, nil
}

// skipBlockType skips a block type: empty (0x40), a value type, or a type
// index (s33).
func skipBlockType(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errTruncated
	}
	switch t := b[i]; {
	case t == 0x40 || t == valI32 || t == valI64 || t == valF32 || t == valF64 || t == 0x7b || t == 0x70 || t == 0x6f:
		return i + 1, nil
	case t == 0x63 || t == 0x64:
		return skipRefType(b, i)
	default:
		_, k, err := readS64(b, i)
		return i + k, err
	}
}
