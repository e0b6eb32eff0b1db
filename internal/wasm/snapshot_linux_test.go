package wasm

import (
	"bytes"
	"testing"
)

// TestSnapshotResetKeepsFewPrivatePages checks the bookkeeping that keeps
// resets cheap: a new memory mapped from a snapshot is mapped afresh after
// instantiation wrote over it, a reset copies back what a call wrote, and a
// call that wrote far more than usual makes the next reset map the snapshot
// afresh rather than leave those pages to every later reset.
func TestSnapshotResetKeepsFewPrivatePages(t *testing.T) {
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
	private := func() int {
		t.Helper()
		n, err := m.readPageMap()
		if err != nil {
			t.Skipf("no page map here: %v", err)
		}
		return n
	}
	write := func(pages int) {
		for p := range pages {
			m.region[p*osPageSize+7] = 0xff
		}
	}
	check := func(step string, wantPrivate int) {
		t.Helper()
		if !bytes.Equal(m.region[:size], want) {
			t.Fatalf("%s: the memory differs from the snapshot", step)
		}
		if got := private(); got != wantPrivate {
			t.Fatalf("%s: %d private pages, want %d", step, got, wantPrivate)
		}
	}

	write(40) // what instantiation's data segments would write
	if err := m.remap(); err != nil {
		t.Fatal(err)
	}
	check("after start", 0)

	write(4)
	if err := m.reset(); err != nil {
		t.Fatal(err)
	}
	check("after a call", 4)

	write(3)
	if err := m.reset(); err != nil {
		t.Fatal(err)
	}
	check("after a smaller call", 4)

	write(50) // a large request
	if err := m.reset(); err != nil {
		t.Fatal(err)
	}
	check("after a call that wrote far more than usual", 0)
}
