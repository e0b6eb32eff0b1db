package wasm

import (
	"bytes"
	"cmp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// Go modules built without write barriers.
//
// Kubewarden's cel-policy is built with -gcflags=all="-l -B -wb=false": the
// compiler emits no write barrier anywhere. Go's collector needs them. On
// wasm the runtime has one thread and one P, and a collection runs
// concurrently with the program: gcStart turns the mark phase on
// (gcphase = _GCmark, writeBarrier.enabled = true) and returns to the
// allocating goroutine, and the marking is then done in slices, by mark
// assists inside that goroutine's allocations and by the mark worker
// goroutines whenever it parks, until gcMarkDone. Between the slices the
// program runs. A compiled write barrier shades the pointer a store
// overwrites and the one it stores; without it, a pointer moved from an
// object the collector has not scanned yet into one it has (or into a
// goroutine stack, scanned once) is never seen, the object it points to
// stays white, and the sweep frees it while it is reachable. The next
// allocations reuse its memory: the program reads another object's words
// as its own, and fails with an out of bounds access, a nil dereference, or
// the runtime's own "marked free object in span" fatal error. With
// GODEBUG=gctrace=1, cel-policy's validate-settings on a list literal of 200
// strings prints "gc 1 ... 0.079+90+0.032 ms clock, 0.079+24/0/0+0.032 ms
// cpu": 90 ms of concurrent mark done entirely by assists (24 ms), the
// program running in between, then the out of bounds access.
//
// None of this depends on how instances are made. The module fails the same
// way in a fresh instance per evaluation (RunWASI; a new Wapc per call), on
// the compiler and the interpreter of wazero, and on V8 (node's WASI):
// whether a cycle overlaps an evaluation depends only on the heap, and a
// restored snapshot holds the heap a fresh instance has at the same point.
// cel-policy built as its Makefile does (Go 1.25.5, then wasm-opt -Oz)
// traps on that list in a fresh V8 instance too: Kubewarden, which starts a
// fresh instance per evaluation, runs the same collector over the same heap.
//
// The runtime has a mode where the program never runs during a mark phase:
// GODEBUG=gcstoptheworld=1 (gcForceMode in runtime/mgc.go). gcStart then
// disables the scheduling of user goroutines before it starts the world and
// yields; only the mark workers run until the mark is done, and
// gcMarkTermination turns write barriers off (gcphase = _GCoff) before it
// lets user goroutines run again. Sweeping stays concurrent and needs no
// barrier. Since a write barrier does nothing while gcphase is _GCoff, a
// program built without barriers then computes what the same program built
// with them computes. (-wb=false removes only the barriers the compiler
// emits; the runtime's explicit ones, as in typedmemmove, remain, and the
// runtime's own goroutines that run during the mark, the mark workers, keep
// their state off the heap or in uintptr fields.) Instances of a module whose Go build
// settings say it was built with -wb=false therefore get that variable in
// their environment (the guest's only environment variable: Kubewarden
// gives none); everything else, snapshots included, is as for any module.
// Modules built with write barriers are not touched.
//
// The build settings are those the go command records in the module
// (runtime.modinfo, what `go version -m` prints for other platforms): a
// string in a data segment between two 16-byte sentinels. The go command
// records the last -gcflags it was given; a -wb=false given in GOFLAGS and
// overridden by a later -gcflags on the command line goes unseen.

// goStopTheWorldEnv is the environment variable that makes Go's collector
// stop the program for its whole mark phase.
const goStopTheWorldEnv = "GODEBUG=gcstoptheworld=1"

// The sentinels around runtime.modinfo (cmd/go/internal/modload, infoStart
// and infoEnd).
var (
	goInfoStart = []byte("\x30\x77\xaf\x0c\x92\x74\x08\x02\x41\xe1\xc1\x07\xe6\xd6\x18\xe6")
	goInfoEnd   = []byte("\xf9\x32\x43\x31\x86\x18\x20\x72\x00\x82\x42\x10\x41\x16\xd8\xf2")
)

// maxGoInfo bounds the build information read from a module.
const maxGoInfo = 1 << 20

// goWithoutWriteBarriers reports whether module is a Go program whose build
// settings compile some package with -wb=false.
func goWithoutWriteBarriers(module []byte) bool {
	info, ok := goBuildInfo(module)
	if !ok {
		return false
	}
	bi, err := debug.ParseBuildInfo(info)
	if err != nil {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-gcflags" && gcflagsDisableWriteBarriers(s.Value) {
			return true
		}
	}
	return false
}

