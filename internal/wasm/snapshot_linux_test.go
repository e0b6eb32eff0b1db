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
			defer pagemapScan.Store(pagemapScan.Load())
			pagemapScan.Store(scan)
			testSnapshotReset(t)
			if scan && !pagemapScan.Load() {
				t.Skip("the kernel has no PAGEMAP_SCAN (Linux 6.7)")
			}
		})
	}
}

func testSnapshotReset(t *testing.T) {
	const size = 64 * osPageSize
	origin, err := newLinearMemory(size, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer origin.Free()
	for i := range size {
		origin.region[i] = byte(i / osPageSize)
	}
	snap, err := takeSnapshot(origin, size)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.release()

	m, err := newLinearMemory(size, snap)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	want := append([]byte(nil), origin.region[:size]...)
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
	origin, err := newLinearMemory(size, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer origin.Free()
	snap, err := takeSnapshot(origin, size)
	if err != nil {
		b.Fatal(err)
	}
	defer snap.release()
	for _, scan := range []bool{true, false} {
		name := map[bool]string{true: "PAGEMAP_SCAN", false: "pagemap read"}[scan]
		b.Run(name, func(b *testing.B) {
			defer pagemapScan.Store(pagemapScan.Load())
			pagemapScan.Store(scan)
			m, err := newLinearMemory(size, snap)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Free()
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
			if scan && !pagemapScan.Load() {
				b.Skip("the kernel has no PAGEMAP_SCAN (Linux 6.7)")
			}
		})
	}
}
