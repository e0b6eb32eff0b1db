package wasm

import (
	"bytes"
	"slices"
	"testing"
)

// TestSnapshotResetKeepsFewPrivatePages checks the bookkeeping that keeps
// resets cheap, with each way of reading the page map: a new memory mapped
// from a snapshot is mapped afresh after instantiation wrote over it, a reset
// copies back what a call wrote, and a call that wrote far more than usual
// makes the next reset map the snapshot afresh rather than leave those pages
// to every later reset.
func TestSnapshotResetKeepsFewPrivatePages(t *testing.T) {
	if pagemap() == nil {
		t.Skip("/proc/self/pagemap cannot be read here")
	}
	for _, scan := range []bool{true, false} {
		name := map[bool]string{true: "PAGEMAP_SCAN", false: "pagemap read"}[scan]
		t.Run(name, func(t *testing.T) {
			defer noPagemapScan.Store(noPagemapScan.Load())
			noPagemapScan.Store(!scan)
			testSnapshotReset(t)
			if scan && noPagemapScan.Load() {
				t.Skip("the kernel has no PAGEMAP_SCAN (Linux 6.7)")
			}
		})
	}
}

// newTestSnapshot returns a snapshot of size bytes whose page p holds byte(p),
// and its bytes; tb's cleanup releases it.
func newTestSnapshot(tb testing.TB, size int) (*memSnapshot, []byte) {
	tb.Helper()
	origin, err := newLinearMemory(uint64(size), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(origin.Free)
	for i := range size {
		origin.region[i] = byte(i / osPageSize)
	}
	snap, err := takeSnapshot(origin, size)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(snap.release)
	return snap, append([]byte(nil), origin.region[:size]...)
}

// newTestMemory returns a memory mapped from snap; tb's cleanup frees it.
func newTestMemory(tb testing.TB, snap *memSnapshot) *linearMemory {
	tb.Helper()
	m, err := newLinearMemory(uint64(snap.size), snap)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(m.Free)
	return m
}

func testSnapshotReset(t *testing.T) {
	const size = 64 * osPageSize
	snap, want := newTestSnapshot(t, size)
	m := newTestMemory(t, snap)
	write := func(pages ...int) {
		for _, p := range pages {
			m.region[p*osPageSize+7] = 0xff
		}
	}
	check := func(step string, wantPrivate []pageRange) {
		t.Helper()
		if !bytes.Equal(m.region[:size], want) {
			t.Fatalf("%s: the memory differs from the snapshot", step)
		}
		got, err := m.privateRanges()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, wantPrivate) {
			t.Fatalf("%s: private pages %v, want %v", step, got, wantPrivate)
		}
	}
	pages := func(from, to int) pageRange { return pageRange{from * osPageSize, to * osPageSize} }

	for p := range 40 { // what instantiation's data segments would write
		write(p)
	}
	if err := m.remap(); err != nil {
		t.Fatal(err)
	}
	check("after start", nil)

	write(1, 2, 3, 9)
	if err := m.reset(); err != nil {
		t.Fatal(err)
	}
	check("after a call", []pageRange{pages(1, 4), pages(9, 10)})

	write(2, 3)
	if err := m.reset(); err != nil {
		t.Fatal(err)
	}
	check("after a smaller call", []pageRange{pages(1, 4), pages(9, 10)})

	for p := range 50 { // a large request
		write(p)
	}
	if err := m.reset(); err != nil {
		t.Fatal(err)
	}
	check("after a call that wrote far more than usual", nil)
}

// BenchmarkSnapshotReset is the reset of a memory of 592 pages (the labels
// policy's), all of them mapped, after a call that wrote 19 of them, as
// that policy's calls do, with each way of reading the page map.
func BenchmarkSnapshotReset(b *testing.B) {
	const size, written = 592 * osPageSize, 19
	snap, _ := newTestSnapshot(b, size)
	for _, scan := range []bool{true, false} {
		name := map[bool]string{true: "PAGEMAP_SCAN", false: "pagemap read"}[scan]
		b.Run(name, func(b *testing.B) {
			defer noPagemapScan.Store(noPagemapScan.Load())
			noPagemapScan.Store(!scan)
			m := newTestMemory(b, snap)
			var sum byte
			for p := range size / osPageSize { // a guest reads its memory
				sum += m.region[p*osPageSize]
			}
			for b.Loop() {
				for p := range written {
					m.region[p*31*osPageSize] = 1
				}
				if err := m.reset(); err != nil {
					b.Fatal(err)
				}
			}
			if scan && noPagemapScan.Load() {
				b.Skip("the kernel has no PAGEMAP_SCAN (Linux 6.7)")
			}
		})
	}
}
