package main

import (
	"math"
	"math/bits"
	"time"
)

// Histogram layout: values below 2*histSub nanoseconds have a bucket each;
// above, every power of two is split into histSub equal buckets, so a bucket is
// at most 1/histSub (0.78%) of its lower bound wide and its midpoint is within
// 0.39% of any value in it.
const (
	histSubBits = 7
	histSub     = 1 << histSubBits
	// histMax is the largest value recorded as is (about 18 minutes); larger
	// values are clamped to it.
	histMax     = 1<<40 - 1
	histBuckets = (40-histSubBits)*histSub + 2*histSub
)

// Histogram records durations with a bounded relative error and a fixed
// memory footprint (about 35 KiB). Min, max and mean are exact.
//
// A Histogram is not safe for concurrent use: give each goroutine its own and
// Merge them at the end.
type Histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      uint64
	min, max uint64
}

// histIndex returns the bucket of v, which must be at most histMax.
func histIndex(v uint64) int {
	shift := max(bits.Len64(v)-histSubBits-1, 0)
	return shift<<histSubBits + int(v>>shift)
}

// histBucket returns the lowest value of bucket i and the bucket's width.
func histBucket(i int) (lo, width uint64) {
	if i < 2*histSub {
		return uint64(i), 1
	}
	shift := i>>histSubBits - 1
	return uint64(i-shift<<histSubBits) << shift, 1 << shift
}

// Record adds one duration. Negative durations are recorded as 0.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	v = min(v, histMax)
	h.counts[histIndex(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += v
}

// Merge adds the values recorded in o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count returns the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Min returns the smallest value recorded, or 0.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max returns the largest value recorded, or 0.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the mean of the values recorded, or 0.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}

// Percentile returns the smallest recorded value v such that at least p% of
// the values are at most v (nearest rank), approximated by the middle of its
// bucket and kept within [Min, Max]. p is clamped to [0, 100]; an empty
// histogram returns 0.
func (h *Histogram) Percentile(p float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	p = min(max(p, 0), 100)
	rank := max(uint64(math.Ceil(p/100*float64(h.n))), 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, width := histBucket(i)
			v := lo + (width-1)/2
			return time.Duration(min(max(v, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
