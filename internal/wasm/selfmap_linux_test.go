//go:build linux

package wasm

import (
	"bufio"
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestFileMappingsOf(t *testing.T) {
	const smaps = `00400000-02cf6000 r-xp 00000000 fe:00 10010915                           /srv/policy-server
Size:              41944 kB
Rss:               25056 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me sd
02cf6000-0617b000 r--p 028f6000 fe:00 10010915                           /srv/policy-server
Size:              53780 kB
Anonymous:             0 kB
VmFlags: rd mr mw me sd
0617b000-06200000 r--p 05d7b000 fe:00 10010915                           /srv/policy-server
Size:                532 kB
Anonymous:             8 kB
VmFlags: rd mr mw me sd
06200000-06284000 rw-p 05e00000 fe:00 10010915                           /srv/policy-server
Anonymous:           376 kB
7f0000000000-7f0000100000 r-xp 00000000 fe:00 20                         /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7f0000200000-7f0000300000 r-xp 00000000 fe:00 21                         /srv/policy-server (deleted)
Anonymous:             0 kB
7f0000400000-7f0000500000 r-xp 00000000 00:00 0 
Anonymous:           1024 kB
`
	got := fileMappingsOf([]byte(smaps), "/srv/policy-server")
	want := []codeRegion{{0x400000, 0x2cf6000}, {0x2cf6000, 0x617b000}}
	if !slices.Equal(got, want) {
		t.Fatalf("fileMappingsOf = %x, want %x (not the relocated page, the data, another file, a replaced binary nor anonymous code)", got, want)
	}
}

// TestReleaseOwnFileMappings drops the resident pages of the test binary's
// own text and read-only data: the test reads them back from smaps.
func TestReleaseOwnFileMappings(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Skip("no /proc/self/exe:", err)
	}
	if len(ownFileMappings()) == 0 {
		t.Fatal("ownFileMappings found no read-only mapping of the test binary")
	}
	before := residentKB(t, exe)
	codeMu.Lock()
	releaseOwnFileMappings()
	codeMu.Unlock()
	after := residentKB(t, exe)
	// What runs between the release and the second read (this test, the
	// smaps reader, the runtime) faults a few pages back, one at a time.
	if after >= before/2 {
		t.Fatalf("the binary's read-only mappings kept %d of %d kB resident", after, before)
	}
}

// residentKB is the Rss of the read-only mappings of path, from smaps.
func residentKB(t *testing.T, path string) int {
	t.Helper()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	total, own := 0, false
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 6 && strings.Contains(f[0], "-"):
			own = f[5] == path && (f[1] == "r-xp" || f[1] == "r--p")
		case len(f) == 3 && f[0] == "Rss:" && own:
			kb, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			total += kb
		}
	}
	return total
}
