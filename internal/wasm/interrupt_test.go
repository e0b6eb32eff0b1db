package wasm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
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

// TestInterruptDuringGarbageCollection checks that a looping guest lets Go
// stop the world: compiled guest code cannot be preempted, so without the
// loop budget's visits to Go a collection would wait for the guest, and the
// timer that is to interrupt the guest would wait for the collection. The
// check runs in a child process, because the failure is a hang that
// nothing inside the process could report.
func TestInterruptDuringGarbageCollection(t *testing.T) {
	if os.Getenv("WARDEN_GC_CHILD") == "1" {
		gcWhileLooping(t)
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestInterruptDuringGarbageCollection$", "-test.count=1")
	cmd.Env = append(os.Environ(), "WARDEN_GC_CHILD=1", "GOMAXPROCS=2")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("a looping guest and a garbage collection hung the process:\n%s", out)
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func gcWhileLooping(t *testing.T) {
	rt, err := NewRuntime(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	m, err := rt.Compile(context.Background(), loopingStart([]byte{0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b}))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() { // keep the collector busy while the guests loop
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				runtime.GC()
			}
		}
	}()
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := rt.NewWapc(ctx, m, 1)
		cancel()
		if !errors.Is(err, ErrDeadlineExceeded) {
			t.Fatalf("error = %v, want ErrDeadlineExceeded", err)
		}
	}
}

func TestAppendSLEB128(t *testing.T) {
	tests := []struct {
		v    int32
		want []byte
	}{
		{0, []byte{0x00}}, {63, []byte{0x3f}}, {64, []byte{0xc0, 0x00}}, {-1, []byte{0x7f}},
		{-64, []byte{0x40}}, {-65, []byte{0xbf, 0x7f}}, {loopBudget, []byte{0x80, 0x20}},
	}
	for _, tt := range tests {
		if got := appendSLEB128(nil, tt.v); string(got) != string(tt.want) {
			t.Errorf("appendSLEB128(%d) = %x, want %x", tt.v, got, tt.want)
		}
	}
}

func TestInstrumentRefusesUnknownInstructions(t *testing.T) {
	module := loopingStart([]byte{0x00, 0xfb, 0x00, 0x0b}) // a GC-proposal opcode
	_, err := instrument(module)
	if !errors.Is(err, errUninstrumentable) || !strings.Contains(err.Error(), "opcode 0xfb") {
		t.Fatalf("error = %v", err)
	}
}

func TestInstrumentKeepsOnlyTheNameSection(t *testing.T) {
	custom := func(name string, size int) []byte {
		return append(append([]byte{sectionCustom}, appendName(nil, name)...), make([]byte, size)...)
	}
	customs := assemble(custom("padding", 1<<20), custom("name", 16), custom(".debug_info", 4096))
	module := append(loopingStart([]byte{0x00, 0x0b}), customs[len(wasmMagic):]...)

	out, err := instrument(module)
	if err != nil {
		t.Fatal(err)
	}
	sections, err := parseSections(out.module)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range sections {
		if s.id == sectionCustom {
			names = append(names, s.name)
		}
	}
	if !slices.Equal(names, []string{"name"}) {
		t.Errorf("custom sections after instrument = %q, want only the name section", names)
	}
	if len(out.module) >= 4096 || cap(out.module) >= 4096 {
		t.Errorf("instrumented module: %d bytes in a buffer of %d, want both under 4096 once the 1 MiB section is left out", len(out.module), cap(out.module))
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

// TestAbandonedHostCallIsTheDeadline: a host call abandoned at the
// deadline may end the guest call before the guard's function has run and
// set the flag (it runs on a goroutine of its own, started late on a
// loaded machine); the answer is still the deadline's.
func TestAbandonedHostCallIsTheDeadline(t *testing.T) {
	ctx, cancel := context.WithDeadline(context.Background(), time.Now())
	defer cancel()
	<-ctx.Done()
	recovered := fmt.Errorf("%w (recovered by wazero)\nwasm stack trace:\n\t...", errHostCallAbandoned) // as wazero wraps a host panic
	if err := callError(ctx, recovered, "", false); !errors.Is(err, ErrDeadlineExceeded) {
		t.Errorf("callError = %v, want ErrDeadlineExceeded", err)
	}
}
