package wasm

import (
	"encoding/binary"
	"testing"
)

func TestGCFlagsDisableWriteBarriers(t *testing.T) {
	tests := []struct {
		gcflags string
		want    bool
	}{
		{"all=-l -B -wb=false", true}, // cel-policy's Makefile
		{"-wb=false", true},
		{"github.com/x/y/...=-N -wb=0", true},
		{"all=--wb=F", true},
		{`all="-wb=false"`, true},
		{"all=-B", false},
		{"all=-wb=true", false},
		{"all=-wb", false},
		{"all=-wb=maybe", false},
		{"all=-web=false", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.gcflags, func(t *testing.T) {
			if got := gcflagsDisableWriteBarriers(tt.gcflags); got != tt.want {
				t.Errorf("gcflagsDisableWriteBarriers(%q) = %v, want %v", tt.gcflags, got, tt.want)
			}
		})
	}
}

// segment is a data segment of a module made by dataModule: active at addr,
// or passive.
type segment struct {
	addr    uint32
	passive bool
	data    string
}

// dataModule returns a module whose only section is a data section holding
// segs.
func dataModule(segs ...segment) []byte {
	body := binary.AppendUvarint(nil, uint64(len(segs)))
	for _, s := range segs {
		if s.passive {
			body = append(body, 1)
		} else {
			body = append(body, 0, 0x41) // active, i32.const
			body = appendSLEB128(body, int32(s.addr))
			body = append(body, 0x0b)
		}
		body = binary.AppendUvarint(body, uint64(len(s.data)))
		body = append(body, s.data...)
	}
	return appendSection(append([]byte(nil), wasmMagic...), sectionData, body)
}

func TestGoWithoutWriteBarriersReadsDataSegments(t *testing.T) {
	const info = "path\tp\nmod\tp\t(devel)\t\nbuild\t-gcflags=\"all=-l -B -wb=false\"\nbuild\tGOOS=wasip1\n"
	start, end := string(goInfoStart), string(goInfoEnd)
	tests := []struct {
		name   string
		module []byte
		want   bool
	}{
		{"one segment", dataModule(segment{addr: 1024, data: "xx" + start + info + end + "yy"}), true},
		{"split at the zero byte of the end sentinel", dataModule(
			segment{addr: 1024 + uint32(len(start+info)) + 9, data: end[9:]}, // out of order
			segment{addr: 1024, data: start + info + end[:8]},
			segment{addr: 1 << 20, data: "unrelated"},
		), true},
		{"split, contiguous", dataModule(
			segment{addr: 1024 + uint32(len(start)) + 20, data: info[20:] + end},
			segment{addr: 1024, data: start + info[:20]},
		), true},
		{"overlapping segments", dataModule(
			segment{addr: 1024, data: start + info[:20]},
			segment{addr: 1030, data: info[20:] + end},
		), false},
		{"no end", dataModule(segment{addr: 1024, data: start + info}), false},
		{"passive segment", dataModule(segment{passive: true, data: start + info + end}), false},
		{"write barriers on", dataModule(segment{addr: 8, data: start + "path\tp\nbuild\t-gcflags=all=-B\n" + end}), false},
		{"not a module", []byte("\x00asm"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := goWithoutWriteBarriers(tt.module); got != tt.want {
				t.Errorf("goWithoutWriteBarriers = %v, want %v", got, tt.want)
			}
		})
	}
}

// FuzzGoWithoutWriteBarriers feeds arbitrary modules to the data segment
// reader: it must not panic.
func FuzzGoWithoutWriteBarriers(f *testing.F) {
	start, end := string(goInfoStart), string(goInfoEnd)
	f.Add(dataModule(segment{addr: 1024, data: start + "build\t-gcflags=-wb=false\n" + end}))
	f.Add(dataModule(segment{addr: 16, data: start + "build\t-gcflags"}, segment{addr: 40, data: "=-wb=0\n" + end}))
	f.Add(dataModule(segment{passive: true, data: start}))
	f.Fuzz(func(t *testing.T, module []byte) {
		goWithoutWriteBarriers(module)
	})
}
