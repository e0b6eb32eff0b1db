package wardenctl

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// quick are bench flags that keep a run short; the tests check the output's
// shape, never the times.
var quick = []string{"--warm-up-time", "0.01", "--measurement-time", "20ms", "--num-samples", "5", "--num-resamples", "200"}

func TestBench(t *testing.T) {
	labels := policy(t, "labels")
	req := requestFile(t, `{"forbidden": "x"}`, false)
	dump := filepath.Join(t.TempDir(), "results")
	cel := `{"validations":[{"expression":"true"}]}`
	timeLine := regexp.MustCompile(`(?m)^  time:    \[\d+\.\d+ [nµm]?s \d+\.\d+ [nµm]?s \d+\.\d+ [nµm]?s\]`)
	tests := []struct {
		name   string
		args   []string
		labels []string // one block per policy, in order
		saved  bool
	}{
		{name: "waPC policy", args: []string{"-r", req, "--settings-json", `{"denied_labels":["forbidden"]}`, labels}, labels: []string{labels}},
		{name: "native CEL", args: []string{"-r", req, "--settings-json", cel, "builtin://cel"},
			labels: []string{"builtin://cel"}},
		{name: "results kept", args: []string{"-r", req, "--dump-results-to-disk=" + dump, "--settings-json", cel, "builtin://cel"}, labels: []string{"builtin://cel"}, saved: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newEnv(t).mustRun(append(append([]string{"bench"}, quick...), tc.args...)...)
			for _, l := range tc.labels {
				if !strings.Contains(r.stdout, l+"\n") {
					t.Errorf("no block for %s\n%s", l, r)
				}
			}
			if n := len(timeLine.FindAllString(r.stdout, -1)); n != len(tc.labels) {
				t.Errorf("%d time lines, want %d\n%s", n, len(tc.labels), r)
			}
			for _, want := range []string{"  spread:  min ", "  samples: 5 of "} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("no %q line\n%s", want, r)
				}
			}
			if tc.saved != strings.Contains(r.stdout, "  saved:   ") {
				t.Errorf("saved line: want %t\n%s", tc.saved, r)
			}
		})
	}
	// A second run with the results kept compares with the first.
	r := newEnv(t).mustRun(append(append([]string{"bench"}, quick...), "-r", req, "--dump-results-to-disk="+dump, "--settings-json", cel, "builtin://cel")...)
	if !regexp.MustCompile(`(?m)^  change:  [+-]\d+\.\d\d% \(previous mean `).MatchString(r.stdout) {
		t.Errorf("second run does not compare with the first\n%s", r)
	}
	if _, err := os.Stat(filepath.Join(dump, "builtin_cel.json")); err != nil {
		t.Error(err)
	}
}

func TestBenchErrors(t *testing.T) {
	req := requestFile(t, `{}`, false)
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--measurement-time", "soon"}, `--measurement-time: invalid time "soon"`},
		{[]string{"--warm-up-time", "-1"}, `--warm-up-time: invalid number of seconds "-1"`},
		{[]string{"--num-samples", "1"}, "--num-samples must be at least 2"},
		{[]string{"--num-resamples", "0"}, "--num-resamples must be at least 1"},
	}
	for _, tc := range tests {
		r := newEnv(t).run(append(append([]string{"bench", "-r", req}, tc.args...), "builtin://cel")...)
		if r.code != 2 {
			t.Errorf("%v: exit code %d, want 2\n%s", tc.args, r.code, r)
			continue
		}
		checkError(t, r, tc.wantErr)
	}
}

func TestSummarize(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	t.Run("constant samples", func(t *testing.T) {
		r := summarize([]float64{5, 5, 5, 5}, 100, rng)
		if r.Mean != 5 || r.Lower != 5 || r.Upper != 5 || r.StdDev != 0 || r.Median != 5 {
			t.Errorf("got %+v", r)
		}
	})
	t.Run("spread", func(t *testing.T) {
		samples := []float64{10, 12, 11, 30, 9, 10, 11}
		r := summarize(samples, 2000, rng)
		if r.Min != 9 || r.Max != 30 || r.Median != 11 {
			t.Errorf("min, median, max = %v, %v, %v; want 9, 11, 30", r.Min, r.Median, r.Max)
		}
		if math.Abs(r.Mean-13.285714) > 1e-5 {
			t.Errorf("mean %v, want 13.2857", r.Mean)
		}
		if !(r.Lower < r.Mean && r.Mean < r.Upper) || r.Lower < r.Min || r.Upper > r.Max {
			t.Errorf("interval [%v %v] around mean %v", r.Lower, r.Upper, r.Mean)
		}
		if math.Abs(r.StdDev-7.4322) > 1e-3 {
			t.Errorf("std dev %v, want 7.4322", r.StdDev)
		}
	})
}

func TestFormatAndParse(t *testing.T) {
	formats := []struct {
		ns   float64
		want string
	}{
		{12.345, "12.35 ns"}, {1234.5, "1.234 µs"}, {123456, "123.5 µs"}, {2.5e6, "2.500 ms"}, {3e9, "3.000 s"},
	}
	for _, tc := range formats {
		if got := formatNs(tc.ns); got != tc.want {
			t.Errorf("formatNs(%v) = %q, want %q", tc.ns, got, tc.want)
		}
	}
	seconds := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"5", 5 * time.Second, true}, {"0.5", 500 * time.Millisecond, true}, {"250ms", 250 * time.Millisecond, true},
		{"-1", 0, false}, {"x", 0, false}, {"NaN", 0, false},
	}
	for _, tc := range seconds {
		got, err := parseSeconds(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseSeconds(%q) = %v, %v; want %v, ok %t", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if got := safeName("registry://ghcr.io/a/b:v1"); got != "registry_ghcr.io_a_b_v1" {
		t.Errorf("safeName = %q", got)
	}
}
