package wasm

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
)

// assemble builds a module from (section id, body) pairs.
func assemble(sections ...[]byte) []byte {
	out := append([]byte(nil), wasmMagic...)
	for _, s := range sections {
		out = append(out, s[0])
		out = binary.AppendUvarint(out, uint64(len(s)-1))
		out = append(out, s[1:]...)
	}
	return out
}

// loopingStart is a waPC-shaped module whose start function never returns:
// it would hang instantiation without the interrupt flag.
func loopingStart(startBody []byte) []byte {
	code := []byte{sectionCode, 2}
	code = append(code, byte(len(startBody)))
	code = append(code, startBody...)
	code = append(code, 4, 0x00, 0x41, 0x01, 0x0b) // __guest_call: i32.const 1
	return assemble(
		[]byte{sectionType, 2, 0x60, 0, 0, 0x60, 2, 0x7f, 0x7f, 1, 0x7f},
		[]byte{sectionFunction, 2, 0, 1},
		[]byte{sectionMemory, 1, 0x00, 0x01},
		append(append([]byte{sectionExport, 2, 12}, "__guest_call"...), append([]byte{0x00, 1, 6}, append([]byte("memory"), 0x02, 0)...)...),
		[]byte{sectionStart, 0},
		code,
	)
}

func TestInterruptStopsWhatWouldRunForever(t *testing.T) {
	tests := []struct {
		name string
		body []byte
	}{
		{"loop in a start section", []byte{0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b}},                      // loop br 0 end
		{"loop with a br_table", []byte{0x00, 0x03, 0x40, 0x41, 0x00, 0x0e, 0x01, 0x00, 0x00, 0x0b, 0x0b}}, // loop (br_table 0 0) end
	}
	rt, err := NewRuntime(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := rt.Compile(context.Background(), loopingStart(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if !m.start {
				t.Fatal("the start section was not turned into an export")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err = rt.NewWapc(ctx, m, 1)
			if !errors.Is(err, ErrDeadlineExceeded) {
				t.Fatalf("error = %v, want ErrDeadlineExceeded", err)
			}
		})
	}
}

func TestInstrumentRefusesUnknownInstructions(t *testing.T) {
	module := loopingStart([]byte{0x00, 0xfb, 0x00, 0x0b}) // a GC-proposal opcode
	_, err := instrument(module)
	if !errors.Is(err, errUninstrumentable) || !strings.Contains(err.Error(), "opcode 0xfb") {
		t.Fatalf("error = %v", err)
	}
}

// FuzzInstrument checks that instrumenting never panics, and that what it
// accepts still parses as a module.
func FuzzInstrument(f *testing.F) {
	f.Add(loopingStart([]byte{0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b}))
	f.Add(loopingStart([]byte{0x00, 0xfd, 0x0c, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0x1a, 0x0b}))
	f.Fuzz(func(t *testing.T, module []byte) {
		out, err := instrument(module)
		if err != nil {
			return
		}
		if _, err := parseSections(out.module); err != nil {
			t.Fatalf("instrumented module does not parse: %v", err)
		}
	})
}