// gcflagsDisableWriteBarriers reports whether v, the value of a -gcflags
// ("[pattern=]flags"), turns write barriers off.
func gcflagsDisableWriteBarriers(v string) bool {
	v = strings.TrimSpace(v)
	if !strings.HasPrefix(v, "-") {
		_, v, _ = strings.Cut(v, "=")
	}
	for _, f := range strings.Fields(v) {
		f = strings.Trim(f, `"'`)
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(f, "-"), "-"), "=")
		if name != "wb" || !hasValue {
			continue
		}
		if on, err := strconv.ParseBool(value); err == nil && !on {
			return true
		}
	}
	return false
}

// goBuildInfo returns the Go build information recorded in module's data
// segments, if there is any.
func goBuildInfo(module []byte) (string, bool) {
	sections, err := parseSections(module)
	if err != nil {
		return "", false
	}
	for _, s := range sections {
		if s.id != sectionData {
			continue
		}
		segs, err := activeSegments(s.payload)
		if err != nil {
			return "", false
		}
		return findGoBuildInfo(segs)
	}
	return "", false
}

// dataSegment is an active data segment: bytes placed at a constant address.
type dataSegment struct {
	addr uint64
	data []byte
}

// Section id of the data section.
const sectionData = 11

// activeSegments returns the active data segments of a data section whose
// address is a constant, in address order. Passive segments and those placed
// by another expression are skipped.
func activeSegments(p []byte) ([]dataSegment, error) {
	n, off, err := readU32(p, 0)
	if err != nil {
		return nil, err
	}
	var out []dataSegment
	for i := uint32(0); i < n; i++ {
		flags, k, err := readU32(p, off)
		if err != nil {
			return nil, err
		}
		off += k
		addr, constant := uint64(0), false
		switch flags {
		case 0, 2:
			if flags == 2 {
				if _, k, err = readU32(p, off); err != nil { // memory index
					return nil, err
				}
				off += k
			}
			// (i32.const n) or (i64.const n), then end.
			if off < len(p) && (p[off] == 0x41 || p[off] == 0x42) {
				v, k, err := readS64(p, off+1)
				if err == nil && off+1+k < len(p) && p[off+1+k] == 0x0b {
					if p[off] == 0x41 {
						addr, constant = uint64(uint32(v)), true
					} else {
						addr, constant = uint64(v), v >= 0
					}
				}
			}
			if off, err = skipConstExpr(p, off); err != nil {
				return nil, err
			}
		case 1:
		default:
			return nil, errTruncated
		}
		size, k, err := readU32(p, off)
		if err != nil {
			return nil, err
		}
		off += k
		if uint64(off)+uint64(size) > uint64(len(p)) {
			return nil, errTruncated
		}
		if constant {
			out = append(out, dataSegment{addr: addr, data: p[off : off+int(size)]})
		}
		off += int(size)
	}
	slices.SortStableFunc(out, func(a, b dataSegment) int { return cmp.Compare(a.addr, b.addr) })
	return out, nil
}

// findGoBuildInfo looks for the build information between its sentinels in
// the memory the segments initialise. It may run on from one segment into
// the next ones (an optimiser such as wasm-opt splits segments at runs of
// zeros), reading the gaps between them as the zeros they are.
func findGoBuildInfo(segs []dataSegment) (string, bool) {
	for i, s := range segs {
		start := bytes.Index(s.data, goInfoStart)
		if start < 0 {
			continue
		}
		text := s.data[start+len(goInfoStart):]
		end := s.addr + uint64(len(s.data))
		copied := false // text is a copy, not the module's bytes
		for j := i + 1; ; j++ {
			if k := bytes.Index(text, goInfoEnd); k >= 0 {
				return string(text[:k]), true
			}
			if j == len(segs) || len(text) > maxGoInfo || segs[j].addr < end || segs[j].addr-end > maxGoInfo {
				return "", false
			}
			if !copied {
				text, copied = slices.Clone(text), true
			}
			text = append(text, make([]byte, segs[j].addr-end)...)
			text = append(text, segs[j].data...)
			end = segs[j].addr + uint64(len(segs[j].data))
		}
	}
	return "", false
}
