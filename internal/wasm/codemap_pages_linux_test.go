//go:build linux

package wasm

import (
	"slices"
	"testing"
)

func TestNewPages(t *testing.T) {
	r := func(start, end uintptr) codeRegion { return codeRegion{start << 12, end << 12} }
	for _, tc := range []struct {
		name              string
		now, before, want []codeRegion
	}{
		{"nothing new", []codeRegion{r(1, 3)}, []codeRegion{r(1, 3)}, nil},
		{"a new mapping", []codeRegion{r(1, 3), r(8, 9)}, []codeRegion{r(1, 3)}, []codeRegion{r(8, 9)}},
		// The kernel merged the new code with the mapping below it.
		{"merged above", []codeRegion{r(1, 5)}, []codeRegion{r(1, 3)}, []codeRegion{r(3, 5)}},
		{"merged between", []codeRegion{r(1, 9)}, []codeRegion{r(1, 3), r(6, 9)}, []codeRegion{r(3, 6)}},
		// A finalizer unmapped the lower half of a merged mapping: what is
		// left is a mapping with a new start, but no new page.
		{"split by an unmap", []codeRegion{r(2, 3)}, []codeRegion{r(1, 3)}, nil},
		{"split and merged", []codeRegion{r(2, 4)}, []codeRegion{r(1, 3)}, []codeRegion{r(3, 4)}},
		{"first compilation", []codeRegion{r(4, 6)}, nil, []codeRegion{r(4, 6)}},
	} {
		if got := newPages(tc.now, tc.before); !slices.Equal(got, tc.want) {
			t.Errorf("%s: newPages(%v, %v) = %v, want %v", tc.name, tc.now, tc.before, got, tc.want)
		}
	}
}
