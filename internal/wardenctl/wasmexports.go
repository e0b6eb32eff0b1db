package wardenctl

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// This file reads the export names of a WebAssembly module, which is all
// wardenctl needs to tell a Rego module (OPA's ABI exports opa_*) from a
// waPC or WASI one before choosing how to run it.

var wasmHeader = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

const sectionExport = 7

// exportNames returns the names of the module's exports.
func exportNames(module []byte) ([]string, error) {
	if !bytes.HasPrefix(module, wasmHeader) {
		return nil, errors.New("not a WebAssembly module")
	}
	off := len(wasmHeader)
	for off < len(module) {
		id := module[off]
		size, n, err := readU32(module, off+1)
		if err != nil {
			return nil, err
		}
		start := off + 1 + n
		end := start + int(size)
		if end > len(module) || end < start {
			return nil, fmt.Errorf("section %d at offset %d overruns the module", id, off)
		}
		if id == sectionExport {
			return parseExports(module[start:end])
		}
		off = end
	}
	return nil, nil
}

func parseExports(p []byte) ([]string, error) {
	count, off, err := readU32(p, 0)
	if err != nil {
		return nil, err
	}
	var names []string
	for i := uint32(0); i < count; i++ {
		l, n, err := readU32(p, off)
		if err != nil {
			return nil, err
		}
		off += n
		if off+int(l) > len(p) {
			return nil, errors.New("export name overruns the export section")
		}
		names = append(names, string(p[off:off+int(l)]))
		off += int(l) + 1 // the name, then the export kind
		if _, n, err = readU32(p, off); err != nil {
			return nil, err
		}
		off += n
	}
	return names, nil
}

// readU32 decodes an unsigned LEB128 32-bit integer at off and returns it and
// its length.
func readU32(b []byte, off int) (uint32, int, error) {
	var v uint32
	for i := 0; i < 5; i++ {
		if off+i >= len(b) {
			return 0, 0, errors.New("truncated module")
		}
		c := b[off+i]
		v |= uint32(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errors.New("invalid LEB128 integer")
}

// isRego reports whether the module was built by OPA (`opa build -t wasm`):
// Kubewarden tells Rego modules apart by their opa_ exports.
func isRego(module []byte) (bool, error) {
	names, err := exportNames(module)
	if err != nil {
		return false, err
	}
	for _, n := range names {
		if strings.HasPrefix(n, "opa_") {
			return true, nil
		}
	}
	return false, nil
}
