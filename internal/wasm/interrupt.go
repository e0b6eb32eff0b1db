package wasm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
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
//
// Loop heads count down a second global, the budget, instead, and check the
// flag only when it reaches zero, every loopBudget iterations:
//
//	global.get $budget  i32.const 1  i32.sub  global.set $budget
//	global.get $budget  i32.eqz
//	if
//	  global.get $interrupt  if  unreachable  end
//	  i32.const loopBudget  global.set $budget
//	  call $__warden_yield
//	end
//
// The call is there for Go's scheduler: compiled guest code cannot be
// preempted, and a stop-the-world (a garbage collection) waits for every
// running goroutine, so a guest looping in machine code would hold the whole
// process, including the timer that is to interrupt it. __warden_yield is an
// empty function added to the module and exported; the runtime compiles it
// with a function listener (see yieldListeners), so calling it returns to
// Go, where a pending stop-the-world preempts the goroutine. A deadline sets
// the budget to 1 as well as the flag, so that the next loop head checks it.

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
	yieldExport           = "__warden_yield"
)

// loopBudget is how many loop iterations run between two checks of the
// interrupt flag (and two returns to Go).
const loopBudget = 4096

// instrumented is a module rewritten by instrument.
type instrumented struct {
	module    []byte
	interrupt string // export name of the interrupt flag
	budget    string // export name of the loop budget
	start     bool   // the former start function is exported as startExport
}

// errUninstrumentable is returned for modules using instructions instrument
// does not know (the GC proposal's, for instance): Warden refuses to run a
// guest it could not stop.
var errUninstrumentable = errors.New("module uses instructions Warden cannot instrument")

