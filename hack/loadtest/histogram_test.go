package main

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestHistIndexRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	values := []uint64{0, 1, 127, 128, 255, 256, 257, 511, 512, 1000, 1 << 20, histMax}
	for range 10000 {
		values = append(values, rng.Uint64N(histMax+1)>>rng.UintN(40))
	}
	for _, v := range values {
		i := histIndex(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("histIndex(%d) = %d, outside [0, %d)", v, i, histBuckets)
		}
		lo, width := histBucket(i)
		if v < lo || v >= lo+width {
			t.Fatalf("value %d in bucket %d = [%d, %d)", v, i, lo, lo+width)
		}
		if lo >= 2*histSub && float64(width)/float64(lo) > 1.0/histSub {
			t.Fatalf("bucket %d = [%d, %d) is wider than 1/%d of its lower bound", i, lo, lo+width, histSub)
		}
	}
}

func TestHistogramPercentiles(t *testing.T) {
	// uniform returns n values spread evenly over [step, n*step].
	uniform := func(n int, step time.Duration) []time.Duration {
		var ds []time.Duration
		for i := 1; i <= n; i++ {
			ds = append(ds, time.Duration(i)*step)
		}
		return ds
	}
	repeat := func(n int, d time.Duration) []time.Duration {
		var ds []time.Duration
		for range n {
			ds = append(ds, d)
		}
		return ds
	}
	tests := []struct {
		name    string
		samples []time.Duration
		want    map[float64]time.Duration // percentile -> value
		wantMin time.Duration
		wantMax time.Duration
	}{
		{
			name:    "uniform 1..1000us",
			samples: uniform(1000, time.Microsecond),
			want: map[float64]time.Duration{
				0: time.Microsecond, 50: 500 * time.Microsecond, 90: 900 * time.Microsecond,
				99: 990 * time.Microsecond, 99.9: 999 * time.Microsecond, 100: 1000 * time.Microsecond,
			},
			wantMin: time.Microsecond,
			wantMax: 1000 * time.Microsecond,
		},
		{
			name:    "uniform 1..100000 x 10us",
			samples: uniform(100000, 10*time.Microsecond),
			want: map[float64]time.Duration{
				50: 500 * time.Millisecond, 90: 900 * time.Millisecond, 99: 990 * time.Millisecond,
				99.9: 999 * time.Millisecond, 99.99: 999900 * time.Microsecond,
			},
			wantMin: 10 * time.Microsecond,
			wantMax: time.Second,
		},
		{
			name:    "one value",
			samples: repeat(1000, 1234567*time.Nanosecond),
			want:    map[float64]time.Duration{50: 1234567, 99.9: 1234567},
			wantMin: 1234567,
			wantMax: 1234567,
		},
		{
			name:    "tail of 1% at 100ms",
			samples: append(repeat(990, time.Millisecond), repeat(10, 100*time.Millisecond)...),
			want: map[float64]time.Duration{
				50: time.Millisecond, 99: time.Millisecond, 99.01: 100 * time.Millisecond, 99.9: 100 * time.Millisecond,
			},
			wantMin: time.Millisecond,
			wantMax: 100 * time.Millisecond,
		},
		{
			name:    "small values are exact",
			samples: []time.Duration{3, 1, 2, 5, 4},
			want:    map[float64]time.Duration{20: 1, 40: 2, 50: 3, 60: 3, 80: 4, 100: 5},
			wantMin: 1,
			wantMax: 5,
		},
		{
			name:    "empty",
			want:    map[float64]time.Duration{50: 0, 99: 0},
			wantMin: 0,
			wantMax: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Record into two histograms and merge, to cover Merge too.
			var a, b Histogram
			for i, d := range tt.samples {
				if i%2 == 0 {
					a.Record(d)
				} else {
					b.Record(d)
				}
			}
			a.Merge(&b)
			if got := a.Count(); got != uint64(len(tt.samples)) {
				t.Errorf("Count() = %d, want %d", got, len(tt.samples))
			}
			for p, want := range tt.want {
				got := a.Percentile(p)
				if diff := math.Abs(float64(got - want)); diff > 0.01*float64(want) {
					t.Errorf("Percentile(%v) = %v, want %v within 1%%", p, got, want)
				}
			}
			if got := a.Min(); got != tt.wantMin {
				t.Errorf("Min() = %v, want %v", got, tt.wantMin)
			}
			if got := a.Max(); got != tt.wantMax {
				t.Errorf("Max() = %v, want %v", got, tt.wantMax)
			}
		})
	}
}

func TestHistogramClamps(t *testing.T) {
	var h Histogram
	h.Record(-time.Second)
	h.Record(100 * time.Hour)
	if got := h.Min(); got != 0 {
		t.Errorf("Min() = %v, want 0", got)
	}
	if got, want := h.Max(), time.Duration(histMax); got != want {
		t.Errorf("Max() = %v, want %v", got, want)
	}
}

// TestPercentilesReport checks the summary of a histogram that Result
// carries: every percentile, p95 included, in JSON and in the text line.
func TestPercentilesReport(t *testing.T) {
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	p := percentiles(&h)
	tests := []struct {
		name      string
		got, want float64 // microseconds
	}{
		{name: "p50", got: p.P50, want: 500e3},
		{name: "p90", got: p.P90, want: 900e3},
		{name: "p95", got: p.P95, want: 950e3},
		{name: "p99", got: p.P99, want: 990e3},
		{name: "p99.9", got: p.P999, want: 999e3},
		{name: "max", got: p.Max, want: 1000e3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if math.Abs(tt.got-tt.want) > 0.01*tt.want {
				t.Errorf("%s = %vus, want %vus within 1%%", tt.name, tt.got, tt.want)
			}
		})
	}
	doc, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]float64
	if err := json.Unmarshal(doc, &back); err != nil {
		t.Fatal(err)
	}
	if back["p95"] != p.P95 {
		t.Errorf("JSON p95 = %v, want %v (%s)", back["p95"], p.P95, doc)
	}
	line := p.String()
	for _, want := range []string{"p90 ", "p95 ", "p99 ", "p99.9 "} {
		if !strings.Contains(line, want) {
			t.Errorf("String() = %q, want it to contain %q", line, want)
		}
	}
	if i, j := strings.Index(line, "p90 "), strings.Index(line, "p95 "); i > j {
		t.Errorf("String() = %q: p95 before p90", line)
	}
}
