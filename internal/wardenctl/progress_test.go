package wardenctl

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

func TestRenderProgress(t *testing.T) {
	tests := []struct {
		done, total int64
		want        string
	}{
		{0, 5_000_000, "downloading [>                             ]   0% 0.0 MB / 5.0 MB"},
		{2_500_000, 5_000_000, "downloading [===============>              ]  50% 2.5 MB / 5.0 MB"},
		{5_000_000, 5_000_000, "downloading [==============================] 100% 5.0 MB / 5.0 MB"},
		{1_234_567, -1, "downloading 1.2 MB"},
	}
	for _, tc := range tests {
		if got := renderProgress(tc.done, tc.total); got != tc.want {
			t.Errorf("renderProgress(%d, %d) = %q, want %q", tc.done, tc.total, got, tc.want)
		}
	}
}

// The bar is redrawn at most every progressInterval, and its line is
// cleared once the download completes.
func TestProgressBarThrottlesAndClears(t *testing.T) {
	var out bytes.Buffer
	clock := time.Unix(0, 0)
	p := &progressBar{w: &out, now: func() time.Time { return clock }}
	p.update(1, 10) // drawn: the first update
	p.update(2, 10) // too soon
	clock = clock.Add(progressInterval)
	p.update(3, 10) // drawn
	p.update(10, 10)
	got := out.String()
	if n := strings.Count(got, "downloading"); n != 2 {
		t.Errorf("drawn %d times, want 2: %q", n, got)
	}
	if !strings.HasSuffix(got, "\r\033[K") {
		t.Errorf("the line is not cleared at the end: %q", got)
	}
}

// Output that is not a terminal gets no bar.
func TestNoProgressWhenNotATerminal(t *testing.T) {
	if downloadProgress(&bytes.Buffer{}) != nil {
		t.Error("a progress bar on a buffer")
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if downloadProgress(f) != nil {
		t.Error("a progress bar on a regular file")
	}
}