// instrument adds the interrupt flag and its checks to module, and leaves
// out the custom sections the runtime has no use for (droppedCustomSection).
func instrument(module []byte) (*instrumented, error) {
	sections, err := parseSections(module)
	if err != nil {
		return nil, err
	}
	var importedGlobals, importedFuncs uint32
	var typesAt, funcsAt, globalsAt, codeAt, startAt = -1, -1, -1, -1, -1
	for i, s := range sections {
		switch s.id {
		case sectionImport:
			importedGlobals, _, err = countGlobalImports(s.payload)
			if err != nil {
				return nil, fmt.Errorf("import section: %w", err)
			}
			imports, err := importEntries(s.payload)
			if err != nil {
				return nil, fmt.Errorf("import section: %w", err)
			}
			for _, e := range imports {
				if e.kind == 0x00 {
					importedFuncs++
				}
			}
		case sectionType:
			typesAt = i
		case sectionFunction:
			funcsAt = i
		case sectionGlobal:
			globalsAt = i
		case sectionCode:
			codeAt = i
		case sectionStart:
			startAt = i
		}
	}
	// The flag and the budget go last in the global index space so no index
	// moves.
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
	budget := flag + 1
	newGlobals := binary.AppendUvarint(nil, uint64(definedGlobals+2))
	newGlobals = append(newGlobals, globalBody...)
	newGlobals = append(newGlobals, valI32, 1, 0x41, 0x00, 0x0b) // flag: mutable i32 = 0
	newGlobals = append(newGlobals, valI32, 1, 0x41)             // budget: mutable i32 = loopBudget
	newGlobals = appendSLEB128(newGlobals, loopBudget)
	newGlobals = append(newGlobals, 0x0b)

	check := []byte{0x23}
	check = binary.AppendUvarint(check, uint64(flag))
	check = append(check, 0x04, 0x40, 0x00, 0x0b) // if (empty) unreachable end

	getBudget := binary.AppendUvarint([]byte{0x23}, uint64(budget))
	setBudget := binary.AppendUvarint([]byte{0x24}, uint64(budget))
	loopCheck := append([]byte(nil), getBudget...)
	loopCheck = append(loopCheck, 0x41, 0x01, 0x6b) // i32.const 1 i32.sub
	loopCheck = append(loopCheck, setBudget...)
	loopCheck = append(loopCheck, getBudget...)
	loopCheck = append(loopCheck, 0x45, 0x04, 0x40) // i32.eqz if (empty)
	loopCheck = append(loopCheck, check...)
	loopCheck = appendSLEB128(append(loopCheck, 0x41), loopBudget) // i32.const loopBudget
	loopCheck = append(loopCheck, setBudget...)

	// __warden_yield: a new type () -> () and a new function, both last in
	// their index spaces.
	var newTypes, newFuncs, newCode, yieldIndex []byte
	if codeAt >= 0 {
		if typesAt < 0 || funcsAt < 0 {
			return nil, errors.New("a module with code needs type and function sections")
		}
		var yieldType, definedFuncs uint32
		if newTypes, yieldType, err = appendVecEntry(sections[typesAt].payload, []byte{0x60, 0, 0}); err != nil {
			return nil, fmt.Errorf("type section: %w", err)
		}
		if definedFuncs, _, err = readU32(sections[funcsAt].payload, 0); err != nil {
			return nil, fmt.Errorf("function section: %w", err)
		}
		if newFuncs, _, err = appendVecEntry(sections[funcsAt].payload, binary.AppendUvarint(nil, uint64(yieldType))); err != nil {
			return nil, fmt.Errorf("function section: %w", err)
		}
		yieldIndex = binary.AppendUvarint(nil, uint64(importedFuncs+definedFuncs))
		loopCheck = append(append(loopCheck, 0x10), yieldIndex...) // call $__warden_yield
		loopCheck = append(loopCheck, 0x0b)                        // end
		if newCode, err = instrumentCode(sections[codeAt].payload, check, loopCheck); err != nil {
			return nil, err
		}
		if newCode, _, err = appendVecEntry(newCode, []byte{2, 0x00, 0x0b}); err != nil { // size, no locals, end
			return nil, fmt.Errorf("code section: %w", err)
		}
	}

	var startFunc []byte
	if startAt >= 0 {
		startFunc = sections[startAt].payload
	}

	kept := 0
	for _, s := range sections {
		if !droppedCustomSection(s) {
			kept += s.end - s.start
		}
	}
	out := make([]byte, 0, kept+kept/8+64)
	out = append(out, wasmMagic...)
	globalsWritten := false
	for i, s := range sections {
		switch {
		case droppedCustomSection(s):
			continue
		case i == globalsAt:
			out = appendSection(out, sectionGlobal, newGlobals)
			globalsWritten = true
			continue
		case i == codeAt:
			out = appendSection(out, sectionCode, newCode)
			continue
		case i == typesAt && newTypes != nil:
			out = appendSection(out, sectionType, newTypes)
			continue
		case i == funcsAt && newFuncs != nil:
			out = appendSection(out, sectionFunction, newFuncs)
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
	var exports []byte
	var exportCount uint32
	if startFunc != nil { // the start function becomes an export
		exports = appendExportEntry(exports, startExport, exportKindFunc, startFunc)
		exportCount++
	}
	if yieldIndex != nil {
		exports = appendExportEntry(exports, yieldExport, exportKindFunc, yieldIndex)
		exportCount++
	}
	if exportCount > 0 {
		if out, err = addExports(out, exportCount, exports); err != nil {
			return nil, fmt.Errorf("export section: %w", err)
		}
	}
	return &instrumented{
		module:    out,
		interrupt: interruptExportPrefix + strconv.Itoa(int(flag)),
		budget:    interruptExportPrefix + strconv.Itoa(int(budget)),
		start:     startAt >= 0,
	}, nil
}

// droppedCustomSection reports whether instrument leaves s out of the
// module it compiles: every custom section but "name", which gives the
// functions of a trap's stack trace their names. The others (DWARF, the
// producers, the policy's metadata, a padding of any size) mean nothing to
// the runtime, and each copy of the module made on the way to the compiler,
// and the compiler's own hashing of it, would otherwise carry them: a
// 250 MB custom section took the heap of a load past 2 GB.
func droppedCustomSection(s section) bool {
	return s.id == sectionCustom && s.name != "name"
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

// appendSLEB128 appends v in the signed LEB128 encoding of wasm's
// i32.const (not Go's zigzag varint).
func appendSLEB128(b []byte, v int32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// appendVecEntry appends an entry to a section made of one vector, returning
// the new payload and the index of the entry.
func appendVecEntry(p, entry []byte) ([]byte, uint32, error) {
	n, k, err := readU32(p, 0)
	if err != nil {
		return nil, 0, err
	}
	out := binary.AppendUvarint(make([]byte, 0, len(p)+len(entry)+5), uint64(n+1))
	out = append(out, p[k:]...)
	return append(out, entry...), n, nil
}

// instrumentCode rewrites the code section: check at the entry of every
// function body and loopCheck after every loop's block type.
func instrumentCode(p []byte, check, loopCheck []byte) ([]byte, error) {
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
		body, err = instrumentBody(p[off:off+int(size)], check, loopCheck, body[:0])
		if err != nil {
			return nil, fmt.Errorf("code section: function %d: %w", i, err)
		}
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
		off += int(size)
	}
	return out, nil
}

func instrumentBody(b, check, loopCheck, out []byte) ([]byte, error) {
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
		if op == 0x03 { // loop: count every iteration
			out = append(out, loopCheck...)
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

// yieldListeners gives __warden_yield its body: a return to Go code, where a
// stop-the-world waiting for this goroutine preempts it, and where the
// scheduler may take the call's slot for another (sched.go). No
// runtime.Gosched: it cost a Go guest 2 µs per call of the labels policy,
// and TestInterruptDuringGarbageCollection passes without it (and hangs
// without the listener). Every other function is compiled without a
// listener.
type yieldListeners struct{}

func (yieldListeners) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	if slices.Contains(def.ExportNames(), yieldExport) {
		return yieldListener{}
	}
	return nil
}

type yieldListener struct{}

func (yieldListener) Before(ctx context.Context, _ api.Module, _ api.FunctionDefinition, _ []uint64, _ experimental.StackIterator) {
	sl, callCtx := slotOf(ctx)
	sl.yield(callCtx)
}

func (yieldListener) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {}

func (yieldListener) Abort(context.Context, api.Module, api.FunctionDefinition, error) {}
